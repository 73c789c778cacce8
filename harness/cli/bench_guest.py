"""`harness bench monitor | race | timetravel`: what watching the machine costs
(harness/bench/monitor.py, race.py, timetravel_cost.py)."""

from __future__ import annotations

import click

from harness.bench.timetravel_cost import USERTESTS
from harness.monitor.feed import PERIOD_S


@click.command()
@click.option("--rounds", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Interleaved rounds (each: plain and watched, order alternating).")
@click.option("--predict", type=click.IntRange(2, 512), default=128, show_default=True,
              help="Tokens generated per TPOT request.")
@click.option("--loops", type=click.IntRange(1_000_000), default=400_000_000,
              show_default=True, help="sysbench cpu iterations (8 instructions each).")
@click.option("--period", type=click.FloatRange(0.01, 10), default=PERIOD_S,
              show_default=True, help="Seconds between snapshots.")
def monitor(rounds: int, predict: int, loops: int, period: float) -> None:
    """TPOT and guest MIPS with and without the AI-service monitor attached."""
    from harness.bench.monitor import cost_report

    click.echo("\n".join(cost_report(rounds, predict, loops, period)))


@click.command()
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Interleaved rounds (one run per mode each).")
@click.option("-c", "--cmd", default="usertests -q", show_default=True,
              help="The guest commands.")
@click.option("--cpus", type=click.IntRange(2, 8), default=4, show_default=True)
def race(rounds: int, cmd: str, cpus: int) -> None:
    """What `--race` and `--race-locks` cost: guest MIPS against the same run without."""
    from harness.bench.race import cost_report

    click.echo("\n".join(cost_report(rounds, cmd, cpus)))


@click.command()
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Interleaved rounds of the recording-cost boots.")
@click.option("--span", type=click.IntRange(10_000_000), default=1_000_000_000,
              show_default=True, help="reverse-stepi points lie in the first SPAN instructions.")
@click.option("--points", type=click.IntRange(1, 100), default=6, show_default=True,
              help="reverse-stepi points measured.")
@click.option("--back", type=click.IntRange(1_000_000), default=100_000_000,
              show_default=True, help="Instructions between the watched store and now.")
@click.option("--cpus", type=click.IntRange(1, 8), default=4, show_default=True)
@click.option("--cmd", "cpu_cmd", default=USERTESTS, show_default=True,
              help="The all-CPU workload of the recording cost (guest shell commands).")
@click.option("--no-record", is_flag=True, help="Skip the recording cost (no model needed).")
@click.option("--no-reverse", is_flag=True, help="Skip the reverse-execution figures.")
def timetravel(rounds: int, span: int, points: int, back: int, cpus: int, cpu_cmd: str,
               no_record: bool, no_reverse: bool) -> None:
    """What the deterministic machine, --record and reverse execution cost."""
    from harness.bench.timetravel_cost import cost_report

    click.echo("\n".join(cost_report(rounds, span, points, back, cpus, cpu_cmd,
                                     record=not no_record, reverse=not no_reverse,
                                     say=lambda m: click.echo(m, err=True))))
