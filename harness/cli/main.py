"""The `harness` command line.

Each subcommand lives in its own module and is imported only when it is used, so
`harness run` does not pay for numpy/pyllm and `harness --help` is instant. To add a
command, write a click command in its own module and list it in COMMANDS.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import click


def _default_cpus() -> int:
    """Harts of `--cpus` when it is not given: 4, as the course's QEMU (README, "Harts":
    what that costs); the environment variable HARNESS_CPUS sets another (the test suite
    pins 1 for the boots that do not choose)."""
    value = os.environ.get("HARNESS_CPUS", "4")
    if not value.isdigit() or not 1 <= int(value) <= 8:
        raise SystemExit(f"harness: HARNESS_CPUS={value!r}: give a hart count 1..8")
    return int(value)


DEFAULT_CPUS = _default_cpus()


def cpus_option(fn):  # type: ignore[no-untyped-def]
    """The `--cpus N` option shared by run, debug, bench, fuzz and stress."""
    return click.option("--cpus", type=click.IntRange(1, 8), default=DEFAULT_CPUS,
                        show_default=True,
                        help="Harts of the machine (1-8); each is a Unicorn instance, "
                             "scheduled round-robin on the emulation thread.")(fn)


def det_options(fn):  # type: ignore[no-untyped-def]
    """`--schedule SPEC`, `--record FILE`, `--replay FILE`, `--race`, `--race-locks` (run,
    debug): a deterministic machine (harness/run/det_options.py)."""
    fn = click.option("--race-locks", "race_locks", is_flag=True,
                      help="The lock checks of `harness race` only (they do not change the "
                           "schedule).")(fn)
    fn = click.option("--race", is_flag=True,
                      help="The race detectors of `harness race` on this run (data races and "
                           "lock checks; deterministic: --schedule, default random:1): each "
                           "finding is printed, and `harness debug` stops at it.")(fn)
    fn = click.option("--replay", type=click.Path(dir_okay=False, path_type=Path),
                      metavar="FILE",
                      help="Run a recording again: same schedule, console input, AI and "
                           "disk completions; checks the end matches (no model is "
                           "loaded).")(fn)
    fn = click.option("--record", type=click.Path(dir_okay=False, path_type=Path),
                      metavar="FILE",
                      help="Write what a replay needs to FILE (deterministic: "
                           "--schedule, default rr).")(fn)
    return click.option("--schedule", metavar="SPEC",
                        help="Deterministic machine: hart switches by a seeded schedule "
                             "(rr | random:SEED | pct:SEED[:DEPTH]), guest time from the "
                             "instruction count; the same SPEC gives the same run.")(fn)


def engine_options(fn):  # type: ignore[no-untyped-def]
    """`--engine URL` and `--engine-timeout SECONDS` (run, debug, bench, fuzz, stress): the AI
    device served by a remote OpenAI-compatible server (harness/engines/remote.py)."""
    fn = click.option("--engine-timeout", type=click.FloatRange(min=0, min_open=True),
                      metavar="SECONDS",
                      help="With --engine: a request fails (AI_ESLOW) after this long without "
                           "a byte from the server. Default: 60.")(fn)
    return click.option("--engine", "engine_url", metavar="URL",
                        help="Serve the AI device from an OpenAI-compatible server (vLLM, "
                             "harness serve) at http://HOST:PORT/v1 instead of the "
                             "in-process engine; --model names the served model.")(fn)


def remote_engine(url: str | None, timeout: float | None,
                  model: str | None):  # -> RemoteEngine | None
    """The --engine options checked (a one-line usage error), or None without --engine."""
    if url is None:
        if timeout is not None:
            raise click.UsageError("--engine-timeout needs --engine")
        return None
    if not model:
        raise click.UsageError("--engine needs --model NAME (the model the server serves)")
    from harness.engines.remote import RemoteEngine

    try:
        return RemoteEngine.parse(url, timeout)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--engine") from None


# name -> "module:attribute" of a click.Command; help text is read from the module's docstring
COMMANDS: dict[str, str] = {
    "run": "harness.cli.cmd_run:run",
    "top": "harness.cli.cmd_top:top",
    "debug": "harness.cli.cmd_debug:debug",
    "race": "harness.cli.cmd_race:race",
    "bench": "harness.cli.cmd_bench:bench",
    "fuzz": "harness.run.fuzz_stress:fuzz",
    "stress": "harness.run.fuzz_stress:stress",
    "serve": "harness.cli.cmd_serve:serve",
    "crashtest": "harness.disk.crashtest:crashtest",
    "imagefuzz": "harness.disk.imagefuzz:imagefuzz",
    "models": "harness.cli.cmd_models:models",
    "generate": "harness.cli.cmd_models:generate",
    "tokens": "harness.cli.cmd_models:tokens",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is invoked.

    `lazy_commands` maps a subcommand name to "module:attribute"; subclasses override it.
    """

    lazy_commands: dict[str, str] = COMMANDS

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy_commands.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not (exc.name and module_name.startswith(exc.name)):
                raise
            return _unavailable(name, str(exc))
        return getattr(module, attr)


def _unavailable(name: str, why: str) -> click.Command:
    """A stand-in for a command whose module is not installed."""

    def fail() -> None:
        raise click.ClickException(f"command '{name}' is not available ({why})")

    return click.Command(name, callback=fail, help=f"(not available: {why})")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """An xv6-class RISC-V kernel under Unicorn with a virtio AI device for LLM inference.

    \b
    harness run                      boot to an interactive shell (Ctrl-A X quits)
    harness run -c "echo hi | wc"    run commands in the guest and exit with their status
    harness run --model smol         boot with the AI device serving SmolLM2-135M
    harness serve --model smol       the engine as an OpenAI-compatible HTTP server
    harness debug                    the kernel stopped at its first instruction, gdb-style
    harness generate --model smol --text "The capital of France is"
    harness tokens encode --model smol "some text"
    harness models list | fetch smol
    """
