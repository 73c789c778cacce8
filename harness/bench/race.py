"""`harness bench race`: what the race detectors cost, against the same run without them.

The same guest commands, booted four ways in interleaved rounds (the order rotates, so a
load change on the host hits all alike): the ordinary machine (host clock), the
deterministic machine (`--schedule random:1`), with the lock checks (`--race-locks`) and
with both detectors (`--race`). Guest MIPS per mode (instructions / wall seconds of the
run, boot included; the ordinary machine counts none: its figure uses the deterministic
run's count), medians, and each mode's ratio to the deterministic run. Holding
harts for the data-race watch changes the interleaving, so the `--race` run executes a
few more instructions: MIPS, not seconds, is the comparable figure.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from harness.bench.errors import BenchError
from harness.det.schedule import ScheduleSpec
from harness.guest.programs import Program
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, Exit, MachineConfig
from harness.race.attach import attach

MODES = ("host", "det", "locks", "race")
SPEC = "random:1"


def _one(mode: str, cmd: str, cpus: int, kernel: Path, fs: Path) -> tuple[float, int]:
    """(wall seconds, instructions) of one run in `mode`."""
    config = MachineConfig(kernel=kernel, fs=fs, cpus=cpus, cmd=cmd, output=lambda b: None,
                           timeout=1800)
    if mode != "host":
        config.schedule = ScheduleSpec.parse(SPEC)
        config.clock = "icount"
    t0 = time.perf_counter()
    m = Machine(config)
    try:
        if mode in ("locks", "race"):
            attach(m, Program("kernel", kernel, user=False), data=mode == "race",
                   on_report=lambda f: None)
        res = m.run()
        wall = time.perf_counter() - t0
        if res.exit != Exit.POWEROFF:
            raise BenchError(f"the {mode} run ended {res.exit.value}: {res.message}")
        return wall, m.det.counter.total if m.det is not None else 0
    finally:
        m.close()


def cost_report(rounds: int, cmd: str, cpus: int) -> list[str]:
    """What `--race` and `--race-locks` cost: the report's lines (progress on stderr)."""
    out: list[str] = []
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    mips: dict[str, list[float]] = {m: [] for m in MODES}
    insns: dict[str, int] = {}
    with tqdm(total=rounds * len(MODES), desc=f"{rounds} rounds of {cmd!r}",
              file=sys.stderr) as bar:
        for r in range(rounds):
            for i in range(len(MODES)):
                mode = MODES[(i + r) % len(MODES)]
                wall, n = _one(mode, cmd, cpus, DEFAULT_KERNEL, DEFAULT_FS)
                walls[mode].append(wall)
                insns[mode] = n
                bar.update(1)
    # the ordinary machine counts no instructions: its MIPS uses the det run's count
    insns["host"] = insns["det"]
    for mode in MODES:
        mips[mode] = [insns[mode] / w / 1e6 for w in walls[mode]]
    out.append(f"race detectors' cost, {cmd!r} on {cpus} harts, medians of {rounds} "
               "interleaved rounds:")
    out.append(f"  {'mode':<8}{'wall s':>9}{'MIPS':>9}{'MIPS/det':>10}{'insns':>15}")
    det = statistics.median(mips["det"])
    for mode in MODES:
        mm = statistics.median(mips[mode])
        n = f"{insns[mode]:,}" if mode != "host" else "(det's count)"
        out.append(f"  {mode:<8}{statistics.median(walls[mode]):9.2f}{mm:9.1f}"
                   f"{mm / det:10.2f}{n:>15}")
    out.append("(host: the ordinary machine; det: --schedule random:1; locks: --race-locks; "
               "race: --race. Host shared with other work: the ratios, not the seconds)")
    return out
