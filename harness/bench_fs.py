"""`harness bench fs`: what the file-system log costs, as a ratio measured in one run.

    harness bench fs --files 200 --reps 3

Boots the kernel on a fresh copy of the image, `--reps` times each way, interleaved:
with the log (kernel_c/log.c) and with it disabled (BOOT_F_NOLOG: log_write() writes the
block straight to disk, no commit, no flushes: the file system as it was before the log,
crash-unsafe). Each boot runs `sysbench fs N`: N times create a file, write 4 KiB, close
it, delete it. Reported: files per second (guest time_us) and disk writes per file, the
medians, and the ratio log / no log.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import click

from harness import bootinfo
from harness.cmd_run import _file
from harness.diskboot import DEFAULT_FS, DEFAULT_KERNEL, boot_disk

FS_LINE = re.compile(r"^fs: n=(\d+) us=(\d+) files_per_s=([\d.]+)", re.M)


@dataclass
class FsRun:
    files_per_s: float
    writes_per_file: float
    flushes_per_file: float


def measure(files: int, *, log: bool, kernel: Path, image: bytes) -> FsRun:
    b = boot_disk(image, f"sysbench fs {files}", kernel=kernel, timeout=600,
                  hang_timeout=60, flags=0 if log else bootinfo.F_NOLOG)
    m = FS_LINE.search(b.output)
    if not b.clean or m is None:
        raise click.ClickException(f"sysbench fs failed ({b.exit.value}: {b.panic or b.message})"
                                   f"\n{b.output[-1500:]}")
    return FsRun(float(m.group(3)), b.writes / files, b.flushes / files)


def run_bench_fs(files: int = 200, reps: int = 3, *, kernel: Path = DEFAULT_KERNEL,
                 fs: Path = DEFAULT_FS) -> dict[str, FsRun]:
    """Median FsRun with and without the log."""
    image = fs.read_bytes()
    runs: dict[str, list[FsRun]] = {"log": [], "nolog": []}
    for _ in range(reps):
        runs["log"].append(measure(files, log=True, kernel=kernel, image=image))
        runs["nolog"].append(measure(files, log=False, kernel=kernel, image=image))
    return {k: FsRun(statistics.median(r.files_per_s for r in v),
                     statistics.median(r.writes_per_file for r in v),
                     statistics.median(r.flushes_per_file for r in v))
            for k, v in runs.items()}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--files", "-n", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Create/write/delete cycles per boot.")
@click.option("--reps", type=click.IntRange(1, 20), default=3, show_default=True)
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default=True)
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default=True)
def fs(files: int, reps: int, kernel: Path, fs: Path) -> None:
    """File-system throughput with the log against without it (create, write, delete)."""
    _file("kernel", kernel, "build it with `make build`")
    _file("disk image", fs, "build it with `make build`")
    r = run_bench_fs(files, reps, kernel=kernel, fs=fs)
    for name, label in (("nolog", "no log (BOOT_F_NOLOG)"), ("log", "with the log")):
        x = r[name]
        click.echo(f"{label:24s} {x.files_per_s:9.1f} files/s  {x.writes_per_file:5.1f} "
                   f"disk writes/file  {x.flushes_per_file:4.1f} flushes/file")
    click.echo(f"log / no log: {r['log'].files_per_s / r['nolog'].files_per_s:.2f}x the "
               f"throughput, {r['log'].writes_per_file / r['nolog'].writes_per_file:.2f}x the "
               f"disk writes (medians of {reps} interleaved boots each)")
