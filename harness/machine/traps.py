"""Synchronous traps: the harness delivers them, because Unicorn never runs the guest's
trap vector for exceptions (../shared/reference/unicorn_riscv.md, rows 2a-2b and 4).

Unicorn reports every exception to UC_HOOK_INTR with the PC already advanced by 4 (even
for 2-byte instructions), no scause/sepc/stval written and the privilege unchanged.
`Traps.on_intr` turns that into what hardware does, inside the hook, so emulation goes on
in the guest's handler without leaving `emu_start`:

    intno 8, from U      ecall: cause 8 (ECALL_U), stval 0
    intno 8, from S      ecall from S: this machine has no SBI -> MachineFault
    intno 2              illegal instruction: `csrr rd, time` is emulated (rd = mtime,
                         the guest goes on); anything else: cause 2, stval = the bits
    intno 12             instruction page fault: stval = epc
    intno 13, 15, 5, 7   load/store page or access fault: stval = the effective address,
                         recomputed by decoding the instruction (`mem_operand`)
    intno 0, 4, 6        misaligned: stval = the effective address (or epc for fetches)
    ebreak               arrives at UC_HOOK_INSN_INVALID with the PC not advanced: cause 3

Delivery = what the privileged spec says for a trap taken into S-mode: SPP <- old
privilege, SPIE <- SIE, SIE <- 0, scause/sepc/stval, privilege S, pc <- stvec (BASE;
synchronous traps never vector).

The machine normally runs the C twin of this module (harness/fastpath/traps.c, through
harness/machine/traps_c.py), which does exactly this without entering Python and hands back
what it does not decide. This module stays its specification and the Python path
(HARNESS_TRAPS=python); tests/test_traps_c.py holds the two to the same results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, MutableMapping

from unicorn import UC_HOOK_INSN_INVALID, UC_HOOK_INTR, Uc
from unicorn import riscv_const as R

from harness.cpu.registers import (
    PRIV_NAMES,
    PRIV_S,
    PRIV_U,
    REG_PC,
    REG_PRIV,
    SSTATUS_SIE,
    SSTATUS_SPIE,
    SSTATUS_SPP,
    Hart,
)
from harness.devices.base import MachineFault

# scause values (privileged spec, table 4.2)
CAUSE_NAMES = {
    0: "instruction address misaligned", 1: "instruction access fault",
    2: "illegal instruction", 3: "breakpoint", 4: "load address misaligned",
    5: "load access fault", 6: "store/AMO address misaligned", 7: "store/AMO access fault",
    8: "environment call from U-mode", 9: "environment call from S-mode",
    12: "instruction page fault", 13: "load page fault", 15: "store/AMO page fault",
}
INTERRUPT_NAMES = {1: "supervisor software interrupt", 5: "supervisor timer interrupt",
                   9: "supervisor external interrupt"}
INTERRUPT = 1 << 63

ECALL = 8
ILLEGAL = 2
BREAKPOINT = 3
FETCH_FAULTS = (0, 1, 12)
DATA_FAULTS = (4, 5, 6, 7, 13, 15)

EBREAK, C_EBREAK = 0x0010_0073, 0x9002
RDTIME_MASK, RDTIME = 0xFFFF_F07F, 0xC010_2073  # csrrs rd, time, x0
SCOUNTEREN_TM = 1 << 1

_PC_PRIV = (REG_PC, REG_PRIV)
_STATUS_VEC = (R.UC_RISCV_REG_SSTATUS, R.UC_RISCV_REG_STVEC)
_DELIVER = (R.UC_RISCV_REG_SSTATUS, R.UC_RISCV_REG_SCAUSE, R.UC_RISCV_REG_SEPC,
            R.UC_RISCV_REG_STVAL, REG_PC)


def cause_name(scause: int) -> str:
    if scause & INTERRUPT:
        return INTERRUPT_NAMES.get(scause & ~INTERRUPT, f"interrupt {scause & ~INTERRUPT}")
    return CAUSE_NAMES.get(scause, f"exception {scause}")


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


def mem_operand(insn: int, length: int) -> tuple[int, int, int] | None:
    """(base register, displacement, access bytes) of a load, store or AMO, else None.

    Covers RV64 I/F/D/A loads and stores and the C extension's register and
    stack-pointer forms.
    """
    if length == 4:
        op, f3 = insn & 0x7F, (insn >> 12) & 7
        rs1 = (insn >> 15) & 31
        if op in (0x03, 0x07):  # LOAD, LOAD-FP
            size = (1, 2, 4, 8, 1, 2, 4, 0)[f3]
            return (rs1, _sext(insn >> 20, 12), size) if size else None
        if op in (0x23, 0x27):  # STORE, STORE-FP
            imm = ((insn >> 25) << 5) | ((insn >> 7) & 31)
            return (rs1, _sext(imm, 12), 1 << f3) if f3 < 4 else None
        if op == 0x2F and f3 in (2, 3):  # AMO, LR, SC
            return rs1, 0, 4 if f3 == 2 else 8
        return None
    quadrant, f3 = insn & 3, (insn >> 13) & 7
    if quadrant == 0 and f3 in (1, 2, 3, 5, 6, 7):  # c.fld c.lw c.ld c.fsd c.sw c.sd
        rs1 = ((insn >> 7) & 7) + 8
        hi = ((insn >> 10) & 7) << 3
        if f3 in (2, 6):
            return rs1, hi | ((insn >> 4) & 4) | ((insn << 1) & 0x40), 4
        return rs1, hi | ((insn << 1) & 0xC0), 8
    if quadrant == 2 and f3 in (1, 2, 3, 5, 6, 7):  # the sp-relative forms
        if f3 == 2:  # c.lwsp
            return 2, ((insn >> 7) & 0x20) | ((insn >> 2) & 0x1C) | ((insn << 4) & 0xC0), 4
        if f3 in (1, 3):  # c.fldsp c.ldsp
            return 2, ((insn >> 7) & 0x20) | ((insn >> 2) & 0x18) | ((insn << 4) & 0x1C0), 8
        if f3 == 6:  # c.swsp
            return 2, ((insn >> 7) & 0x3C) | ((insn >> 1) & 0xC0), 4
        return 2, ((insn >> 7) & 0x38) | ((insn >> 1) & 0x1C0), 8  # c.fsdsp c.sdsp
    return None


class Traps:
    """Delivers synchronous exceptions and emulates rdtime; counts what it did."""

    def __init__(self, uc: Uc, hart: Hart, mtime: Callable[[], int],
                 counts: MutableMapping[int, int] | None = None) -> None:
        self.hart = hart
        self.mtime = mtime
        # delivered traps by scause (one table may be shared by all harts; the C path's
        # is harness/machine/traps_c.py's TrapCounts)
        self.counts: MutableMapping[int, int] = Counter() if counts is None else counts
        self.rdtime = 0
        self.ebreak_delivered = False  # emu_start will end with a spurious UC_ERR_EXCEPTION
        # called after each trap this hook delivered, with the privilege it came from (the
        # machine may end the run there: harness/machine/board.py, _after_trap)
        self.after_trap: Callable[[Uc, int], None] | None = None
        self._attach(uc)

    def _attach(self, uc: Uc) -> None:
        uc.hook_add(UC_HOOK_INTR, self._on_intr)
        uc.hook_add(UC_HOOK_INSN_INVALID, self._on_invalid)

    def watch(self, on: bool) -> None:
        """While on, `after_trap` must see every trap. This path always calls it; the C
        path (harness/machine/traps_c.py) sends the traps through here while on."""

    def hurry(self, at_ns: int) -> None:
        """End the run at a trap from U-mode at or after host monotonic `at_ns` (0: off;
        Machine._hurry). This path leaves it to `after_trap`, which sees every trap; the
        C path does it in C, without handing the traps to Python."""

    def hurried(self) -> bool:
        """Did `hurry` end the last run (C path)?"""
        return False

    # ---------------------------------------------------------------- hooks
    def _on_intr(self, uc: Uc, intno: int, _data: object) -> None:
        h = self.hart
        pc, priv = h.get_many(_PC_PRIV)
        epc = pc - 4  # Unicorn advanced the PC by 4, whatever the length
        if intno == ECALL:
            if priv != PRIV_U:
                raise MachineFault(
                    f"ecall from {PRIV_NAMES.get(priv, priv)}-mode at {epc:#x}: this machine "
                    "has no SBI (the harness is the firmware; use the MMIO devices of "
                    "kernel_c/memlayout.h)", pc=epc)
            self.deliver(ECALL, epc, 0, priv)
        elif intno == ILLEGAL:
            self._illegal(epc)
        elif intno in FETCH_FAULTS:
            self.deliver(intno, epc, epc)
        elif intno in DATA_FAULTS:
            self.deliver(intno, epc, self.effective_address(epc))
        else:
            raise MachineFault(f"Unicorn reported exception {intno} at {epc:#x}, which this "
                               "machine does not model", pc=epc)
        if self.after_trap is not None:
            self.after_trap(uc, priv)

    def _on_invalid(self, uc: Uc, _data: object) -> bool:
        h = self.hart
        pc = h.get(REG_PC)
        got = h.fetch(pc)
        if got is None or got[0] not in (EBREAK, C_EBREAK):
            return False  # emu_start raises UC_ERR_INSN_INVALID: a machine fault
        self.deliver(BREAKPOINT, pc, pc)
        self.ebreak_delivered = True
        return True

    def _illegal(self, epc: int) -> None:
        h = self.hart
        got = h.fetch(epc)
        bits = got[0] if got else 0
        if got and got[1] == 4 and bits & RDTIME_MASK == RDTIME:
            if h.get(REG_PRIV) != PRIV_U or h.csr(R.UC_RISCV_REG_SCOUNTEREN) & SCOUNTEREN_TM:
                self.rdtime += 1
                h.set_x((bits >> 7) & 31, self.mtime())
                return  # the PC is already past the instruction
        self.deliver(ILLEGAL, epc, bits)

    # ---------------------------------------------------------------- delivery
    def effective_address(self, epc: int) -> int:
        """The address the load/store/AMO at epc accessed (0 if it cannot be decoded)."""
        got = self.hart.fetch(epc)
        if got is None:
            return 0
        op = mem_operand(*got)
        if op is None:
            return 0
        base, disp, _ = op
        return (self.hart.x(base) + disp) & 0xFFFF_FFFF_FFFF_FFFF

    def deliver(self, cause: int, epc: int, tval: int, prev: int | None = None) -> None:
        """Take a synchronous trap into S-mode, as the privileged spec describes.
        (Four libunicorn calls: this is every system call's path.)"""
        h = self.hart
        if prev is None:
            prev = h.get(REG_PRIV)
        if prev != PRIV_S:
            h.set(REG_PRIV, PRIV_S)  # S CSRs are accessible from here on
        st, stvec = h.get_many(_STATUS_VEC)
        stvec &= ~3
        if stvec == 0 or (cause in FETCH_FAULTS and epc == stvec):
            h.set(REG_PRIV, prev)
            why = "stvec is not set" if stvec == 0 else "the trap vector itself cannot be fetched"
            raise MachineFault(f"{cause_name(cause)} at {epc:#x} (stval {tval:#x}) and {why}",
                               pc=epc)
        st2 = st & ~(SSTATUS_SPP | SSTATUS_SPIE | SSTATUS_SIE)
        if prev == PRIV_S:
            st2 |= SSTATUS_SPP
        if st & SSTATUS_SIE:
            st2 |= SSTATUS_SPIE
        h.set_many(_DELIVER, (st2, cause, epc, tval, stvec))
        self.counts[cause] += 1
