"""What harts and devices tell the run loop, a part of Machine (harness/machine/board.py):
interrupt lines (STIP, SEIP, SSIP), a hart that spins or fences, the end of an AMO/SC
window, a new timer deadline, the power device; and ending a slice on time (host clock).
"""

from __future__ import annotations

import time

from unicorn import Uc

from harness.cpu.clock import IcountClock
from harness.cpu.registers import PRIV_U, SEIP, SSIP, STIP, emu_stop_holding_gil
from harness.devices.power import PowerCmd
from harness.machine.config import ATOMIC_WINDOW_MAX_NS, HURRY_MAX_NS, IPI_GRACE_NS, Exit, RunResult
from harness.machine.cpus import Cpu


class HartEvents:
    """Machine's handlers of hart and device events (see the module docstring)."""

    def _on_fence_i(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """A hart executes the kernel's fence.i: drop its translations of the user pages
        that may hold other code since its last one (harness/machine/cpus.py)."""
        c.fence_i += 1
        pages = None
        if self._codelog is not None:
            c.codeseq, pages = self._codelog.since(c.codeseq)
        if pages is None:
            self.ram.forget_code(*self._user_code, hart=c.id)
        elif pages:
            self.ram.forget_pages([(pa, 0x1000) for pa in pages], hart=c.id)

    def _on_atomic_edge(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """Before an AMO/SC of the image, and before the instruction after it.

        A stop from the waker thread lands after any load or store, and one that lands
        after an AMO's or SC's store leaves the PC on it: Unicorn runs it again, which
        adds twice (amoadd) or reports a stored SC as failed (a CAS loop then applies its
        change twice). Nothing visible tells the two apart afterwards (docs/ARCHITECTURE.md,
        "Harts"), so such stops must not land there: the waker calls emu_stop holding
        the GIL (`_outside_stop`), this hook runs holding it too, and between this hook
        before the AMO and the one after it the waker only leaves a request, which the
        second hook carries out. The instruction clock never stops from outside."""
        if self._atomic_since:
            self._atomic_since = 0
            if self._stop_wanted:
                self._stop_wanted = False
                uc.emu_stop()  # before the instruction at addr: nothing to repeat
                return
        if addr in self._atomics:
            self._atomic_since = time.monotonic_ns()
            c.traps.watch(True)  # a faulting AMO ends the window in _after_trap

    def _outside_stop(self) -> None:
        """End the running slice (the waker thread). The GIL is held from the test to the
        stop, so no atomic-edge hook runs in between."""
        since = self._atomic_since
        if since and time.monotonic_ns() - since < ATOMIC_WINDOW_MAX_NS:
            self._stop_wanted = True  # _on_atomic_edge or _after_trap stops it
            return
        emu_stop_holding_gil(self._run_uc)

    def _on_pause(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """A hart spins (pause in the kernel's lock loops): give the slice to another."""
        if self.det is not None:
            self._det_on_pause(uc, addr, c)
            return
        if addr == c.start_pc and not c.paused_once:
            c.paused_once = True  # resumed right here: spin at least once more
            return
        if self.only is None and (self._others
                                  or any(o.can_run() for o in self.cpus if o is not c)):
            c.yields += 1
            self._stopped_before = True
            self._yielded = True
            uc.emu_stop()

    # ---------------------------------------------------------------- device hooks
    def _set_stip(self, h: int, level: bool) -> None:
        self.cpus[h].hart.set_mip(STIP, level)

    def _set_seip(self, h: int, level: bool) -> None:
        self.cpus[h].hart.set_mip(SEIP, level)

    def _ipi(self, h: int) -> None:
        """SSWI: raise hart h's SSIP; a hart asleep in wfi can run now."""
        c = self.cpus[h]
        self.stats.ipis += 1
        c.hart.set_mip(SSIP, True)
        if c.idle and h != self.cur:
            if not c.ipi_at:
                c.ipi_at = time.perf_counter()
            self._hurry()

    def _hurry(self) -> None:
        """An IPI made an idle hart runnable (called from the running hart's SSWI store):
        with the host clock, end this slice at its first trap from U-mode after
        IPI_GRACE_NS, or when it goes idle, whichever comes first. A sender that blocks
        right after (a pipe write or an AI submit, then a read or a wait: the common case)
        goes idle, and its own hart's scheduler runs the woken process at once, as one
        hart would, with no hart switch; one that keeps running is cut short at its next
        system call or fault from U-mode (`Traps.hurry`: the C trap path checks that in C,
        so the slice's traps stay off the Python path; the Python path in `_after_trap`),
        or at its slice's deadline
        (our kernel's running harts always have one within a timer tick). Only a slice
        with no deadline within HURRY_MAX_NS (bare-metal code without a timer) gets one
        then: telling the waker thread costs a host thread switch and a GIL hand-over, more
        than the hart switch it would save, so it is not done for every IPI.
        With the instruction clock the slice ends on its own count."""
        if isinstance(self.clock, IcountClock) or not self._in_run or self._hurry_at:
            return
        now = time.monotonic_ns()
        self._hurry_at = now + IPI_GRACE_NS
        self.traps.hurry(self._hurry_at)  # the C trap path checks it without Python
        deadline = self.waker.deadline  # the slice's (cheaper than _deadline_ns on an IPI)
        if deadline is None or deadline > now + HURRY_MAX_NS:
            self._slice_end = now + HURRY_MAX_NS
            self.waker.set_deadline(self._slice_end)

    def _after_trap(self, uc: Uc, priv: int) -> None:
        """Traps: the running hart took a trap. It ends an AMO/SC window (a faulting
        AMO), and a hurried slice ends at a trap from U-mode: the hart holds no kernel
        lock there, so a hart run next will not spin on one of its locks (_hurry)."""
        if self._atomic_since:
            self._atomic_since = 0
            if self._stop_wanted:
                self._stop_wanted = False
                self._kicked = True
                uc.emu_stop()
        if priv == PRIV_U and self._hurry_at and time.monotonic_ns() >= self._hurry_at:
            self._kicked = True
            uc.emu_stop()

    def _kick(self) -> None:
        """Another hart can run now (called from the running hart's MMIO store): with the
        host clock, end the slice right after this store. The stop makes Unicorn leave
        the PC on the store, so it is marked like a waker stop and the bus completes the
        store instead of repeating it (harness/machine/bus.py). With the instruction clock the
        slice ends on its own count, which keeps runs reproducible."""
        if not isinstance(self.clock, IcountClock) and self._in_run:
            self._kicked = True
            self._run_uc.emu_stop()

    def _on_deadline(self) -> None:
        self.waker.set_deadline(self._deadline_ns())

    def _on_power(self, cmd: PowerCmd, status: int) -> None:
        # the PC is not exact inside an MMIO callback; _run_slice fills it in after the stop
        self._flush_output()
        if cmd == PowerCmd.PASS:
            self._finish(RunResult(Exit.POWEROFF, status=status))
        elif cmd == PowerCmd.FAIL:
            self._finish(RunResult(Exit.PANIC, status=status,
                                   message=self.panic_message() or f"POWER_FAIL code {status}"))
        else:
            self._finish(RunResult(Exit.RESET))
        self.uc.emu_stop()
