"""`harness race`'s work: guest commands under seeded schedules with the lock checks
(lockdep.py) and the data-race watch (kcsan.py) on, each distinct finding once, with the
seed and the command that replays it."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.det.schedule import ScheduleSpec
from harness.guest.programs import Programs
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, Exit, MachineConfig
from harness.race.attach import attach
from harness.race.kcsan import HOLD, SAMPLE_MEAN
from harness.race.lockdep import Finding


@dataclass
class SeedRun:
    spec: str
    exit: str
    instructions: int
    events: int
    findings: list[Finding] = field(default_factory=list)
    samples: int = 0          # the data-race watch's samples ...
    watched: int = 0          # ... the accesses it watched
    seconds: float = 0.0


@dataclass
class RaceOptions:
    cmd: str
    kernel: Path
    fs: Path
    cpus: int = 4
    ram: int = 128 << 20
    timeout: float = 600.0
    model: object = None      # an AI model for the device (name or loaded), or None
    data: bool = True         # the data-race watch too (not only the lock checks)
    sample_mean: int = SAMPLE_MEAN
    hold: int = HOLD
    focus: tuple[str, ...] = ()   # sample only these source files' accesses


def _where(prog: object) -> Callable[[int], str]:
    def where(pc: int, exact: bool = False) -> str:
        at = pc if exact else pc - 2  # a return address: its call is just before it
        name = prog.describe(at) or f"{pc:#x}"  # type: ignore[attr-defined]
        row = prog.row(at)  # type: ignore[attr-defined]
        line = f" at {row.file}:{row.line}" if row is not None else ""
        return f"{pc:#x} in {name.split('+')[0]}{line}"

    return where


def run_seed(opts: RaceOptions, spec: str, programs: Programs) -> SeedRun:
    """One run under schedule `spec` with the checks on."""
    from harness.run.launch import add_ai_device

    config = MachineConfig(kernel=opts.kernel, fs=opts.fs, cpus=opts.cpus, ram_size=opts.ram,
                           cmd=opts.cmd, timeout=opts.timeout, output=lambda b: None,
                           schedule=ScheduleSpec.parse(spec), clock="icount")
    if opts.model is not None:
        add_ai_device(config, opts.model)
    m = Machine(config)
    try:
        d = attach(m, programs.kernel, data=opts.data, on_report=lambda f: None,
                   sample_mean=opts.sample_mean, hold=opts.hold, focus=opts.focus)
        t0 = time.perf_counter()
        res = m.run()
        took = time.perf_counter() - t0
        found = d.findings
        for f in found:
            f.seed = spec
        st = d.watch.stats if d.watch is not None else None
        return SeedRun(spec, res.exit.value if res.exit != Exit.POWEROFF else "ok",
                       m.det.counter.total, d.lockdep.events, found,
                       st.samples if st else 0, st.watched if st else 0, took)
    finally:
        m.close()


def replay_command(opts: RaceOptions, spec: str) -> str:
    """The two commands that show a seed's finding again: `harness race` for the report,
    `harness debug` to stop at it (--race: the watch's holds are part of the schedule)."""
    extra = "" if opts.data else " --no-data"
    if opts.data and (opts.sample_mean, opts.hold) != (SAMPLE_MEAN, HOLD):
        extra += f" --sample {opts.sample_mean} --hold {opts.hold}"
    if opts.data and opts.focus:
        extra += f" --focus {','.join(opts.focus)}"
    machine = f" --cpus {opts.cpus}"
    if opts.kernel != DEFAULT_KERNEL:
        machine += f" --kernel {shlex.quote(str(opts.kernel))}"
    if opts.fs != DEFAULT_FS:
        machine += f" --fs {shlex.quote(str(opts.fs))}"
    dbg = " --race" if opts.data else " --race-locks"
    return (f"harness race --seed {spec}{machine}{extra} -c {shlex.quote(opts.cmd)}"
            f"   (or: harness debug --schedule {spec}{machine}{dbg} "
            f"-c {shlex.quote(opts.cmd)})")


def render(f: Finding, programs: Programs) -> str:
    return f.render(_where(programs.kernel))


def render_with(f: Finding, kernel: object) -> str:
    """The report with the kernel Program's symbols and lines."""
    return f.render(_where(kernel))


@dataclass
class RaceSearch:
    """`harness race`'s runs and each distinct finding (first seen)."""

    opts: RaceOptions
    runs: list[SeedRun] = field(default_factory=list)
    found: dict[tuple, Finding] = field(default_factory=dict)

    @property
    def failed_runs(self) -> list[SeedRun]:
        return [r for r in self.runs if r.exit != "ok"]

    def summary(self) -> str:
        """The closing line: findings, schedules, instructions, MIPS, lock events."""
        runs, opts = self.runs, self.opts
        insns = sum(r.instructions for r in runs)
        secs = sum(r.seconds for r in runs) or 1e-9
        watched = (f", {sum(r.watched for r in runs):,} accesses watched" if opts.data
                   else ", data-race watch off")
        bad = self.failed_runs
        return (f"{len(self.found)} distinct finding(s) in {len(runs)} schedule(s) of "
                f"{opts.cmd!r} on {opts.cpus} harts: {insns:,} instructions "
                f"({insns / secs / 1e6:.1f} MIPS), {sum(r.events for r in runs):,} lock "
                f"events{watched}"
                + (f"; {len(bad)} run(s) did not end cleanly: "
                   + ", ".join(f"{r.spec} ({r.exit})" for r in bad) if bad else ""))

    def write_json(self, path: Path, programs: Programs) -> None:
        runs = self.runs
        path.write_text(json.dumps({
            "cmd": self.opts.cmd, "cpus": self.opts.cpus, "schedules": [r.spec for r in runs],
            "runs": [{"schedule": r.spec, "exit": r.exit, "instructions": r.instructions,
                      "lock_events": r.events, "samples": r.samples, "watched": r.watched,
                      "seconds": round(r.seconds, 3)} for r in runs],
            "findings": [{"kind": f.kind, "title": f.title, "schedule": f.seed,
                          "text": render(f, programs)} for f in self.found.values()]},
            indent=2) + "\n")


def search(opts: RaceOptions, specs: list[str], programs: Programs,
           echo: Callable[[str], None] = print) -> RaceSearch:
    """Run every schedule of `specs` with the detectors on; each distinct finding is
    echoed when first seen, with the command that shows it again (progress on stderr).
    ValueError: a --focus that names no kernel code."""
    from tqdm import tqdm

    out = RaceSearch(opts)
    with tqdm(specs, desc=f"{len(specs)} schedules of {opts.cmd!r}", file=sys.stderr,
              leave=False) as bar:
        for spec in bar:
            bar.set_postfix_str(spec)
            r = run_seed(opts, spec, programs)
            out.runs.append(r)
            for f in r.findings:
                if f.key not in out.found:
                    out.found[f.key] = f
                    echo("\n" + render(f, programs))
                    echo(f"  seen with schedule {spec}; again: {replay_command(opts, spec)}")
    return out
