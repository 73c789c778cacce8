"""The deterministic machine's slices, a part of Machine (harness/machine/board.py).

In deterministic mode (harness/det/) the schedule picks the hart and its slice, the C
counter (harness/fastpath/sched.c) ends the slice at an exact instruction count, console
input and the devices' posts are taken only at slice boundaries, and a replay feeds its
recorded input at the recorded guest time. `run_to` runs to an exact position (the
debugger's steps, time travel).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from unicorn import UC_ERR_EXCEPTION, UC_PROT_EXEC, Uc, UcError

from harness.cpu.clock import INSNS_PER_TICK, NEVER, DetClock
from harness.cpu.registers import REG_PC
from harness.det.counter import LIMIT, POINT, SAMPLE
from harness.devices.base import MachineFault
from harness.machine.config import REACHED, UNTIL, WFI, Exit, RunResult
from harness.machine.cpus import Cpu


class DetLoop:
    """Machine's deterministic-mode slices (see the module docstring)."""

    def _det_on_pause(self, uc: Uc, addr: int, c: Cpu) -> None:
        """_on_pause in deterministic mode: a hart that yielded here spins once more when
        it comes back (by its own count, so a breakpoint's stop here changes nothing)."""
        assert self.det is not None
        here = (addr, self.det.counter.count(c.id))
        if c.yield_at == here:
            return
        if any(o.can_run() for o in self.cpus if o is not c):
            c.yields += 1
            c.yield_at = here
            self._stopped_before = True
            self._yielded = True
            uc.emu_stop()

    def _det_post(self, fn: Callable[[], None]) -> None:
        """A device's post in deterministic mode (emulation thread: ticket effects, MMIO
        callbacks): run at the next slice boundary, never in the middle of the timeline's
        events or while waiting for a host thread, where its place would depend on the
        host's speed."""
        self._det_posted.append(fn)

    def _det_run_posted(self) -> None:
        while self._det_posted:
            posted, self._det_posted = self._det_posted, []
            for fn in posted:
                fn()

    def _det_take_input(self) -> None:
        """Deterministic mode: the console input that came since the last slice, taken
        now (at a slice boundary: the schedule never bends to it) and recorded."""
        assert self.det is not None
        j = self.det.journal
        if j.cursor < len(j.inputs):
            return  # time travel re-runs the past: new input waits for the present
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, []
        for data in inbox:
            j.add_input(self.clock.insns, self.det.timeline.ran, data)
            j.cursor += 1
            self.uart.receive(data)

    def _det_replay_inputs(self) -> None:
        """A replay: the recorded console input due now, at the same point among the
        timeline's events as when it was recorded."""
        assert self.det is not None
        j, tl = self.det.journal, self.det.timeline
        now = self.clock.insns
        while j.cursor < len(j.inputs):
            at, ran, data = j.inputs[j.cursor]
            if at > now or (at == now and ran > tl.ran):
                return
            if at < now or ran < tl.ran:
                self._finish(RunResult(Exit.FAULT, message="the replay has diverged from the "
                                       f"recording: console input recorded at instruction "
                                       f"time {at} (after {ran} host results), the replay is "
                                       f"at {now} ({tl.ran})"))
                return
            j.cursor += 1
            self.uart.receive(data)

    def _det_next_input(self) -> int | None:
        """Guest time of the next recorded console input of a replay, or None."""
        assert self.det is not None
        j = self.det.journal
        if j.cursor >= len(j.inputs):
            return None
        return j.inputs[j.cursor][0]

    def run_to(self, total: int | None = None, hart: int | None = None,
               count: int | None = None) -> RunResult:
        """Deterministic mode: run() until the machine has executed `total` instructions,
        or hart `hart` has executed `count` (then Exit.PAUSE with message REACHED), or
        anything else stops it first."""
        assert self.det is not None
        self._det_goal = (total, hart, count)
        try:
            return self.run()
        finally:
            self._det_goal = (None, None, None)
            self.det.counter.unlimit()
            for c in self.cpus:
                self.det.counter.limit_hart(c.id, None)

    def _det_next(self) -> Cpu | None:
        """Deterministic mode: the hart the schedule picks among those that can run (the
        debugger's `only` one if set), and its slice (`_det_budget`), or None."""
        assert self.det is not None
        if self._det_resume is not None:  # the rest of a slice a debugger stopped
            h, self._det_budget = self._det_resume
            self._det_resume = None
            if self.cpus[h].can_run():
                return self.cpus[h]
        runnable = [c.id for c in self.cpus if c.can_run()]
        if self.race_watch is not None:
            runnable = self.race_watch.runnable(runnable)
        if not runnable:
            return None
        h, self._det_budget = self.det.policy.pick(runnable, False)
        return self.cpus[h]

    def _det_poll(self) -> bool:
        """While the guest waits for a host thread's result (deterministic mode): take
        quit and pause requests; True if the run is to end or pause."""
        for fn in self.waker.take_posted():
            fn()
        return self.result is not None or self._pause is not None

    def _det_slice_len(self, count: int | None) -> int:
        """Instructions the next deterministic slice may run: the policy's budget (or a
        debugger's `count`), cut at the next timer deadline and the next host result."""
        assert self.det is not None and isinstance(self.clock, DetClock)
        n = count if count is not None else self._det_budget
        now = self.clock.mtime()
        cmp = min((x for x in self.clint.cmp if x > now), default=NEVER)
        if cmp < NEVER:
            n = min(n, (cmp - now) * INSNS_PER_TICK)
        nxt = self.det.timeline.next_at()  # (not a replay's input: see _det_take_input)
        if nxt is not None:
            n = min(n, nxt - self.clock.insns)
        return max(n, 1)

    def _run_det_slice(self, c: Cpu, count: int | None) -> None:
        """One exactly counted slice of hart c (deterministic mode): the C counter ends it
        (harness/fastpath/sched.c); no other thread ever stops it."""
        det = self.det
        assert det is not None
        counter = det.counter
        n = self._det_slice_len(count)
        cut = self._det_cut(c, n)
        if cut == 0:
            self._pause = RunResult(Exit.PAUSE, message=REACHED)
            self._det_resume = (c.id, n)
            return
        self._run_uc = c.uc
        c.bus.new_run()
        c.start_pc, c.paused_once = c.pc, False
        start = counter.total
        rng0 = int(counter.s.rng[0]) if det.trace is not None else 0
        counter.limit(cut)
        self._stopped_before = self._yielded = False
        self._in_run = True
        err: BaseException | None = None
        t0 = time.perf_counter()
        counter.begin(c.id)
        try:
            c.uc.emu_start(c.pc, UNTIL, 0, 0)
        except (UcError, MachineFault) as e:
            err = e
        finally:
            self._in_run = False
            counter.end(c.id)
            counter.unlimit()
            why = {LIMIT: "limit", POINT: "point", SAMPLE: "sample"}.get(counter.stopped)
            if why is None and self._stopped_before:
                counter.uncount(c.id)  # a later hook stopped it before an instruction
            self.stats.run_s += time.perf_counter() - t0
            self.stats.runs += 1
            if self.hang is not None:
                self.hang.after_run()
        if self._det_after_slice(c, err, why, counter.total - start, n) and \
                det.trace is not None:
            det.trace.append((c.id, start, counter.total - start, self._det_why, c.pc,
                              self.clock.insns, det.timeline.ran, rng0, n,
                              int(counter.s.point_at[c.id])))

    def _det_cut(self, c: Cpu, n: int) -> int:
        """Instructions hart c may run now: its slice of n, or less to stop at a debugger's
        goal (`run_to`); 0 if the goal is reached already."""
        counter = self.det.counter
        goal_total, goal_hart, goal_count = self._det_goal
        cut = n
        if goal_total is not None:
            cut = min(cut, max(goal_total - counter.total, 0))
        counter.limit_hart(c.id, goal_count if goal_hart == c.id else None)
        if goal_hart == c.id and goal_count is not None and counter.count(c.id) >= goal_count:
            return 0
        return cut

    def _det_after_slice(self, c: Cpu, err: BaseException | None, why: str | None,
                         executed: int, n: int) -> bool:
        """Hart c ran `executed` of its slice of n and stopped for `why` (the counter's
        reason, or None): a fault ends the run, a debugger's goal pauses it; then the
        schedule learns why the slice ended (`_det_why`), and a sample goes to the race
        watch. False if the slice ended in an error."""
        det = self.det
        c.pc = c.hart.get(REG_PC)
        self._det_why = "stop"
        if err is None and c.bus.fault is not None:
            err, c.bus.fault = c.bus.fault, None
        if self.result is not None and self.result.pc is None:
            self.result.pc = c.pc
        if err is not None:
            det.policy.ended(c.id, executed, "stop")
            if (isinstance(err, UcError) and err.errno == UC_ERR_EXCEPTION
                    and c.traps.ebreak_delivered):
                c.traps.ebreak_delivered = False  # Unicorn's spurious error after ebreak
                return False
            self._finish(self._fault(err))
            return False
        if why == "limit" and executed < n:  # the debugger's goal, not the slice's end
            self._pause = RunResult(Exit.PAUSE, message=REACHED)
            why = "stop"
        if why is None:
            if self._yielded:
                why = "yield"
            elif (self.result is None and self._pause is None
                  and c.hart.vread(c.pc - 4, 4, UC_PROT_EXEC) == WFI):
                c.idle, why = True, "idle"
            else:
                why = "stop"
        if why == "stop" and self._pause is not None and self.result is None:
            self._det_resume = (c.id, n - executed)  # go on with this slice, not a new pick
        if why == "yield" and self.race_watch is not None:
            self.race_watch.yielded()
        if why == "sample" and (self.race_watch is None or not self.race_watch.on_sample(c)):
            self._det_resume = (c.id, n - executed)  # not watched: the slice goes on
        self._det_why = why
        det.policy.ended(c.id, executed, why)
        if self.travel is not None:
            self.travel.tick()
        return True
