"""The options several commands share (--cpus, --engine, the deterministic machine's) and
their checks."""

from __future__ import annotations

import os
import re
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


def parse_size(text: str) -> int:
    """"128M", "1G", "65536" -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]?)(?:i?[Bb])?\s*", text)
    if not m:
        raise ValueError(f"'{text}' is not a size like 128M or 1G")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def ram_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        size = parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if not (16 << 20) <= size <= (2 << 30) or size % 4096:
        raise click.BadParameter(f"{value}: RAM must be 16M..2G in whole 4 KiB pages")
    return size


def need_file(what: str, path: Path, hint: str) -> Path:
    if not path.is_file():
        raise click.ClickException(f"{what} not found: {path} ({hint})")
    return path


def check_model(model: str) -> None:
    """Unknown names and missing files: one line and exit status 1, before booting."""
    from harness.run.hostapi import check_model
    from pyllm.errors import PyllmError

    try:
        check_model(model)
    except PyllmError as e:
        raise click.ClickException(str(e)) from None
