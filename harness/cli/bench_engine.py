"""`harness bench engine | matmul | eval | remote | speculate`: the benchmarks of the engine
alone and through the network (pyllm/enginebench.py, pyllm/matbench.py, harness/bench/evalmc.py,
harness/bench/network.py, harness/bench/speculate.py)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.common import user_errors
from harness.cli.options import engine_options, remote_engine
from pyllm.request import DEFAULT_SPECULATE


@click.command()
@click.option("--model", "-m", default="smol", show_default=True,
              help="model for pyllm and numpy-f32 (llama.cpp runs only for GGUF files)")
@click.option("--threads", type=click.IntRange(1, 16), default=2, show_default=True,
              help="threads for every engine")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True,
              help="interleaved rounds (medians are reported)")
@click.option("--ttft", "ttft_lens", default="8,32,128", show_default=True,
              help="prompt lengths for TTFT, comma-separated")
@click.option("--gen", type=click.IntRange(2), default=32, show_default=True,
              help="decode steps for TPOT (after a 16-token prompt)")
@click.option("--busy/--no-busy", default=True, show_default=True,
              help="also measure with a spinning process on the other core")
@click.option("--no-llamacpp", is_flag=True, help="skip llama.cpp even if installed")
@click.option("--no-numpy", is_flag=True, help="skip the numpy-f32 reference")
@click.option("--quick", is_flag=True, help="1 round, TTFT at 8 and 128, 16 steps")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="also write every sample to this JSON file")
def engine(model: str, threads: int, rounds: int, ttft_lens: str, gen: int, busy: bool,
           no_llamacpp: bool, no_numpy: bool, quick: bool, json_path: str | None) -> None:
    """pyllm vs llama.cpp vs numpy-f32: load, TTFT, TPOT (idle and other core busy)."""
    from pyllm.enginebench import engine_report

    lens = [int(x) for x in ttft_lens.split(",") if x.strip()]
    if quick:
        rounds, lens, gen = 1, [8, 128], 16
    with user_errors():
        click.echo(engine_report(model, threads, rounds, lens, gen, busy=busy,
                                 llamacpp=not no_llamacpp, numpy=not no_numpy,
                                 json_path=json_path,
                                 say=lambda m: click.echo(m, err=True)))


@click.command("matmul")
@click.option("-m", "--models", default="smol,qwen", show_default=True,
              help="Comma-separated registry names or paths.")
@click.option("--rows", default="1,2,4,8", show_default=True,
              help="Activation rows (sequences in one decode step).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 16),
              help="Threads of the kernels' pool.")
@click.option("--steps", default=0, show_default=True, type=click.IntRange(0, 10000),
              help="Also time this many alternating 1-sequence and R-sequence decode steps "
                   "of each model (R = the largest --rows).")
def matmul(models: str, rows: str, threads: int, steps: int) -> None:
    """GOP/s of the int8 matmul for 1..8 rows on a model's matrices, against the VNNI peak and
    the roofline's GEMM probe measured in the same run."""
    from pyllm.matbench import run, step_report

    ns = [int(r) for r in rows.split(",") if r]
    names = [m for m in models.split(",") if m]
    with user_errors():
        for line in run(names, ns, threads):
            click.echo(line)
        for name in names if steps else []:
            for line in step_report(name, max(ns), threads, steps):
                click.echo(line)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", "-m", default="smol", show_default=True,
              help="The model to serve (a name or a path, as for `harness serve`).")
@click.option("--backends", default="c,numpy-f32", show_default=True,
              help="Comma-separated engine paths, each served in turn: c (int8), numpy-q8, "
                   "numpy-f32 (exact; the reference, put it last).")
@click.option("--limit", type=click.IntRange(1), help="Score only the first N questions.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for lm-eval's outputs and logs, eval.md and eval.json "
                   "(default: a temporary one).")
def evalmc(model: str, backends: str, limit: int | None, out: Path | None) -> None:
    """A multiple-choice set scored by lm-evaluation-harness against `harness serve`: the
    int8 path's accuracy beside the exact f32 path's, one run."""
    from harness.bench.evalmc import LABELS, evaluate

    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    bad = [b for b in chosen if b not in LABELS]
    if not chosen or bad:
        raise click.BadParameter(f"unknown path(s) {', '.join(bad) or '(none)'}: give some of "
                                 f"{', '.join(LABELS)}", param_hint="--backends")
    click.echo("\n".join(evaluate(model, chosen, limit, out,
                                  say=lambda m: click.echo(m, err=True))))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--machines", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Harness machines, each a separate `harness run --engine` process.")
