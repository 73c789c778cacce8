"""The MMIO bus: Unicorn's MMIO callbacks dispatched to the devices of the memory map.

One `mmio_map` per device window; the callback calls `device.read(offset, size)` or
`device.write(offset, size, value)`. A MachineFault (DeviceError) from a device is kept
in `fault` and emulation stops right after the access, with the PC on the instruction
(the machine reports it); any other exception is a harness bug and propagates through
the Unicorn binding, which re-raises it from `emu_start`.

Restarted accesses. After every load and store Unicorn checks for a pending stop and,
if one is pending, exits with the PC restored to that instruction, which would then run
again when emulation resumes (before a load's result reaches its register; a store's
write has happened). A stop from the waker thread that lands between an MMIO callback and
that check would repeat the device access: a byte popped twice from the UART, a second
PLIC claim, a console byte printed twice. So the bus records the accesses of the most
recent MMIO instruction, and when a run that was asked to stop ends with the PC on
exactly that instruction (decoded: same effective physical address and width, and for a
store the same value in its source register), it *completes* the instruction right
there, before anything else runs: a load's recorded value goes to its destination
register (sign- or zero-extended as the instruction says), and the PC moves past it. The
device has then seen each access exactly once.

Completing at once matters: the stopped run usually ends because an event was posted, so
an interrupt is pending and would be taken *before* a restarted instruction; the handler
makes its own MMIO accesses (a timer tick writes mtimecmp, then maybe a context switch
and another process's console output) and can itself be stopped mid-access. An earlier
design armed a "replay" for the next matching access instead, and a second restart
inside the handler replaced it: the first instruction then really ran twice (the
doubled console bytes "rreqid", "baatch"; tests/test_reliability_console.py).

One case stays ambiguous, as before: a loop whose only MMIO instruction starts a
translated block, stopped at that block's start after an iteration, looks like a
restart. The instruction is then completed with the previous iteration's value (a
store of the same value is skipped; a different value is seen in the register and not
taken for a restart). Our kernel's only single-access polling loop, uartputc_sync's
wait on LSR, never iterates: the emulated transmitter is always ready.

This is the Python path's bus (`HARNESS_TRAPS=python`); by default the callbacks are C
(`CBus`, harness/machine/bus_c.py), which also record the accesses, in C.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicorn import Uc

from harness.cpu.registers import REG_PC, Hart
from harness.devices.base import Device, MachineFault
from harness.machine.traps import mem_operand


@dataclass(frozen=True)
class Access:
    """One MMIO callback: device, offset, width, direction and value read or written."""

    device: Device
    base: int
    offset: int
    size: int
    write: bool
    value: int


class MmioBus:
    """Device windows of the machine, with restart-safe dispatch."""

    def __init__(self, uc: Uc, hart: Hart) -> None:
        self.uc, self.hart = uc, hart
        self.windows: list[tuple[int, Device]] = []
        self.accesses = 0
        self.replayed = 0  # restarted MMIO instructions completed by after_stop
        self._last: list[Access] = []
        self.fault: MachineFault | None = None

    def map(self, base: int, device: Device) -> None:
        self.windows.append((base, device))
        self.uc.mmio_map(base, device.size, self._read, (base, device),
                         self._write, (base, device))

    def device_at(self, pa: int) -> tuple[int, Device] | None:
        for base, dev in self.windows:
            if base <= pa < base + dev.size:
                return base, dev
        return None

    # ---------------------------------------------------------------- callbacks
    def _read(self, uc: Uc, offset: int, size: int, win: tuple[int, Device]) -> int:
        base, dev = win
        try:
            value = dev.read(offset, size)
        except MachineFault as e:
            self._stop(e)
            return 0
        self._record(Access(dev, base, offset, size, False, value))
        return value

    def _write(self, uc: Uc, offset: int, size: int, value: int,
               win: tuple[int, Device]) -> None:
        base, dev = win
        try:
            dev.write(offset, size, value)
        except MachineFault as e:
            self._stop(e)
            return
        self._record(Access(dev, base, offset, size, True, value))

    def _stop(self, fault: MachineFault) -> None:
        if self.fault is None:
            self.fault = fault
        self.uc.emu_stop()

    def _record(self, a: Access) -> None:
        self.accesses += 1
        last = self._last
        if (len(last) == 1 and last[0].device is a.device and last[0].write == a.write
                and a.size == last[0].size == 4 and a.offset == last[0].offset + 4):
            last.append(a)  # the high half of an 8-byte access (Unicorn splits them)
        else:
            self._last = [a]

    # ---------------------------------------------------------------- run boundaries
    def new_run(self) -> None:
        self._last = []

    def _take_last(self) -> list[Access]:
        """The accesses of the most recent MMIO instruction, forgotten."""
        last, self._last = self._last, []
        return last

    def after_stop(self, pc: int) -> int:
        """A run that was asked to stop ended with the PC at pc. If the instruction there
        made this run's last MMIO access and would run again, complete it now (see the
        module docstring). Returns the PC to resume at."""
        last = self._take_last()
        if not last:
            return pc
        got = self.hart.fetch(pc)
        op = mem_operand(*got) if got else None
        form = mmio_form(*got) if got else None
        if op is None or form is None:
            return pc  # an AMO or FP access (never used on MMIO): it repeats
        rs1, disp, width = op
        store, reg, signed = form
        first = last[0]
        if width != sum(a.size for a in last) or any(a.write != store for a in last):
            return pc
        va = (self.hart.x(rs1) + disp) & 0xFFFF_FFFF_FFFF_FFFF
        if self.hart.translate(va) != first.base + first.offset:
            return pc
        value = 0
        for i, a in enumerate(last):
            value |= (a.value & 0xFFFF_FFFF) << (32 * i) if len(last) > 1 else a.value
        mask = (1 << (8 * width)) - 1
        if store:
            if self.hart.x(reg) & mask != value & mask:
                return pc  # a later store of another value: not this access restarted
        else:
            value &= mask
            if signed and value >> (8 * width - 1):
                value -= 1 << (8 * width)
            self.hart.set_x(reg, value)
        pc += got[1]  # type: ignore[index]
        self.hart.set(REG_PC, pc)
        self.replayed += 1
        return pc


def mmio_form(insn: int, length: int) -> tuple[bool, int, bool] | None:
    """(is a store, data register, sign-extending load) of an integer load or store,
    else None (AMOs, FP accesses, anything else). The address part is mem_operand's."""
    if length == 4:
        op, f3 = insn & 0x7F, (insn >> 12) & 7
        if op == 0x03 and f3 != 7:  # lb lh lw ld lbu lhu lwu
            return False, (insn >> 7) & 31, f3 < 3
        if op == 0x23 and f3 < 4:   # sb sh sw sd
            return True, (insn >> 20) & 31, False
        return None
    quadrant, f3 = insn & 3, (insn >> 13) & 7
    if quadrant == 0 and f3 in (2, 3, 6, 7):  # c.lw c.ld c.sw c.sd
        return f3 >= 6, ((insn >> 2) & 7) + 8, f3 == 2
    if quadrant == 2 and f3 in (2, 3):         # c.lwsp c.ldsp
        return False, (insn >> 7) & 31, f3 == 2
    if quadrant == 2 and f3 in (6, 7):         # c.swsp c.sdsp
        return True, (insn >> 2) & 31, False
    return None
