"""Run control over one machine: resume, one instruction, run to an address; why it stopped.

The machine's own run loop does the running (harness/machine/board.py): a breakpoint hook
calls `Machine.pause()` and `run()` returns Exit.PAUSE; `Machine.step()` executes one
instruction. This module adds what a debugger needs around that:

- Stepping masks interrupts (mie = 0 for that one instruction), like QEMU's gdbstub:
  otherwise every step after a pause at the prompt would land in the timer handler.
  An instruction that itself writes sie/mie is stepped unmasked. A deterministic machine
  steps unmasked: guest time stands still at the prompt there, and a step must be the
  run's own next instruction, or the past it records would not be the run's.
- A watchpoint stops right after the store: Unicorn leaves the PC on a store whose
  write already happened when a hook stops it, and would run it again on resume (an
  AMO would then apply twice). So the store is completed here: the PC moves past it,
  an AMO's rd gets the old memory value and an SC's rd gets 0 (it succeeded).
- gdb steps a RISC-V thread in software: a breakpoint at its next instruction, then a
  continue of every thread. A hart idle in wfi would never get there, while the other
  harts might run the guest to its end; so a resume makes the selected hart leave wfi,
  which the privileged spec allows at any time (the kernel's idle loop just looks for
  work and waits again). `stepi` does the same with one instruction; a hart still
  parked (before HART_START) does not step at all.
- Address spaces, processes and programs are the guest's (harness/guest/spaces.py):
  a Target is a Guest read through the machine's hart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from unicorn import UC_PROT_WRITE
from unicorn import riscv_const as R

from harness.cpu.registers import PRIV_NAMES, PRIV_U, REG_PC, SSTATUS_SIE, Hart
from harness.debug import DebugError
from harness.debug.breakpoints import Breakpoint, BreakpointTable, Hit, Watchpoint
from harness.guest.programs import Location, Programs
from harness.guest.spaces import Guest
from harness.machine.board import Machine
from harness.machine.config import Exit, RunResult
from harness.machine.cpus import Cpu
from harness.machine.guest_view import machine_phys
from harness.machine.traps import mem_operand

END_KINDS = {Exit.POWEROFF: "exited", Exit.PANIC: "panic", Exit.FAULT: "fault",
             Exit.TIMEOUT: "timeout", Exit.QUIT: "quit", Exit.RESET: "reset"}
CSR_SIE, CSR_MIE = 0x104, 0x304


@dataclass
class Stop:
    """Why the guest is stopped now."""

    kind: str                 # breakpoint watchpoint step interrupted | exited panic fault ...
    pc: int
    point: Breakpoint | Watchpoint | None = None
    hit: Hit | None = None
    message: str = ""
    result: RunResult | None = None  # set when the machine's run ended

    @property
    def ended(self) -> bool:
        return self.result is not None


class Target(Guest):
    """A machine under a debugger: its guest (harness/guest/spaces.py) read through the
    machine's hart, plus run control and breakpoints."""

    def __init__(self, machine: Machine, programs: Programs) -> None:
        super().__init__(machine.hart, machine_phys(machine), programs)
        self.m = machine
        self.bps = BreakpointTable(machine, self.phys, self.procs)
        if self.procs is not None:
            self.procs.hart = lambda: machine.cur  # cpus[selected hart].proc
        if machine.travel is not None:  # time travel arms and settles our points
            machine.travel.arm = self._arm
            machine.travel.settle = self.settle

    def _arm(self, on: bool) -> None:
        self.bps.suspended = not on

    def settle(self, res: RunResult) -> Stop | None:
        """A stop while the past is re-run (harness/debug/reverse.py): a point's hit
        becomes its Stop (a watched store is completed), and the run can go on past it."""
        hit = self.bps.take_hit()
        if hit is None:
            return None
        self.select_hart(hit.hart)
        if isinstance(hit.point, Watchpoint):
            self._complete_store(hit)
            return Stop("watchpoint", self.pc, hit.point, hit, message=hit.error)
        self.bps.arm_skip(self.pc, hit.hart)  # the next run starts on it: let it pass once
        return Stop("breakpoint", self.pc, hit.point, hit, message=hit.error)

    # ---------------------------------------------------------------- state
    @property
    def alive(self) -> bool:
        return self.m.result is None

    def check_alive(self) -> None:
        r = self.m.result
        if r is not None:
            raise DebugError(f"The machine is not running: {describe_end(r)}.")

    # ---------------------------------------------------------------- running
    def _interrupt_first(self, c: Cpu | None = None) -> bool:
        """Will hart c's (default: the selected one's) next run take an interrupt before
        executing the instruction at its pc?"""
        c = c or self.m.cpu
        if c.idle if len(self.m.cpus) > 1 else self.m.idle:
            return True
        h = c.hart
        if not h.pending_enabled():
            return False
        return h.priv == PRIV_U or bool(h.csr(R.UC_RISCV_REG_SSTATUS) & SSTATUS_SIE)

    def resume(self, only: int | None = None) -> Stop:
        """Continue until a breakpoint, a watchpoint, a pause request or the end (on any
        hart: the one that stops becomes the selected one; with `only`, hart `only` runs
        and the others stay stopped, as gdb's vCont;c:N asks). The hart that is to run
        (the selected one or `only`) leaves wfi (see the module docstring)."""
        self.check_alive()
        first = self.m.cpus[self.m.cur if only is None else only]
        if first.started and first.idle:
            first.idle = False  # past its wfi already: it runs its next instruction
        for c in self.m.cpus:
            if c.started and not self._interrupt_first(c):
                self.bps.arm_skip(c.hart.get(REG_PC), c.id)
        self.m.only = only
        try:
            res = self.m.run()
        finally:
            self.m.only = None
            self.bps.disarm()
        return self._stop(res)

    def stepi(self, mask_interrupts: bool = True) -> Stop:
        """Execute one instruction (interrupts masked unless it writes sie/mie)."""
        self.check_alive()
        if not self.m.cpu.started:
            return Stop("step", self.pc, message=f"hart {self.m.cur} is parked (not started "
                        "by the kernel yet): nothing to step")
        got = self.hart.fetch(self.pc)
        mask = (mask_interrupts and self.m.det is None
                and not (got is not None and _writes_ie(*got)))
        saved = 0
        if mask:
            saved = self.hart.csr(R.UC_RISCV_REG_MIE)
            self.hart.set_csr(R.UC_RISCV_REG_MIE, 0)
        if mask or not self._interrupt_first():
            self.bps.arm_skip(self.pc, self.m.cur)
        try:
            res = self.m.step()
        finally:
            self.bps.disarm()
            if mask:
                self.hart.set_csr(R.UC_RISCV_REG_MIE, saved)
        return self._stop(res)

    def run_to(self, loc: Location, predicate: Callable[[], bool] | None = None) -> Stop:
        """Continue until loc is reached with predicate true (an internal breakpoint),
        or anything else stops the guest first. A stop at loc has kind "step"."""
        bp = self.bps.add([loc], "", internal=True, predicate=predicate)
        try:
            stop = self.resume()
        finally:
            self.bps.remove(bp)
        if stop.point is bp:
            return Stop("step", stop.pc)
        return stop

    def _stop(self, res: RunResult | None) -> Stop:
        pc = self.pc
        if res is None:
            self.bps.take_hit()
            return Stop("step", pc)
        if res.exit != Exit.PAUSE:
            self.bps.take_hit()
            return Stop(END_KINDS.get(res.exit, res.exit.value), res.pc or pc,
                        message=res.message, result=res)
        hit = self.bps.take_hit()
        if hit is None:
            return Stop("interrupted", pc, message=res.message)
        if isinstance(hit.point, Watchpoint):
            self._complete_store(hit)
            return Stop("watchpoint", self.pc, hit.point, hit, message=hit.error)
        if hit.point.temporary:
            self.bps.remove(hit.point)
        return Stop("breakpoint", pc, hit.point, hit, message=hit.error)

    def _complete_store(self, hit: Hit) -> None:
        """The watched store already wrote memory and the PC is still on it: finish
        the instruction (see the module docstring)."""
        pc = self.pc
        got = self.hart.fetch(pc)
        if got is None:
            return
        bits, n = got
        op = mem_operand(bits, n)
        if op is None:
            return
        rs1, disp, _ = op
        va = (self.hart.x(rs1) + disp) & 0xFFFF_FFFF_FFFF_FFFF
        if self.hart.translate(va, UC_PROT_WRITE) != hit.store_addr:
            return  # not the store we saw: leave the guest alone
        if n == 4 and bits & 0x7F == 0x2F:  # AMO / SC: rd was not written yet
            rd, funct5 = (bits >> 7) & 31, bits >> 27
            if funct5 == 0b00011:  # sc: the store happened, so it succeeded
                self.hart.set_x(rd, 0)
            elif funct5 != 0b00010:  # amo*: rd = the old memory value, sign-extended
                width = 4 if (bits >> 12) & 7 == 2 else 8
                old = int.from_bytes(hit.store_old[:width], "little", signed=True)
                self.hart.set_x(rd, old)
        self.hart.set(REG_PC, pc + n)
        hit.pc = pc

    # ---------------------------------------------------------------- harts
    @property  # type: ignore[override]
    def hart(self) -> Hart:
        """The selected hart (the one that stopped, or `cpu N`)."""
        return self.m.hart

    @hart.setter
    def hart(self, h: Hart) -> None:
        pass  # Guest's constructor: the machine's current hart is the selected one

    def select_hart(self, n: int) -> None:
        if not 0 <= n < len(self.m.cpus):
            raise DebugError(f"no hart {n} (the machine has {len(self.m.cpus)})")
        self.m.cur = n
        self.m._pc = self.m.hart.get(REG_PC)

    def context(self) -> str:
        """"S-mode, pid 3 (sh)" (with "hart N, " on a multi-hart machine) for stop lines."""
        mode = PRIV_NAMES.get(self.priv, str(self.priv))
        p = self.current_proc()
        where = f"hart {self.m.cur}, " if len(self.m.cpus) > 1 else ""
        return where + (f"{mode}-mode, pid {p.pid} ({p.name})" if p else f"{mode}-mode, no process")


def describe_end(r: RunResult) -> str:
    if r.exit == Exit.POWEROFF:
        return f"the guest powered off with status {r.status}"
    if r.exit == Exit.PANIC:
        return f"kernel panic ({r.message})"
    if r.exit == Exit.FAULT:
        return f"machine fault ({r.message})"
    return r.message or r.exit.value


def _writes_ie(bits: int, n: int) -> bool:
    """Is this a CSR instruction on sie or mie (which a masked step would undo)?"""
    return (n == 4 and bits & 0x7F == 0x73 and (bits >> 12) & 7 != 0
            and bits >> 20 in (CSR_SIE, CSR_MIE))