@click.option("--clients", "-c", type=click.IntRange(1, 32), default=8, show_default=True,
              help="aibench clients per machine.")
@click.option("--per-client", "-n", type=click.IntRange(1, 64), default=3,
              show_default=True, help="Requests per client.")
@click.option("--prompt", "-p", "n_in", type=click.IntRange(1, 512), default=32,
              show_default=True, help="Prompt tokens.")
@click.option("--tokens", "-g", "n_out", type=click.IntRange(1, 256), default=16,
              show_default=True, help="Tokens generated per request.")
@click.option("--model", "-m", required=True, help="The served model's name.")
@engine_options
def remote(machines: int, clients: int, per_client: int, n_in: int, n_out: int,
           model: str, engine_url: str | None, engine_timeout: float | None) -> None:
    """A load run: M machines x C clients against one OpenAI-compatible server.

    \b
    harness serve --model smol --port 8000 &
    harness bench remote --machines 4 --clients 8 --engine http://127.0.0.1:8000/v1 -m smol

    Every machine's aibench must pass and its reference ids equal the in-process
    engine's (when this host has the model); prints throughput and P99 TTFT, against
    one machine with the same clients in the same run.
    """
    from harness.bench.network import format_load, load
    from harness.engines.remote import EngineError

    if engine_url is None:
        raise click.UsageError("bench remote needs --engine URL")
    engine = remote_engine(engine_url, engine_timeout, model)
    try:
        rep = load(engine, model, machines=machines, clients=clients, per_client=per_client,
                   n_in=n_in, n_out=n_out, log=lambda msg: click.echo(msg, err=True))
    except EngineError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_load(rep))
    if not rep.passed:
        raise click.ClickException("the load run failed (see above)")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--models", "-m", default="smol,qwen", show_default=True,
              help="Comma-separated models (registry names or paths); qwen is Qwen3.5-0.8B, "
                   "its synthetic full-size weights unless a real checkpoint is installed "
                   "(labelled as such); a missing one is skipped with the command that "
                   "writes it.")
@click.option("--rounds", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Rounds; each runs every workload without and with speculation, back to "
                   "back (medians and median ratios are reported).")
@click.option("--tokens", "-n", type=click.IntRange(2, 2048), default=128, show_default=True,
              help="Most new tokens per request (greedy; a request may stop earlier).")
@click.option("--speculate", "-k", type=click.IntRange(1, 16), default=DEFAULT_SPECULATE,
              show_default=True, help="The longest draft (GenParams.speculate).")
@click.option("--clients", "-c", type=click.IntRange(1, 32), default=8, show_default=True,
              help="Concurrent requests of the throughput part.")
@click.option("--quick", is_flag=True,
              help="A fast check: one round, shorter answers (options given explicitly "
                   "still win).")
@click.option("--no-throughput", is_flag=True, help="Skip the concurrent clients.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-results"), show_default=True,
              help="Folder for speculate.md, speculate.json and speculate.png.")
@click.option("--no-plots", is_flag=True, help="Do not draw speculate.png.")
@click.pass_context
def speculate(ctx: click.Context, models: str, rounds: int, tokens: int, speculate: int,
              clients: int, quick: bool, no_throughput: bool, out: Path,
              no_plots: bool) -> None:
    """TPOT with speculative decoding against without: the course's demo question, a prompt
    whose answer quotes a paragraph given in it, a repeated request; and concurrent clients'
    throughput. Checks the targets (quote and repeat at most 0.5x, no workload over 1.03x,
    the clients' throughput not lower) and writes the report, its JSON and a plot."""
    from harness.bench import speculate as bench_speculate

    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise click.BadParameter("name at least one model", param_hint="--models")
    sizes = {"rounds": rounds, "tokens": tokens}
    if quick:  # its sizes, where the option was not given
        sizes.update({k: v for k, v in bench_speculate.QUICK.items()
                      if ctx.get_parameter_source(k) is click.core.ParameterSource.DEFAULT})
    opts = bench_speculate.Options(names, **sizes, speculate=speculate, clients=clients,
                                   throughput=not no_throughput, out=out, plots=not no_plots)
    rep = bench_speculate.main(opts, say=lambda m: click.echo(m, err=True))
    click.echo(bench_speculate.format_report(rep))
    if not rep.models:
        raise click.ClickException("no model measured: " + "; ".join(rep.skipped.values()))
