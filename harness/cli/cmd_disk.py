"""`harness crashtest` and `harness imagefuzz`: the file system's log under power cuts and
the kernel on damaged images (harness/disk/crashtest.py, imagefuzz.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from harness.disk.crashtest import kill_runs, run_crashtest
from harness.disk.errors import DiskTestError
from harness.disk.imagefuzz import FAILURES, run_imagefuzz
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL


@contextmanager
def _disk_errors() -> Iterator[None]:
    """A test that cannot run (DiskTestError) ends in its one-line message."""
    try:
        yield
    except DiskTestError as exc:
        raise click.ClickException(str(exc)) from None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rounds", "-r", type=click.IntRange(1, 50), default=1, show_default=True,
              help="Rounds of the fscrash workload (each ~20 system calls, ~140 writes).")
@click.option("--procs", "-p", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Processes running the workload at once (each in its own directory).")
@click.option("--sample", type=click.IntRange(0), default=0, show_default=True,
              help="Try a seeded sample of this many in-order crash points (0: all).")
@click.option("--reorder/--no-reorder", default=True, show_default=True,
              help="Also cut the power with the writes since the last flush reordered.")
@click.option("--reorder-samples", type=click.IntRange(1), default=4, show_default=True,
              help="Random subsets tried per stretch between two flushes.")
@click.option("--seed", "-s", type=int, default=1, show_default=True)
@click.option("--point", metavar="K|rE:MASK", help="Try one crash point only (as printed).")
@click.option("--kill", "kills", type=click.IntRange(0), default=0, show_default=True,
              help="Also kill -9 `harness run --persist` this many times and check the image.")
@click.option("--ignore-flushes", is_flag=True,
              help="Pretend the driver issued no flushes (the log must then fail: a check "
                   "of the checker).")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default=True)
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default=True, help="The image the workload starts from (not changed).")
def crashtest(rounds: int, procs: int, sample: int, reorder: bool, reorder_samples: int, seed: int,
              point: str | None, kernel: Path, fs: Path, ignore_flushes: bool,
              kills: int) -> None:
    """Cut the power after each disk write of a workload; check the log's recovery."""
    with _disk_errors():
        rep = run_crashtest(rounds=rounds, procs=procs, sample=sample, reorder=reorder,
                            reorder_samples=reorder_samples, seed=seed, point=point,
                            kernel=kernel, fs=fs, ignore_flushes=ignore_flushes,
                            progress=sys.stderr.isatty())
    click.echo(f"crashtest: {rep.calls} system calls, {rep.writes} disk writes, "
               f"{rep.flushes} flushes, {rep.commits} commits")
    click.echo(f"crashtest: crash points tried: {rep.in_order} in order, {rep.reordered} "
               f"reordered ({rep.booted} distinct images booted, {rep.seconds:.1f} s); "
               f"failures: {len(rep.failures)}")
    opts = (f"--rounds {rounds} --procs {procs} --seed {seed}"
            + (" --no-reorder" if not reorder else "")
            + (" --ignore-flushes" if ignore_flushes else ""))
    if kills:
        killed, pending, bad = kill_runs(kills, seed=seed, kernel=kernel, fs=fs)
        rep.failures += bad
        click.echo(f"crashtest: harness run --persist killed with SIGKILL: {killed} of {kills} "
                   f"runs killed mid-run ({pending} left a committed transaction in the log), "
                   f"{len(bad)} images not sound")
    for f in rep.failures[:20]:
        click.echo(f"  FAIL {f.point}: {f.why}   (harness crashtest {opts} --point "
                   f"{f.point})", err=True)
    if rep.failures:
        raise click.ClickException(f"{len(rep.failures)} crash points failed")
    click.echo("crashtest: OK")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--images", "-n", type=click.IntRange(1), default=200, show_default=True)
@click.option("--seed", "-s", type=int, default=1, show_default=True)
@click.option("--only", type=click.IntRange(0), metavar="I",
              help="Boot image I of this seed only, and print its mutations and console.")
@click.option("--save", type=click.Path(file_okay=False, path_type=Path),
              help="Write failing images (with --only: that image) here as fuzz-SEED-I.img.")
@click.option("--timeout", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Seconds one boot may take before it counts as a hang.")
@click.option("--hang-timeout", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds without guest progress that count as a hang.")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default=True)
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default=True, help="The real image the mutations start from.")
def imagefuzz(images: int, seed: int, only: int | None, save: Path | None, timeout: float,
              hang_timeout: float, kernel: Path, fs: Path) -> None:
    """Boot damaged disk images; the kernel must never panic or hang."""
    with _disk_errors():
        rep = run_imagefuzz(images=images, seed=seed, only=only, save=save, kernel=kernel, fs=fs,
                            timeout=timeout, hang_timeout=hang_timeout,
                            progress=sys.stderr.isatty())
    if rep.last is not None and only is not None:
        click.echo("mutations: " + "; ".join(rep.last.mutations))
        click.echo(rep.last.output)
    v = ", ".join(f"{k} {rep.verdicts.get(k, 0)}" for k in ("ran", "refused", *FAILURES))
    click.echo(f"imagefuzz: seed {seed}: {rep.images} images ({v}) in {rep.seconds:.0f} s")
    click.echo("imagefuzz: mutations: " + ", ".join(f"{k} {n}" for k, n in
                                                     sorted(rep.kinds.items())))
    for f in rep.failures[:20]:
        click.echo(f"  {f.verdict.upper()} image {f.index}: {f.detail} [{'; '.join(f.mutations)}]"
                   f"   (harness imagefuzz --seed {seed} --only {f.index})", err=True)
    if not rep.passed:
        raise click.ClickException(f"{len(rep.failures)} images made the kernel fail")
    click.echo("imagefuzz: OK (0 panics, 0 faults, 0 hangs)")
