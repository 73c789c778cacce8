"""PLIC-style interrupt controller at PLIC (kernel_c/memlayout.h; driver kernel_c/plic.c).

Register offsets are QEMU virt's; only context 1 (hart 0, S-mode) is wired, because
there is no M-mode on this machine. All registers are 32-bit.

    PLIC_PRIORITY + 4*src   priority of source src (1..NSOURCES-1), 0 = never
    PLIC_PENDING            pending bits (read-only)
    PLIC_SENABLE            enable bits of context 1
    PLIC_SPRIORITY          priority threshold of context 1
    PLIC_SCLAIM             read: claim the best pending source (0 = none);
                            write: complete that source

Sources are level-triggered, as QEMU's sifive_plic models them: a source is pending
while its line is high and it is not claimed; a completed source whose line is still
high is pending again. The output (SEIP) is high while an enabled source above the
threshold is pending.
"""

from __future__ import annotations

from collections.abc import Callable

from harness import cheader
from harness.devices.base import Device, DeviceContext

_ML = cheader.load("memlayout.h")
PRIORITY = _ML["PLIC_PRIORITY"] - _ML["PLIC"]
PENDING = _ML["PLIC_PENDING"] - _ML["PLIC"]
SENABLE = _ML["PLIC_SENABLE"] - _ML["PLIC"]
STHRESHOLD = _ML["PLIC_SPRIORITY"] - _ML["PLIC"]
SCLAIM = _ML["PLIC_SCLAIM"] - _ML["PLIC"]

NSOURCES = 32  # source 0 means "none"; 1..31 fit one 32-bit pending/enable word
PRIORITY_MASK = 7


class Plic(Device):
    """Interrupt controller; `seip(level)` drives mip.SEIP."""

    size = 0x40_0000

    def __init__(self, name: str, ctx: DeviceContext, *, seip: Callable[[bool], None]) -> None:
        super().__init__(name, ctx)
        self.seip = seip
        self.priority = [0] * NSOURCES
        self.line = 0      # bit i: source i's input is high
        self.claimed = 0   # bit i: source i is claimed and not yet completed
        self.enable = 0
        self.threshold = 0
        self.claims = 0
        self._out = False

    def set_line(self, src: int, level: bool) -> None:
        """A device's interrupt line changed (emulation thread only)."""
        if level:
            self.line |= 1 << src
        else:
            self.line &= ~(1 << src)
        self._update()

    def line_for(self, src: int) -> Callable[[bool], None]:
        """The `irq` callable for a device wired to source src."""
        if not 0 < src < NSOURCES:
            raise ValueError(f"PLIC source {src} out of range 1..{NSOURCES - 1}")
        return lambda level: self.set_line(src, level)

    @property
    def pending(self) -> int:
        return self.line & ~self.claimed

    def _best(self) -> int:
        """Highest-priority pending enabled source above the threshold (lowest id wins ties)."""
        cand = self.pending & self.enable
        best, best_prio = 0, self.threshold
        while cand:
            src = (cand & -cand).bit_length() - 1
            cand &= cand - 1
            if self.priority[src] > best_prio:
                best, best_prio = src, self.priority[src]
        return best

    def _update(self) -> None:
        out = self._best() != 0
        if out != self._out:
            self._out = out
            self.seip(out)

    def read(self, offset: int, size: int) -> int:
        self.need_size(offset, size, 4)
        if PRIORITY < offset < PRIORITY + 4 * NSOURCES and offset % 4 == 0:
            return self.priority[(offset - PRIORITY) // 4]
        if offset == PENDING:
            return self.pending & 0xFFFF_FFFF
        if offset == SENABLE:
            return self.enable
        if offset == STHRESHOLD:
            return self.threshold
        if offset == SCLAIM:
            src = self._best()
            if src:
                self.claimed |= 1 << src
                self.claims += 1
                self._update()
            return src
        raise self._unknown(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        self.need_size(offset, size, 4)
        if PRIORITY < offset < PRIORITY + 4 * NSOURCES and offset % 4 == 0:
            self.priority[(offset - PRIORITY) // 4] = value & PRIORITY_MASK
        elif offset == SENABLE:
            self.enable = value & ~1  # source 0 does not exist
        elif offset == STHRESHOLD:
            self.threshold = value & PRIORITY_MASK
        elif offset == SCLAIM:
            if 0 < value < NSOURCES:
                self.claimed &= ~(1 << value)  # completing an unclaimed source is ignored
        elif offset == PENDING:
            raise self.error(offset, size, "the pending bits are read-only")
        else:
            raise self._unknown(offset, size)
        self._update()

    def _unknown(self, offset: int, size: int) -> Exception:
        if offset == PRIORITY:
            return self.error(offset, size, "source 0 does not exist")
        if 0x2000 <= offset < 0x2080 or 0x20_0000 <= offset < 0x20_1000:
            return self.error(offset, size, "context 0 (M-mode) is not wired on this machine")
        return self.error(offset, size, "no such register")

    def describe(self) -> str:
        return "plic"
