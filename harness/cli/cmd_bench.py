"""`harness bench`: benchmarks that print ratios against a reference measured in the same run.

This module only parses the options and calls the benchmarks, which live in harness/bench/
(one module each: lifecycle.py with no subcommand, system.py, service.py, fs.py, tokenizer.py,
prefix.py, qemu.py); the engine's and the watchers' subcommands are in bench_engine.py and
bench_guest.py beside this file (imported lazily).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from harness.cli.lazy import LazyGroup
from harness.cli.options import DEFAULT_CPUS, cpus_option, engine_options, need_file
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

BENCH_COMMANDS: dict[str, str] = {
    "engine": "harness.cli.bench_engine:engine",
    "eval": "harness.cli.bench_engine:evalmc",
    "matmul": "harness.cli.bench_engine:matmul",
    "monitor": "harness.cli.bench_guest:monitor",
    "race": "harness.cli.bench_guest:race",
    "remote": "harness.cli.bench_engine:remote",
    "speculate": "harness.cli.bench_engine:speculate",
    "timetravel": "harness.cli.bench_guest:timetravel",
}


class BenchGroup(LazyGroup):
    """The subcommands defined here, and the lazy ones of BENCH_COMMANDS."""

    lazy_commands = BENCH_COMMANDS

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self.commands.get(name) or super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> object:
        """A benchmark that cannot measure (BenchError) ends in its one-line message."""
        from harness.bench.errors import BenchError

        try:
            return super().invoke(ctx)
        except BenchError as exc:
            raise click.ClickException(str(exc)) from None


def _ints(lo: int, hi: int, what: str, example: str = "8,16,32") -> Any:
    """A click callback: a comma-separated list of integers in lo..hi (sorted, unique); the
    error names the real range and where it comes from (`what`)."""

    def parse(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
        try:
            xs = [int(x) for x in value.split(",") if x.strip()]
        except ValueError:
            raise click.BadParameter(f"'{value}' is not a comma-separated list of integers"
                                     ) from None
        bad = [x for x in xs if not lo <= x <= hi]
        if not xs or bad:
            raise click.BadParameter(
                f"'{value}': {what.format(range=f'{lo}..{hi}')}"
                + (f"; {', '.join(map(str, bad))} {'is' if len(bad) == 1 else 'are'} not"
                   if bad else "") + f". E.g. {example}")
        return sorted(set(xs))

    return parse


def _sweep_lens(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, int]:
    """--sweep-lens IN,OUT: one prompt length and one output length (2 or more: TPOT)."""
    try:
        n_in, n_out = (int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(f"'{value}' is not two integers IN,OUT. E.g. 8,16") from None
    if not 1 <= n_in <= LIMITS["prompt"] or not 2 <= n_out <= LIMITS["predict"]:
        raise click.BadParameter(f"'{value}': a sweep request has 1..{LIMITS['prompt']} prompt "
                                 f"tokens and generates 2..{LIMITS['predict']} (AI_MAX_TOKENS, "
                                 "AI_MAX_PREDICT in kernel_c/ai.h; TPOT needs 2). E.g. 8,16")
    return n_in, n_out


def _ai_limits() -> dict[str, int]:
    """The AI service's limits, from kernel_c/ai.h (the one definition)."""
    from harness.abi import cheader

    ai = cheader.load("ai.h")
    return {"prompt": ai["AI_MAX_TOKENS"], "predict": ai["AI_MAX_PREDICT"]}


LIMITS = _ai_limits()
MAX_CLIENTS = 32  # aibench -c


@click.group(cls=BenchGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--models", "-m", default="smol,qwen", show_default=True,
              help="Comma-separated models: registry names (smol, qwen) or paths to a .gguf "
                   "file / HF checkpoint folder. A missing synthetic qwen is created "
                   "(harness models synth qwen; skipped with a message under --quick).")
@click.option("--input-lens", default="8,16,32,64,128", show_default=True,
              callback=_ints(1, LIMITS["prompt"], "prompts must be {range} tokens (the AI "
                             "service's limit, AI_MAX_TOKENS in kernel_c/ai.h)"),
              help=f"Prompt lengths in tokens (1..{LIMITS['prompt']}, the AI service's limit).")
