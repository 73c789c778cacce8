"""`harness bench engine | matmul | eval | remote`: the benchmarks of the engine alone and
through the network (pyllm/enginebench.py, pyllm/matbench.py, harness/bench/evalmc.py,
harness/bench/network.py)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.common import user_errors
from harness.cli.options import engine_options, remote_engine


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
