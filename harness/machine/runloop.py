"""The run loop of the ordinary machine, a part of Machine (harness/machine/board.py).

    process posted events (console input, device completions) on this thread
    re-evaluate the timers (STIP) and the wall-clock timeout
    pick the next hart that can run, round-robin (not in wfi, or an interrupt pending)
    if there is none: sleep until the next timer deadline or event (no host CPU is used)
    else: emu_start(pc, count=0) on that hart until the waker thread stops it at the
        next deadline, event or the end of its slice (QUANTUM_NS, only while another hart
        could run), or it executes wfi, or a device/trap ends the run

`--clock icount` uses counted slices instead (deterministic time, see harness/cpu/clock.py);
a deterministic machine runs its slices through harness/machine/detloop.py.

A debugger (harness/debug/) drives the same loop: its hooks call `pause()`, which stops
the guest before the hooked instruction and makes `run()` return Exit.PAUSE; `run()` and
`step()` (one instruction) then go on from wherever the PC is.
"""

from __future__ import annotations

import time

from unicorn import UC_ERR_EXCEPTION, UC_PROT_EXEC, UcError

from harness.cpu.clock import INSNS_PER_TICK, NEVER, DetClock, IcountClock
from harness.cpu.registers import REG_PC, SEIP, Hart
from harness.devices.base import MachineFault
from harness.machine.config import (
    ICOUNT_SLICE,
    ICOUNT_SLICE_SMP,
    QUANTUM_NS,
    REACHED,
    UNTIL,
    WFI,
    Exit,
    RunResult,
)
from harness.machine.cpus import Cpu, complete_store


