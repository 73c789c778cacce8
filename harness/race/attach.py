"""The race detectors on one machine of `harness run --race` / `harness debug --race`:
the lock checks (lockdep.py) and, unless only those are asked for, the data-race watch
(kcsan.py). Each new finding goes to `on_report`; the debugger's stops the machine
there (at the second access of a data race, after the lock event of a lock finding)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.race.kcsan import HOLD, SAMPLE_MEAN, DataRaceWatch
from harness.race.lockdep import Finding, LockDep


@dataclass
class Detectors:
    """What `attach` put on a machine."""

    lockdep: LockDep
    watch: DataRaceWatch | None
    reported: list[Finding] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return self.lockdep.findings + (self.watch.findings if self.watch else [])

    def summary(self) -> str:
        w = self.watch
        data = (f", {w.stats.watched:,} accesses watched" if w is not None
                else ", data-race watch off")
        return (f"[harness] race detectors: {len(self.findings)} finding(s), "
                f"{self.lockdep.events:,} lock events{data}")

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
        self.lockdep.close()


def attach(machine: Any, kernel: Any, *, data: bool, on_report: Callable[[Finding], None],
           sample_mean: int = SAMPLE_MEAN, hold: int = HOLD,
           focus: tuple[str, ...] = ()) -> Detectors:
    """Put the detectors on `machine` (deterministic, not yet run); `kernel` is the
    kernel's guest Program (symbols, lines, DWARF). Lock findings are looked for after
    each lock event, data races as they happen."""
    from harness.guest.procs import ProcTable
    from harness.machine.guest_view import machine_phys

    procs = ProcTable(kernel, machine_phys(machine))

    def proc(h: int) -> str:
        p = procs.current(h)
        return f"pid {p.pid} ({p.name})" if p is not None else ""

    dep = LockDep(machine, kernel, proc)
    watch = DataRaceWatch(machine, kernel, dep, sample_mean, hold, focus) if data else None
    d = Detectors(dep, watch)

    def report(f: Finding) -> None:
        d.reported.append(f)
        on_report(f)

    dep.on_report = report
    if watch is not None:
        watch.on_report = report
    return d
