"""`harness race`'s work: guest commands under seeded schedules with the lock checks on,
each distinct finding once, with the seed and the command that replays it."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.guest.programs import Programs
from harness.machine import Exit, Machine, MachineConfig
from harness.race.lockdep import Finding, LockDep
from harness.schedule import ScheduleSpec


@dataclass
class SeedRun:
    spec: str
    exit: str
    instructions: int
    events: int
    findings: list[Finding] = field(default_factory=list)


@dataclass
class RaceOptions:
    cmd: str
    kernel: Path
    fs: Path
    cpus: int = 4
    ram: int = 128 << 20
    timeout: float = 600.0
    model: object = None      # an AI model for the device (name or loaded), or None


def _where(prog: object) -> Callable[[int], str]:
    def where(pc: int) -> str:
        at = pc - 2  # a return address: its call is just before it
        name = prog.describe(at) or f"{pc:#x}"  # type: ignore[attr-defined]
        row = prog.row(at)  # type: ignore[attr-defined]
        line = f" at {row.file}:{row.line}" if row is not None else ""
        return f"{pc:#x} in {name.split('+')[0]}{line}"

    return where


def run_seed(opts: RaceOptions, spec: str, programs: Programs) -> SeedRun:
    """One run under schedule `spec` with the checks on."""
    from harness.guest.procs import ProcTable
    from harness.launch import add_ai_device
    from harness.machine_guest import machine_phys

    config = MachineConfig(kernel=opts.kernel, fs=opts.fs, cpus=opts.cpus, ram_size=opts.ram,
                           cmd=opts.cmd, timeout=opts.timeout, output=lambda b: None,
                           schedule=ScheduleSpec.parse(spec), clock="icount")
    if opts.model is not None:
        add_ai_device(config, opts.model)
    m = Machine(config)
    try:
        procs = ProcTable(programs.kernel, machine_phys(m))

        def proc(h: int) -> str:
            p = procs.current(h)
            return f"pid {p.pid} ({p.name})" if p is not None else ""

        dep = LockDep(m, programs.kernel, proc)
        res = m.run()
        for f in dep.findings:
            f.seed = spec
        return SeedRun(spec, res.exit.value if res.exit != Exit.POWEROFF else "ok",
                       m.det.counter.total, dep.events, dep.findings)
    finally:
        m.close()


def replay_command(opts: RaceOptions, spec: str) -> str:
    return (f"harness race --seed {spec} --cpus {opts.cpus} -c {shlex.quote(opts.cmd)}"
            f"   (or: harness debug --schedule {spec} --cpus {opts.cpus} "
            f"-c {shlex.quote(opts.cmd)})")


def render(f: Finding, programs: Programs) -> str:
    return f.render(_where(programs.kernel))
