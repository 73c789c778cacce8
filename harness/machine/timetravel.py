"""Time travel for a deterministic machine: checkpoints, and going to any past instruction.

A deterministic run (harness/det/mode.py) is a function of its start and of the journal:
to be at instruction N again, restore the last checkpoint at or before N and run forward
to N (`Machine.run_to`), exactly as rr and QEMU's record/replay do. Everything else is
built on that one move (`TimeTravel.goto`):

- reverse-stepi of hart h: go to where h had executed one instruction fewer (`back`);
- reverse-continue: from the checkpoints before now, run forward to now with the
  breakpoints and watchpoints armed, note each hit, and go to the last one (`last_hit`);
- reverse-step / next / finish: the debugger's own logic over a short trace of the
  hart's recent instructions (`trace`), then `goto`.

Checkpoints (`Checkpoints`) are taken as the machine runs, every `every` instructions,
and wherever a search stops (so a second reverse-stepi in the same place is cheap). One
checkpoint is the machine state of harness/machine/snapshot.py plus RAM, kept as copy-on-write
deltas (`RamHistory`): RAM is a private mapping of a memory file, the file holds RAM at
one checkpoint (the base), and between consecutive checkpoints we keep the pages that
changed, their contents before and after. Moving the base from one checkpoint to another
writes those pages into the file; a restore then drops the private pages. Memory is
bounded (`budget`): past it, two neighbouring intervals far from now are merged into one
(the checkpoint between them goes), so checkpoints stay dense near the present and
sparse in the distant past, each still restorable.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.machine.snapshot import MachineState, capture, restore

PAGE = 0x1000
EVERY = 5_000_000         # instructions between the checkpoints taken while running
BUDGET = 1 << 30          # bytes of checkpoint data kept at most (RAM deltas, states)
# goto into the past also checkpoints this far before its goal (first the larger), so
# that a series of reverse-stepi from there re-runs a short stretch each time
APPROACH = (1 << 20, 1 << 12)


@dataclass
class Interval:
    """RAM between two consecutive checkpoints: page -> (contents at the first, at the
    second), only for pages that differ."""

    pages: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.pages) * 2 * PAGE + 64 * len(self.pages)


@dataclass
class Checkpoint:
    total: int                # the machine's instruction count there
    state: MachineState


class Checkpoints:
    """The checkpoints of one machine, and its RAM as deltas between them."""

    def __init__(self, machine: Any, every: int = EVERY, budget: int = BUDGET) -> None:
        self.m = machine
        self.ram = machine.ram
        assert self.ram.fd >= 0, "time travel needs copy-on-write RAM (PhysMem cow=True)"
        self.every, self.budget = every, budget
        self.points: list[Checkpoint] = []
        self.intervals: list[Interval] = []   # intervals[i]: points[i] -> points[i+1]
        self.base = -1                        # the checkpoint whose RAM the file holds
        self.taken = self.restored = self.merged = 0
        self.take_s = self.restore_s = 0.0

    # ---------------------------------------------------------------- bookkeeping
    @property
    def size(self) -> int:
        return (sum(i.size for i in self.intervals)
                + sum(p.state.size for p in self.points))

    def totals(self) -> list[int]:
        return [p.total for p in self.points]

    def at_or_before(self, total: int) -> int:
        """Index of the last checkpoint at or before instruction `total`."""
        i = bisect.bisect_right(self.totals(), total) - 1
        if i < 0:
            raise ValueError(f"no checkpoint at or before instruction {total}")
        return i

    # ---------------------------------------------------------------- the file
    def _move_base(self, to: int) -> None:
        """Write the file to hold checkpoint `to`'s RAM (private pages are not touched:
        by determinism a page that differs between the two checkpoints has been written
        by the run that got here, so the guest reads its private copy)."""
        ram = self.ram
        while self.base > to:
            self.base -= 1
            for page, (old, _) in self.intervals[self.base].pages.items():
                ram.set_file_page(page, old)
        while self.base < to:
            for page, (_, new) in self.intervals[self.base].pages.items():
                ram.set_file_page(page, new)
            self.base += 1

    # ---------------------------------------------------------------- taking
    def take(self) -> Checkpoint:
        """A checkpoint here (any instruction: at the end, or between two others)."""
        t0 = time.perf_counter()
        m, ram = self.m, self.ram
        total = m.det.counter.total
        cp = Checkpoint(total, capture(m))
        if not self.points:
            for page in ram.changed_pages():
                ram.set_file_page(int(page), ram.page(int(page)))
            ram.drop_changes()
            self.points, self.base = [cp], 0
            return self._took(t0, cp)
        k = self.at_or_before(total)
        if self.points[k].total == total:  # here already
            return self.points[k]
        self._move_base(k)
        changed = [int(p) for p in ram.changed_pages()]
        first = Interval({p: (old, new) for p in changed
                          if (old := ram.file_page(p)) != (new := ram.page(p))})
        if k == len(self.points) - 1:  # past the last one
            self.intervals.append(first)
            self.points.append(cp)
        else:  # between k and k+1: split that interval in two
            second = Interval()
            after = self.intervals[k].pages
            for p in set(changed) | set(after):
                here = ram.page(p)
                there = after[p][1] if p in after else ram.file_page(p)
                if here != there:
                    second.pages[p] = (here, there)
            self.intervals[k:k + 1] = [first, second]
            self.points.insert(k + 1, cp)
        self._move_base(k + 1)
        ram.drop_changes()  # RAM = the file = this checkpoint, from here on
        self._thin()
        return self._took(t0, cp)

    def _took(self, t0: float, cp: Checkpoint) -> Checkpoint:
        self.taken += 1
        self.take_s += time.perf_counter() - t0
        return cp

    def _thin(self) -> None:
        """Merge intervals until the checkpoints fit the budget: the pair whose middle
        checkpoint is closest to its neighbours, relative to its distance from the base
        (the present), goes first."""
        while self.size > self.budget and len(self.points) > 2:
            here = self.points[self.base].total
            best, cost = -1, float("inf")
            for i in range(1, len(self.points) - 1):
                if i == self.base:
                    continue
                span = self.points[i + 1].total - self.points[i - 1].total
                away = abs(self.points[i].total - here) + 1
                c = span / away
                if c < cost:
                    best, cost = i, c
            if best < 0:
                return
            self._merge(best)

    def _merge(self, i: int) -> None:
        """Drop checkpoint i (not the base): intervals i-1 and i become one."""
        a, b = self.intervals[i - 1].pages, self.intervals[i].pages
        merged = Interval()
        for p in set(a) | set(b):
            old = a[p][0] if p in a else b[p][0]
            new = b[p][1] if p in b else a[p][1]
            if old != new:
                merged.pages[p] = (old, new)
        self.intervals[i - 1:i + 1] = [merged]
        del self.points[i]
        if self.base > i:
            self.base -= 1
        self.merged += 1

    # ---------------------------------------------------------------- restoring
    def restore(self, i: int) -> None:
        """The machine as it was at checkpoint i."""
        t0 = time.perf_counter()
        ram = self.ram
        ram.drop_changes()          # RAM = the file = checkpoint `base`
        self._move_base(i)          # ... = checkpoint i
        restore(self.m, self.points[i].state)
        for c in self.m.cpus:       # RAM changed under the translations
            c.uc.ctl_flush_tb()
        self.restored += 1
        self.restore_s += time.perf_counter() - t0


class TimeTravel:
    """Going to any past instruction of a deterministic machine (see the module
    docstring). `frontier`: the furthest the machine has been (its output is shown only
    beyond it, the journal holds what came from outside up to it)."""

    def __init__(self, machine: Any, every: int = EVERY, budget: int = BUDGET) -> None:
        self.m = machine
        self.cps = Checkpoints(machine, every, budget)
        self.frontier = 0
        # the debugger's side: arm(on) turns its breakpoints and watchpoints on or off
        # (off while going somewhere), settle(stop) finishes a stop of one of them (a
        # watchpoint's store) and says whether it was one
        self.arm: Callable[[bool], None] = lambda on: None
        self.settle: Callable[[Any], bool] = lambda stop: False
        self.cps.take()  # the start

    @property
    def now(self) -> int:
        return int(self.m.det.counter.total)

    def tick(self) -> None:
        """Between two slices (the run loop): a checkpoint when one is due."""
        now = self.now
        self.frontier = max(self.frontier, now)
        last = self.cps.points[-1].total
        if now >= last + self.cps.every and now >= self.frontier:
            self.cps.take()

    def goto(self, total: int, hart: int | None = None, count: int | None = None,
             checkpoint: bool = True, leap: bool = True) -> Any:
        """Go to instruction `total` (or, with `hart`, to where hart `hart` had executed
        `count`), with the debugger's points suspended (`arm(False)`): restore the last
        checkpoint before the goal unless the goal lies ahead, run forward. Returns the
        run_to result (PAUSE with REACHED when there; going forward the run may end
        first). `leap`: a goal ahead may be reached from a later checkpoint (False:
        every instruction up to it runs here, for a hook that watches them)."""

        det = self.m.det
        if hart is not None:
            assert count is not None
            ahead = det.counter.count(hart) <= count
            i = max((k for k, p in enumerate(self.cps.points) if p.state.counts[hart] <= count),
                    default=0)
        else:
            ahead = total >= self.now
            i = self.cps.at_or_before(total)
        if not ahead or (leap and self.cps.points[i].total > self.now):
            self.cps.restore(i)
        self.arm(False)
        try:
            if checkpoint and not ahead:
                self._approach(total, hart, count)
            res = self._run(total, hart, count)
        finally:
            self.arm(True)
        self.frontier = max(self.frontier, self.now)
        if checkpoint and self.now < self.frontier:
            self.cps.take()  # a second step back from near here is then cheap
        return res

    def _run(self, total: int, hart: int | None, count: int | None) -> Any:
        while True:
            res = (self.m.run_to(total=total) if hart is None
                   else self.m.run_to(hart=hart, count=count))
            if not self.m.paused(res) or self.m.reached(res):
                return res
            self.settle(res)  # a suspended point's stop on the way: go on

    def _approach(self, total: int, hart: int | None, count: int | None) -> None:
        """On the way to a goal in the past: checkpoints APPROACH instructions before it
        (where none is near), so that the next steps back start close by."""
        det = self.m.det
        for gap in APPROACH:
            if hart is None:
                here, goal = self.now, total - gap
                last = self.cps.points[self.cps.at_or_before(total)].total
            else:
                assert count is not None
                here, goal = det.counter.count(hart), count - gap
                last = max(p.state.counts[hart] for p in self.cps.points
                           if p.state.counts[hart] <= count)
            if goal <= here or goal <= last:
                continue
            res = self._run(goal, None, None) if hart is None else self._run(0, hart, goal)
            if not self.m.reached(res):
                return
            self.cps.take()

    def back(self, hart: int) -> Any:
        """reverse-stepi: to where `hart` had executed one instruction fewer."""
        n = self.m.det.counter.count(hart)
        if n == 0:
            raise ValueError(f"hart {hart} has not executed an instruction yet")
        return self.goto(0, hart=hart, count=n - 1)

    def last_hit(self) -> tuple[int, Any] | None:
        """reverse-continue's search: (instruction count, settle's answer) of the last
        stop before now of an armed breakpoint or watchpoint; None if none since the
        start. The machine is left somewhere before now (goto the answer next)."""
        goal = self.now
        i = self.cps.at_or_before(goal - 1) if goal else -1
        while i >= 0:
            start = self.cps.points[i].total
            self.cps.restore(i)
            found: tuple[int, Any] | None = None
            while True:
                res = self.m.run_to(total=goal)
                if not self.m.paused(res) or self.m.reached(res):
                    break
                hit = self.settle(res)  # (taken even at the goal: it is the present's)
                if self.now >= goal:
                    break
                if hit:
                    found = (self.now, hit)
            if found is not None:
                return found
            goal, i = start, i - 1
        return None

    def recent(self, hart: int, n: int, sample: Callable[[], Any]) -> list[tuple[int, Any]]:
        """The last n instructions hart `hart` executed before now, oldest first, as
        (machine instruction count before it, sample() taken before it ran); the machine
        ends where it started. For reverse-step/next/finish."""
        count = self.m.det.counter.count(hart)
        start = max(0, count - n)
        back = self.now
        self.goto(0, hart=hart, count=start, checkpoint=False)
        c = self.m.cpus[hart]
        out: list[tuple[int, Any]] = []
        counter = self.m.det.counter

        def hook(uc: Any, addr: int, size: int, _: Any) -> None:
            if counter.stopped == 0:  # (the counter's own stop before it: not run)
                out.append((counter.total - 1, sample()))

        from unicorn import UC_HOOK_CODE

        h = c.uc.hook_add(UC_HOOK_CODE, hook)
        c.uc.ctl_flush_tb()
        try:
            self.goto(0, hart=hart, count=count, checkpoint=False, leap=False)
        finally:
            c.uc.hook_del(h)
            c.uc.ctl_flush_tb()
        if self.now != back:
            self.goto(back, checkpoint=False)
        return out[-n:]