@click.option("--output-lens", default="8,16,32", show_default=True,
              callback=_ints(1, LIMITS["predict"], "a request generates {range} tokens "
                             "(AI_MAX_PREDICT in kernel_c/ai.h)"),
              help="Generated tokens per request (TPOT needs 2 or more).")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Interleaved rounds: requests per (model, input, output) and vantage.")
@click.option("--concurrency", default="1,2,4,8,16", show_default=True,
              callback=_ints(1, MAX_CLIENTS, "aibench runs {range} concurrent clients",
                             "1,2,4,8,16"),
              help="Concurrent clients of the sweep (guest: aibench -c N, 1..32). More "
                   "clients than the kernel's 8 request slots show back-pressure.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-results"), show_default=True,
              help="Folder for report.md, results.json/.csv, requests.csv and the PNG plots.")
@click.option("--quick", is_flag=True,
              help="A few minutes: input 8,16,32 and output 8,16,32 (the assignment's), 1 rep, "
                   "clients 1,16 (one "
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
@click.option("--sweep-lens", default="32,16", show_default=True, callback=_sweep_lens,
              help="Prompt and generated tokens of each request of the concurrency sweep, "
                   "e.g. 8,16 for aibench's defaults (a longer prompt gives 8 clients more "
                   "compute-bound prefill per generated token).")
@click.option("--no-guest", is_flag=True,
              help="Skip the guest path (engine and load figures only).")
@click.option("--no-llamacpp", is_flag=True, help="Skip llama.cpp even if it is installed.")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
@click.option("--no-tokenizer", is_flag=True,
              help="Skip the guest tokenizer's cost and the time to the first character.")
@click.option("--no-prefix", is_flag=True, help="Skip the prefix-cache section.")
@engine_options
@click.pass_context
def bench(ctx: click.Context, models: str, input_lens: list[int], output_lens: list[int],
          reps: int, concurrency: list[int], out: Path, quick: bool, load_reps: int, cold: str,
          per_client: int, sweep_lens: tuple[int, int], no_guest: bool, no_llamacpp: bool,
          no_plots: bool, no_tokenizer: bool = False, no_prefix: bool = False,
          engine_url: str | None = None, engine_timeout: float | None = None) -> None:
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
    harness bench fs               file-system throughput with the log against without it
    harness bench tokenizer        the guest tokenizer vs HF / tiktoken; first character vs TTFT
    harness bench prefix           TTFT with the prefix cache vs without: shared prefix
                                   0..100 %, cold vs warm, a conversation per turn; memory
    harness bench --engine URL     the lifecycle through an OpenAI-compatible server: TTFT
                                   from the server, an HTTP client and the guest (HTTP's share)
    harness bench remote           a load run: --machines M x --clients C against one server
    harness bench speculate        TPOT with speculative decoding vs without; 8 clients
    harness bench qemu --xv6 PATH  ours vs xv6-riscv on QEMU, same run: getpid, fork, pipe,
                                   exec from one source; xv6's usertests on both

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
    if engine_url is not None:
        _network(ctx, models, input_lens, output_lens, reps, out, engine_url, engine_timeout)
        return
    from harness.bench.command import apply_quick, main
    from harness.bench.lifecycle_results import Options

    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise click.BadParameter("name at least one model", param_hint="--models")
    opts = Options(models=names, input_lens=input_lens, output_lens=output_lens, reps=reps,
                   concurrency=concurrency, out=out, quick=quick, cold=cold,
                   guest=not no_guest, llamacpp=not no_llamacpp, load_reps=load_reps,
                   per_client=per_client, conc_in=sweep_lens[0], conc_out=sweep_lens[1],
                   plots=not no_plots, tokenizer=not no_tokenizer, prefix=not no_prefix)
    if quick:
        given = {k for k in ("input_lens", "output_lens", "reps", "concurrency", "load_reps",
                             "per_client")
                 if ctx.get_parameter_source(k) is not click.core.ParameterSource.DEFAULT}
        apply_quick(opts, given)
    try:
        main(opts)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _network(ctx: click.Context, models: str, input_lens: list[int], output_lens: list[int],
             reps: int, out: Path, url: str, timeout: float | None) -> None:
    """`bench --engine URL`: harness/bench/network.py's network section (the served models
    unless --models is given; the middle input and output lengths)."""
    from harness.bench.errors import BenchError
    from harness.bench.network import network_main
    from harness.cli.options import remote_engine
    from harness.engines.remote import EngineError

    given = ctx.get_parameter_source("models") is not click.core.ParameterSource.DEFAULT
    names = [m.strip() for m in models.split(",") if m.strip()] if given else None
    remote_engine(url, timeout, "server")  # the URL checked in one line
    try:
        click.echo(network_main(url, timeout, names, reps, input_lens[len(input_lens) // 2],
                                output_lens[len(output_lens) // 2], out))
    except (EngineError, BenchError) as exc:
        raise click.ClickException(str(exc)) from None


def _cpus_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a list of hart counts like 1,2,4") from None
    if not out or any(not 1 <= n <= 8 for n in out):
        raise click.BadParameter("hart counts are 1..8")
    return out


def _guest_files(kernel: Path, fs: Path) -> None:
    need_file("kernel", kernel, "build it with `make build`")
    need_file("disk image", fs, "build it with `make build`")


def _guest_options(command: Any) -> Any:
    """--kernel and --fs: the guest a subcommand boots."""
    command = click.option("--fs", type=click.Path(dir_okay=False, path_type=Path),
                           default=DEFAULT_FS, show_default="build/fs.img")(command)
    return click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
                        default=DEFAULT_KERNEL, show_default="build/kernel/kernel.elf")(command)


@bench.command()
@click.option("--cpus", "cpus", default=str(DEFAULT_CPUS), show_default=True, callback=_cpus_list,
              metavar="N[,N...]", help="Hart counts to measure, e.g. 1,2,4.")
@click.option("--reps", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Interleaved repetitions of every measurement (medians are reported).")
@click.option("--idle-seconds", type=click.FloatRange(0.5, 600), default=5.0,
              show_default=True, help="How long to watch the idle guest's host CPU use.")
@_guest_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the figures to this JSON file.")
def system(cpus: list[int], reps: int, idle_seconds: float, kernel: Path, fs: Path,
           json_path: Path | None) -> None:
    """Boot time, guest MIPS, syscall round trip, fork, pipe, context switch, IPI wake-up and
    idle host CPU of the machine, for each hart count of --cpus, against references measured
    in the same run: the same loop on a bare Unicorn, the trap floor (an ecall loop with no
    kernel), the minimal kernel path (a Linux-style stub: the least any kernel's getpid costs
    here), one CSR instruction, the MMIO floor."""
    import json
    import sys

    from harness.bench import system as bench_system
    from harness.bench.errors import BenchError

    _guest_files(kernel, fs)
    try:
        data = bench_system.run(cpus, reps, idle_seconds, kernel, fs, lambda it: click.progressbar(
            it, label="measuring", file=sys.stderr))
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(bench_system.format_report(data))
    if json_path:
        json_path.write_text(json.dumps(data, indent=2) + "\n")


@bench.command()
@click.option("--model", "-m", default="smol", show_default=True,
              help="smol, qwen, or a path (the model the device and the engine both serve).")
@click.option("--reps", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Rounds; each boots the guest once and sends every prompt --pairs times, "
                   "each guest request next to an engine-only one.")
@click.option("--pairs", type=click.IntRange(1, 20), default=2, show_default=True,
              help="Requests per prompt and round on each path.")
@click.option("--tokens", "-n", type=click.IntRange(2, 512), default=32, show_default=True,
              help="Tokens generated per request (>= 2, for TPOT).")
@click.option("--no-busy", is_flag=True, help="Skip the busy-guest coexistence check.")
@_guest_options
@click.option("--json", "as_json", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every measurement to this JSON file.")
@cpus_option
def service(model: str, reps: int, pairs: int, tokens: int, no_busy: bool, kernel: Path,
            fs: Path, as_json: Path | None, cpus: int = 1) -> None:
    """TTFT and TPOT through the guest vs the engine alone (medians, differences, ratios).

    \b
    Each round boots the guest with `llmrun --timing --stdin` and feeds it the prompts one
    line at a time; right before or after each guest request (alternating) the same prompt
    goes to the engine alone, so every pair is measured under the same host load. A second
    boot per round does the same beside a busy guest process (sysbench cpu).
    """
    import sys

    from harness.bench import service as bench_service
    from harness.bench.errors import BenchError

    _guest_files(kernel, fs)
    try:
        rep = bench_service.run(model, reps, pairs, tokens, not no_busy, kernel, fs,
                                lambda msg: click.echo(msg, err=True), cpus=cpus)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(bench_service.format_report(rep))
    if as_json is not None:
        bench_service.write_json(rep, as_json)
    if not all(p.same_ids for p in rep.pairs):
        click.echo("ERROR: the guest's ids differ from the engine's", err=True)
        sys.exit(1)


@bench.command()
@click.option("--files", "-n", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Create/write/delete cycles per boot.")
@click.option("--reps", type=click.IntRange(1, 20), default=3, show_default=True)
@_guest_options
def fs(files: int, reps: int, kernel: Path, fs: Path) -> None:
    """File-system throughput with the log against without it (create, write, delete)."""
    from harness.bench import fs as bench_fs
    from harness.bench.errors import BenchError

    _guest_files(kernel, fs)
    try:
        r = bench_fs.run_bench_fs(files, reps, kernel=kernel, fs=fs)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(bench_fs.format_report(r, reps))


@bench.command()
@click.option("--models", "-m", default="smol,qwen", show_default=True,
              help="Comma-separated models (registry names or paths).")
@click.option("--size", type=click.IntRange(1_000, 10_000_000), default=300_000,
              show_default=True, help="Characters of the sample text encoded.")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Encodings of the text on each side (the best counts).")
@click.option("--first-reps", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Guest requests behind each first-character median.")
@click.option("--guest", is_flag=True, help="Also time `tok -t` in the guest (slow).")
@click.option("--no-first", is_flag=True,
              help="Skip the time to the first character (no guest boot).")
@_guest_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the figures to this JSON file.")
def tokenizer(models: str, size: int, reps: int, first_reps: int, guest: bool,
              no_first: bool, kernel: Path, fs: Path, json_path: Path | None) -> None:
    """The guest tokenizer's µs per token against HF tokenizers / tiktoken, and the time to
    the first character on the console against TTFT (llmrun --stream --text)."""
    import json

    from harness.bench import tokenizer as bench_tokenizer

    if not no_first or guest:
        _guest_files(kernel, fs)
    rep = bench_tokenizer.run([m.strip() for m in models.split(",") if m.strip()], size, reps,
                              first_reps, guest, kernel=kernel, fs=fs, first=not no_first,
                              say=lambda m: click.echo(m, err=True))
    click.echo("\n".join(bench_tokenizer.markdown(rep)))
    if json_path:
        json_path.write_text(json.dumps(rep.as_dict(), indent=2) + "\n")
    if not rep.costs:
        raise click.ClickException("no model measured: " + "; ".join(rep.skipped.values()))


@bench.command()
@click.option("--models", "-m", default="smol,qwen", show_default=True,
              help="Comma-separated models (registry names or paths); a missing synthetic "
                   "Qwen is skipped with the command that writes it.")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Interleaved rounds (medians are reported).")
@click.option("--prompt-len", type=click.IntRange(2, LIMITS["prompt"]),
              default=LIMITS["prompt"], show_default=True,
              help="Tokens of the shared-prefix prompts.")
@click.option("--lengths", default="128,192,255", show_default=True,
              callback=_ints(2, LIMITS["prompt"], "prompts must be {range} tokens (AI_MAX_TOKENS"
                             " in kernel_c/ai.h)", "128,192,255"),
              help="Prompt lengths of the cold / warm comparison.")
@click.option("--turns", type=click.IntRange(2, 5), default=5, show_default=True,
              help="Turns of the conversation (32 user + 16 answer tokens each: 5 fit in "
                   "the service's 255-token prompt).")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for prefix.md, prefix.json and prefix_cache.png.")
@click.option("--no-plots", is_flag=True, help="Do not draw the plot.")
@click.option("--no-guest", is_flag=True, help="Skip the cold / warm pair through the guest.")
@_guest_options
def prefix(models: str, reps: int, prompt_len: int, lengths: list[int], turns: int,
           out: Path | None, no_plots: bool, no_guest: bool, kernel: Path, fs: Path) -> None:
    """TTFT with the prefix cache against without it: against the shared-prefix fraction
    (0..100 %), cold vs warm at 3 prompt lengths, per turn of a conversation; its memory."""
    import json

    from harness.bench import prefix as bench_prefix

    opts = bench_prefix.Options([m.strip() for m in models.split(",") if m.strip()], reps,
                                prompt_len, lengths=tuple(lengths), turns=turns)
    if not no_guest:
        _guest_files(kernel, fs)
    try:
        rep = bench_prefix.run(opts, say=lambda m: click.echo(m, err=True),
                               guest=None if no_guest else (kernel, fs))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    png = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        from harness.bench.plots import prefix_cache

        png = None if no_plots else prefix_cache(rep, out)
        (out / "prefix.json").write_text(json.dumps(rep.as_dict(), indent=1) + "\n")
        (out / "prefix.md").write_text("\n".join(bench_prefix.markdown(rep, png)))
    click.echo("\n".join(bench_prefix.markdown(rep, png)))
    if not rep.models:
        raise click.ClickException("no model measured: " + "; ".join(rep.skipped.values()))


def _iters(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, int]:
    from harness.bench.qemu import ITERS

    out = dict(ITERS)
    for item in filter(None, (v.strip() for v in value.split(","))):
        mode, _, n = item.partition("=")
        if mode not in ITERS or not n.isdigit() or int(n) < 1:
            raise click.BadParameter(f"'{item}': expected MODE=N with MODE one of "
                                     f"{', '.join(ITERS)} and N >= 1")
        out[mode] = int(n)
    return out


@bench.command()
@click.option("--xv6", "xv6", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="An xv6-riscv checkout (git clone https://github.com/mit-pdos/xv6-riscv); "
                   "it is copied and built in a scratch folder, never changed.")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Repetitions of the micro-benchmarks, alternating the machines.")
@click.option("--ut-reps", type=click.IntRange(0, 20), default=1, show_default=True,
              help="Repetitions of the usertests (0: none).")
@click.option("--tests", default="",
              help="Comma-separated xv6 usertests to run (default: all of quicktests[] and "
                   "slowtests[]).")
@click.option("--quick", is_flag=True, help="Leave xv6's slow tests out.")
@click.option("--iters", default="", callback=_iters, metavar="MODE=N,...",
              help="Loop counts of the micro-benchmarks, e.g. getpid=100000,fork=2000 "
                   "(defaults: about a second each on ours).")
@click.option("--no-own", is_flag=True, help="Skip our own full usertests.")
@click.option("--timeout", type=click.FloatRange(10, 7200), default=900.0, show_default=True,
              help="Seconds one shell command line may take on either machine.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-results"), show_default=True,
              help="Folder for qemu.json and qemu.md.")
@_guest_options
def qemu(xv6: Path, reps: int, ut_reps: int, tests: str, quick: bool, iters: dict[str, int],
         no_own: bool, timeout: float, out: Path, kernel: Path, fs: Path) -> None:
    """Ours (1 hart) against xv6-riscv on QEMU (-smp 1), in one run, alternating.

    \b
    getpid, fork + exit + wait, pipe ping-pong, fork + exec + wait: user_c/xv6/xv6bench.c
    built for both, each loop timed from the host between two console lines; xv6's own
    usertests.c, test by test, on both machines (pass/fail, time of the tests passing on
    both); our own usertests. Needs qemu-system-riscv64 (apt-get install qemu-system-misc).
    """
    from harness.bench import qemu as bench_qemu
    from harness.bench.errors import BenchError

    _guest_files(kernel, fs)
    names = [t.strip() for t in tests.split(",") if t.strip()] or None
    opts = bench_qemu.Options(xv6=xv6, kernel=kernel, fs=fs, reps=reps, ut_reps=ut_reps,
                              tests=names, quick=quick, iters=iters, timeout=timeout,
                              own=not no_own)
    try:
        data = bench_qemu.run(opts, say=lambda m: click.echo(m, err=True))
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    bench_qemu.write(data, out)
    click.echo(bench_qemu.format_report(data))
    click.echo(f"wrote {out / 'qemu.json'} and {out / 'qemu.md'}", err=True)
