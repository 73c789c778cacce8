"""The MMIO bus: Unicorn's MMIO callbacks dispatched to the devices of the memory map.

One `mmio_map` per device window; the callback calls `device.read(offset, size)` or
`device.write(offset, size, value)`. A MachineFault (DeviceError) from a device is kept
in `fault` and emulation stops right after the access, with the PC on the instruction
(the machine reports it); any other exception is a harness bug and propagates through
the Unicorn binding, which re-raises it from `emu_start`.

Restarted accesses. Unicorn checks for a pending stop right after every load and store
and, if one is pending, exits with the PC restored to that instruction, which then runs
again when emulation resumes (before the load's result reaches its register). A stop
from the waker thread that lands between an MMIO callback and that check would repeat
the device access: a byte popped twice from the UART, a second PLIC claim. So the bus
records the accesses of the most recent MMIO instruction, and when a run that was asked
to stop ends with the PC on exactly that instruction (decoded: same effective physical
address and width), it arms a replay: when the next accesses to that device register
repeat the recorded ones, reads return the recorded values and writes of the same value
are dropped, so the device sees each access once. (The PC inside an MMIO callback is
not exact, only the start of the translated block, so the replay cannot match on it;
the restarted instruction is in practice the next MMIO access, because device accesses
run with interrupts off.)
"""

from __future__ import annotations

from dataclasses import dataclass

from unicorn import Uc

from harness.devices.base import Device, MachineFault
from harness.hart import Hart
from harness.traps import mem_operand


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
        self.replayed = 0
        self._last: list[Access] = []
        self._replay: list[Access] = []
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
        hit = self._replayed(dev, offset, size, False, 0) if self._replay else None
        try:
            value = dev.read(offset, size) if hit is None else hit
        except MachineFault as e:
            self._stop(e)
            return 0
        self._record(Access(dev, base, offset, size, False, value))
        return value

    def _write(self, uc: Uc, offset: int, size: int, value: int,
               win: tuple[int, Device]) -> None:
        base, dev = win
        if not (self._replay and self._replayed(dev, offset, size, True, value) is not None):
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

    def _replayed(self, dev: Device, offset: int, size: int, write: bool,
                  value: int) -> int | None:
        """The recorded value if this access repeats the next armed one, else None.
        A replayed access is recorded again like a real one: the restarted instruction
        may itself be stopped and restarted."""
        a = self._replay[0]
        if (a.device is not dev or a.offset != offset or a.size != size or a.write != write
                or (write and a.value != value)):
            return None
        self._replay.pop(0)
        self.replayed += 1
        return a.value

    # ---------------------------------------------------------------- run boundaries
    def new_run(self) -> None:
        self._last = []

    def after_stop(self, pc: int) -> None:
        """A run that was asked to stop ended with the PC at pc: arm a replay if the
        instruction there made this run's last MMIO access and will run again."""
        last, self._last = self._last, []
        if not last:
            return
        got = self.hart.fetch(pc)
        op = mem_operand(*got) if got else None
        if op is None:
            return
        rs1, disp, width = op
        first = last[0]
        if width != sum(a.size for a in last):
            return
        va = (self.hart.x(rs1) + disp) & 0xFFFF_FFFF_FFFF_FFFF
        if self.hart.translate(va) != first.base + first.offset:
            return
        self._replay = last
