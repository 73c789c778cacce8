"""The file-system bench (`harness bench fs`): what the log costs, as a ratio measured in one run.

    harness bench fs --files 200 --reps 3

Boots the kernel on a fresh copy of the image, `--reps` times each way, interleaved:
with the log (kernel_c/log.c) and with it disabled (BOOT_F_NOLOG: log_write() writes the
block straight to disk, no commit, no flushes: a file system without the log,
crash-unsafe). Each boot runs `sysbench fs N`: N times create a file, write 4 KiB, close
it, delete it. Reported: files per second (guest time_us) and disk writes per file, the
medians, and the ratio log / no log.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.abi import bootinfo
from harness.bench.errors import BenchError
from harness.disk.diskboot import boot_disk
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

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
        raise BenchError(f"sysbench fs failed ({b.exit.value}: {b.panic or b.message})"
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


def format_report(r: dict[str, FsRun], reps: int) -> str:
    """The lines `harness bench fs` prints."""
    lines = []
    for name, label in (("nolog", "no log (BOOT_F_NOLOG)"), ("log", "with the log")):
        x = r[name]
        lines.append(f"{label:24s} {x.files_per_s:9.1f} files/s  {x.writes_per_file:5.1f} "
                     f"disk writes/file  {x.flushes_per_file:4.1f} flushes/file")
    lines.append(f"log / no log: {r['log'].files_per_s / r['nolog'].files_per_s:.2f}x the "
                 f"throughput, {r['log'].writes_per_file / r['nolog'].writes_per_file:.2f}x "
                 f"the disk writes (medians of {reps} interleaved boots each)")
    return "\n".join(lines)