class RunLoop:
    """Machine's run loop (see the module docstring)."""

    # ---------------------------------------------------------------- debugger control
    def pause(self, message: str = "", before: bool = True) -> None:
        """Stop the guest before its next instruction; run()/step() return Exit.PAUSE and
        the next call goes on from there. Emulation thread only (e.g. a Unicorn hook).
        `before`: called from a code hook, before the instruction runs (False from a
        memory hook: the instruction has run), which the instruction counter needs."""
        if self._pause is None:
            self._pause = RunResult(Exit.PAUSE, message=message)
        if before and self._in_run:
            self._stopped_before = True
        self.uc.emu_stop()

    @property
    def idle(self) -> bool:
        """Every running hart executed wfi and waits for an interrupt."""
        return all(c.idle or not c.started for c in self.cpus)

    def request_pause(self, message: str = "interrupted") -> None:
        """pause() from any thread (a debugger's Ctrl-C, a GDB interrupt)."""
        self.post(lambda: self.pause(message))

    def step(self) -> RunResult | None:
        """Execute exactly one instruction (a debugger's stepi), or take one pending
        interrupt. Returns the end of the run if it ended (power-off, fault), a PAUSE if a
        hook asked for one, else None. In deterministic mode the schedule goes on until
        the current hart has executed one instruction (other harts may run meanwhile, as
        the schedule has them: the run stays the same run)."""
        if self.det is not None:
            h = self.cur
            res = self.run_to(hart=h, count=self.det.counter.count(h) + 1)
            self.cur = h
            return None if res.exit == Exit.PAUSE and res.message == REACHED else res
        self._pc = self.hart.get(REG_PC)  # a debugger may have moved it
        self.cpu.idle = False
        while self.result is None:
            for fn in self.waker.take_posted():
                fn()
            self._flush_output()
            if self.result is not None or self._pause is not None:
                break
            self.clint.tick()
            runs = self.stats.runs
            self._run_slice(self.cpu, count=1)
            if self.stats.runs != runs:
                break
        self._flush_output()
        return self._take_stop()

    @staticmethod
    def paused(res: RunResult) -> bool:
        """Did a run stop for a debugger (not end)?"""
        return res.exit == Exit.PAUSE

    @staticmethod
    def reached(res: RunResult) -> bool:
        """Did run_to stop at the position it was asked for?"""
        return res.exit == Exit.PAUSE and res.message == REACHED

    def _take_stop(self) -> RunResult | None:
        if self.result is not None:
            self._pause = None
            return self.result
        stop, self._pause = self._pause, None
        if stop is not None:
            stop.pc = self._pc
        return stop

    # ---------------------------------------------------------------- the run loop
    def _finish(self, result: RunResult) -> None:
        if self.result is None:
            self.result = result

    def _deadline_ns(self) -> int | None:
        """Host time at which the running slice must end (timer deadline, timeout)."""
        cands = []
        cmp = self.clint.armed_ahead()
        if cmp < NEVER and self.clock.mtime() < cmp:
            t = self.clock.host_ns(cmp)
            if t is not None:
                cands.append(t)
        if self._timeout_at is not None:
            cands.append(self._timeout_at)
        if self.hang is not None:
            cands.append(self.hang.next_check)
        if self._slice_end is not None:
            cands.append(self._slice_end)
        return min(cands) if cands else None

    def run(self) -> RunResult:
        """Run until the guest powers off, fails, faults, times out or is stopped, or
        until a debugger pauses it (Exit.PAUSE: call run() again to go on)."""
        t = self.config.timeout
        self._timeout_at = time.monotonic_ns() + int(t * 1e9) if t else None
        for c in self.cpus:
            if c.started:
                c.pc = c.hart.get(REG_PC)  # a debugger may have moved it
        if self.hang is not None:
            self.hang.restart()
        try:
            while self.result is None and self._pause is None:
                for fn in self.waker.take_posted():
                    fn()
                self._flush_output()
                if self.result is not None or self._pause is not None:
                    break
                self.clint.tick()
                if self._timeout_at is not None and time.monotonic_ns() >= self._timeout_at:
                    self._finish(RunResult(Exit.TIMEOUT, pc=self.hart.get(REG_PC),
                                           message=f"timed out after {t:g} s"))
                    break
                if self.hang is not None and time.monotonic_ns() >= self.hang.next_check:
                    why = self.hang.check(time.monotonic_ns())
                    if why:
                        self._finish(RunResult(Exit.HANG, pc=self.hart.get(REG_PC),
                                               message=why))
                        break
                if self.det is not None:
                    self._det_replay_inputs()  # recorded input (a replay, time travel)
                    if not self.det.replaying:
                        self._det_take_input()
                    self._det_run_posted()
                    self.det.timeline.run_due(self._det_poll)
                    self._det_run_posted()
                    self._flush_output()
                    if self.result is not None or self._pause is not None:
                        break
                    self.clint.tick()
                c = self._det_next() if self.det is not None else self._next_cpu()
                if c is None:
                    self._wait_for_interrupt()
                    continue
                self.cur = c.id
                c.idle = False
                self._run_slice(c)
        except KeyboardInterrupt:
            self._finish(RunResult(Exit.QUIT, pc=self.hart.get(REG_PC), message="interrupted"))
        finally:
            self._flush_output()
        stop = self._take_stop()
        assert stop is not None
        return stop

    def _next_cpu(self) -> Cpu | None:
        """The next hart after the current one, round-robin, that can run, or None."""
        if self.only is not None:
            c = self.cpus[self.only]
            return c if c.can_run() else None
        n = len(self.cpus)
        for i in range(1, n + 1):
            c = self.cpus[(self.cur + i) % n]
            if c.can_run():
                return c
        return None

    def _others_can_run(self, c: Cpu) -> bool:
        """Could another hart run beside c (so c's slice needs an end)? A hart idle in
        wfi only for an external interrupt that c will take too does not count: the PLIC
        raises SEIP in every hart's context, the first claim takes the source and the
        others' SEIP falls, so each device interrupt would otherwise give c's slice an
        end, and the waker thread a wake-up, for nothing (a few per token while the AI
        device streams). c takes every pending source in turn, one claim per trap."""
        if self.only is not None:
            return False
        mine: int | None = None
        for o in self.cpus:
            if o is c or not o.started:
                continue
            if not o.idle:
                return True
            wake = o.hart.pending_enabled()
            if wake & ~SEIP:
                return True
            if wake:
                if mine is None:
                    mine = c.hart.pending_enabled()
                if not mine & SEIP:
                    return True
        return False

    def _wait_for_interrupt(self) -> None:
        """Every hart is in wfi with nothing pending: let the host thread sleep."""
        # a deadline whose STIP is already raised and still not pending-enabled: the
        # guest masked the timer (sie.STIE), so it cannot wake it; only an event, the
        # timeout or another hart's deadline can
        cmp = self.clint.armed_ahead()
        armed = cmp < NEVER
        if armed and self.clock.mtime() >= cmp:
            return  # the deadline passed since the loop's tick(): tick again, never sleep
        timer_ahead = armed
        if self.det is not None:
            assert isinstance(self.clock, DetClock)
            ticket, inp = self.det.timeline.next_at(), self._det_next_input()
            if inp is not None and inp <= self.clock.insns and (ticket is None
                                                                or ticket > inp):
                # its turn among the host results has passed, and nothing runs to reach it
                self._finish(RunResult(Exit.FAULT, message="the replay has diverged from the "
                                       "recording: every hart waits, but console input was "
                                       f"recorded at instruction time {inp} after other host "
                                       "results"))
                return
            nxt = min((x for x in (ticket, inp) if x is not None), default=None)
            timer_v = (cmp - self.clock.reads) * INSNS_PER_TICK if armed else None
            if nxt is not None and (timer_v is None or nxt < timer_v):
                self.clock.advance_insns(nxt)  # the next host result is due then
                return
        if isinstance(self.clock, IcountClock):
            if timer_ahead:
                self.clock.advance_to(cmp)  # idle time costs nothing in icount mode
                return
            until = self._timeout_at
        else:
            # sleep until the deadline's host time even if it has just passed (the sleep is
            # then empty): testing "still ahead?" again here would race with the clock
            until = self._timeout_at
            t = self.clock.host_ns(cmp) if armed else None
            if t is not None:
                until = t if until is None else min(until, t)
        if self.hang is not None:
            until = self.hang.next_check if until is None else min(until, self.hang.next_check)
        t0 = time.perf_counter()
        self.waker.sleep(until)
        self.stats.wfi_sleeps += 1
        self.stats.sleep_s += time.perf_counter() - t0

    def _run_slice(self, c: Cpu, count: int | None = None) -> None:
        """One emu_start of hart c: uncounted until stopped (host clock), or counted
        (icount clock, or `count` instructions for a debugger's step)."""
        if self.det is not None:
            self._run_det_slice(c, count)
            return
        icount = isinstance(self.clock, IcountClock)
        count, deadline = self._slice_limits(c, count)
        self._run_uc = c.uc
        if not self.waker.begin_run(deadline):
            return
        c.bus.new_run()
        c.start_pc, c.paused_once = c.pc, False
        err: BaseException | None = None
        t0 = time.perf_counter()
        if c.ipi_at:
            self.stats.ipi_wakes += 1
            self.stats.ipi_wake_s += t0 - c.ipi_at
            c.ipi_at = 0.0
        self._in_run, self._kicked, self._hurry_at = True, False, 0
        self._atomic_since, self._stop_wanted = 0, False
        c.traps.watch(False)
        c.traps.hurry(0)
        try:
            c.uc.emu_start(c.pc, UNTIL, 0, count)
        except (UcError, MachineFault) as e:
            err = e
        finally:
            self._in_run = False
            self._slice_end = None
            stopped = self.waker.end_run() or self._kicked or c.traps.hurried()
            self.stats.run_s += time.perf_counter() - t0
            self.stats.runs += 1
            if icount:
                self.clock.insns += count  # type: ignore[union-attr]
            c.counted = count > 0
            if self.hang is not None:
                self.hang.after_run()
        self._after_slice(c, err, stopped)

    def _slice_limits(self, c: Cpu, count: int | None) -> tuple[int, int | None]:
        """(instructions to count, 0 = uncounted; host deadline) of hart c's next slice."""
        self._others = others = self._others_can_run(c)
        if count is not None:
            if not c.counted:
                # blocks translated without the count hook would ignore the count
                # (reference gotcha 11); Unicorn itself flushes on the way back
                c.uc.ctl_flush_tb()
            return count, None
        if isinstance(self.clock, IcountClock):
            now = self.clock.mtime()
            cmp = min((x for x in self.clint.cmp if x > now), default=NEVER)
            limit = ICOUNT_SLICE_SMP if others else ICOUNT_SLICE
            ahead = (cmp - now) * INSNS_PER_TICK if cmp < NEVER else limit
            return min(limit, ahead), self._timeout_at
        # the slice's end stays a deadline when the guest moves a timer meanwhile
        self._slice_end = time.monotonic_ns() + QUANTUM_NS if others else None
        return 0, self._deadline_ns()

    def _after_slice(self, c: Cpu, err: BaseException | None, stopped: bool) -> None:
        """Hart c's slice ended: a fault ends the run; a stop from outside completes the
        MMIO access or store it cut (harness/machine/bus.py); wfi makes the hart idle."""
        c.pc = c.hart.get(REG_PC)
        if err is None and c.bus.fault is not None:
            err, c.bus.fault = c.bus.fault, None
        if self.result is not None and self.result.pc is None:
            self.result.pc = c.pc
        if err is not None:
            if (isinstance(err, UcError) and err.errno == UC_ERR_EXCEPTION
                    and c.traps.ebreak_delivered):
                c.traps.ebreak_delivered = False  # Unicorn's spurious error after ebreak
                return
            self._finish(self._fault(err))
            return
        if self.result is not None or self._pause is not None:
            return  # a pause stops before an instruction: no MMIO access to replay
        if stopped:
            pc = c.pc
            c.pc = c.bus.after_stop(pc)
            if c.pc == pc and len(self.cpus) > 1:
                c.pc = complete_store(c, self.ram)
        elif c.hart.vread(c.pc - 4, 4, UC_PROT_EXEC) == WFI:
            c.idle = True

    def _fault(self, err: BaseException) -> RunResult:
        pc = getattr(err, "pc", None) or self._pc
        if isinstance(err, UcError):
            msg = describe_uc_error(self.hart, err, pc)
        else:
            msg = str(err)
        return RunResult(Exit.FAULT, pc=pc, message=msg, error=err)


