"""`harness bench`: benchmarks that print ratios against a reference measured in the same run.

With no subcommand it runs the lifecycle bench (harness/bench/): Part 1 of the lab, measured
and explained. Subcommands are imported lazily, like the top-level commands.
"""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli import LazyGroup

BENCH_COMMANDS: dict[str, str] = {
    "engine": "pyllm.bench:engine",
    "system": "harness.bench_system:system",
    "service": "harness.bench_service:service",
    "fs": "harness.bench_fs:fs",
    "monitor": "harness.bench.monitor:monitor",
}


class BenchGroup(LazyGroup):
    """Lazy subcommands from BENCH_COMMANDS."""

    lazy_commands = BENCH_COMMANDS


def _ints(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        xs = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of integers") from None
    if not xs or min(xs) < 1:
        raise click.BadParameter(f"'{value}': give positive integers, e.g. 8,16,32")
    return sorted(set(xs))


@click.group(cls=BenchGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--models", "-m", default="smol,qwen", show_default=True,
              help="Comma-separated models: registry names (smol, qwen) or paths to a .gguf "
                   "file / HF checkpoint folder. A missing synthetic qwen is created "
                   "(harness models synth qwen; skipped with a message under --quick).")
@click.option("--input-lens", default="8,16,32,64,128", show_default=True, callback=_ints,
              help="Prompt lengths in tokens (1..255, the AI service's limit).")
@click.option("--output-lens", default="8,16,32", show_default=True, callback=_ints,
              help="Generated tokens per request.")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Interleaved rounds: requests per (model, input, output) and vantage.")
@click.option("--concurrency", default="1,2,4,8,16", show_default=True, callback=_ints,
              help="Concurrent clients of the sweep (guest: aibench -c N, 1..32). More "
                   "clients than the kernel's 8 request slots show back-pressure.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-results"), show_default=True,
              help="Folder for report.md, results.json/.csv, requests.csv and the PNG plots.")
@click.option("--quick", is_flag=True,
              help="A minute or two: input 8,32,128, output 8,16, 1 rep, clients 1,16 (one "
                   "request each), one cold and one warm load (options given explicitly still "
                   "win).")
@click.option("--load-reps", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Cold and warm loads per model (each in a fresh process).")
@click.option("--cold", type=click.Choice(["fadvise", "drop_caches"]), default="fadvise",
              show_default=True,
              help="How to drop the weights from the page cache before a cold load: "
                   "posix_fadvise(DONTNEED) on the weight files, or (root) "
                   "echo 1 > /proc/sys/vm/drop_caches for the whole machine.")
@click.option("--per-client", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Requests each client of the concurrency sweep sends.")
@click.option("--no-guest", is_flag=True,
              help="Skip the guest path (engine and load figures only).")
@click.option("--no-llamacpp", is_flag=True, help="Skip llama.cpp even if it is installed.")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
@click.pass_context
def bench(ctx: click.Context, models: str, input_lens: list[int], output_lens: list[int],
          reps: int, concurrency: list[int], out: Path, quick: bool, load_reps: int, cold: str,
          per_client: int, no_guest: bool, no_llamacpp: bool, no_plots: bool) -> None:
    """The inference lifecycle: load time, TTFT, TPOT, roofline, concurrency.

    \b
    harness bench                  SmolLM2 and Qwen3.5 (synthetic): load cold/warm, TTFT and
                                   TPOT over input 8..128 x output 8..32 tokens from the guest
                                   (aibench), the AI device and the engine alone; roofline;
                                   concurrency sweep; report.md + JSON/CSV + plots in --out
    harness bench --quick          the same in a minute or two
    harness bench engine           pyllm vs llama.cpp vs numpy-f32: load, TTFT, TPOT
    harness bench system           boot time, syscall round trip, guest MIPS, idle host CPU
    harness bench service          TTFT/TPOT through the guest's AI service vs the engine alone

    Each metric's start and stop are defined in harness/bench/metrics.py and docs/BENCH.md.
    """
    if ctx.invoked_subcommand is not None:
        defaults = {p.name: p.default for p in ctx.command.params}
        changed = [k for k in defaults if ctx.get_parameter_source(k) is not
                   click.core.ParameterSource.DEFAULT]
        if changed:
            raise click.UsageError(f"options of the lifecycle bench ({', '.join(changed)}) "
                                   f"do not apply to 'bench {ctx.invoked_subcommand}'")
        return
    from harness.bench.command import apply_quick, main
    from harness.bench.lifecycle import Options

    if max(input_lens) > 255:
        raise click.BadParameter("prompts of at most 255 tokens (AI_MAX_TOKENS)",
                                 param_hint="--input-lens")
    if max(concurrency) > 32:
        raise click.BadParameter("at most 32 clients (aibench's limit)",
                                 param_hint="--concurrency")
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise click.BadParameter("name at least one model", param_hint="--models")
    opts = Options(models=names, input_lens=input_lens, output_lens=output_lens, reps=reps,
                   concurrency=concurrency, out=out, quick=quick, cold=cold,
                   guest=not no_guest, llamacpp=not no_llamacpp, load_reps=load_reps,
                   per_client=per_client, plots=not no_plots)
    if quick:
        given = {k for k in ("input_lens", "output_lens", "reps", "concurrency", "load_reps",
                             "per_client")
                 if ctx.get_parameter_source(k) is not click.core.ParameterSource.DEFAULT}
        apply_quick(opts, given)
    try:
        main(opts)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
