"""`harness bench`: benchmarks that print ratios against a reference measured in the same run.

Subcommands are imported lazily, like the top-level commands.
"""

from __future__ import annotations

import click

from harness.cli import LazyGroup

BENCH_COMMANDS: dict[str, str] = {
    "engine": "pyllm.bench:engine",
    "system": "harness.bench_system:system",
}


class BenchGroup(LazyGroup):
    """Lazy subcommands from BENCH_COMMANDS."""

    lazy_commands = BENCH_COMMANDS


@click.group(cls=BenchGroup)
def bench() -> None:
    """Benchmarks (each prints medians and ratios against a same-run reference).

    \b
    harness bench engine   pyllm vs llama.cpp vs numpy-f32: load, TTFT, TPOT
    harness bench system   boot time, syscall round trip, guest MIPS, idle host CPU
    """