def describe_uc_error(hart: Hart, err: UcError, pc: int) -> str:
    """A sentence for a Unicorn error that ended the run (unmapped memory and the like)."""
    from unicorn import (
        UC_ERR_FETCH_UNMAPPED,
        UC_ERR_INSN_INVALID,
        UC_ERR_READ_UNMAPPED,
        UC_ERR_WRITE_PROT,
        UC_ERR_WRITE_UNMAPPED,
    )

    from harness.machine.traps import mem_operand

    where = ""
    got = hart.fetch(pc)
    op = mem_operand(*got) if got else None
    if op is not None:
        va = (hart.x(op[0]) + op[1]) & 0xFFFF_FFFF_FFFF_FFFF
        pa = hart.translate(va)
        where = f" {va:#x}" + (f" (physical {pa:#x})" if pa is not None and pa != va else "")
    if err.errno == UC_ERR_READ_UNMAPPED:
        return f"load from unmapped physical memory at{where or ' an unknown address'}"
    if err.errno == UC_ERR_WRITE_UNMAPPED:
        return f"store to unmapped physical memory at{where or ' an unknown address'}"
    if err.errno == UC_ERR_FETCH_UNMAPPED:
        return f"instruction fetch from unmapped physical memory at {pc:#x}"
    if err.errno == UC_ERR_WRITE_PROT:
        return f"store to read-only memory at{where or ' an unknown address'} (the boot info page?)"
    if err.errno == UC_ERR_INSN_INVALID:
        return f"invalid instruction at {pc:#x}"
    return f"Unicorn stopped: {err} at pc {pc:#x}"
