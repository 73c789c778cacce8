"""PLIC-style interrupt controller at PLIC (kernel_c/memlayout.h; driver kernel_c/plic.c).

Register offsets are QEMU virt's. Hart h's S-mode context is context 2h+1; the M-mode
contexts 2h are not wired, because there is no M-mode on this machine. All registers
are 32-bit (E = PLIC_SENABLE_STRIDE, C = PLIC_SCONTEXT_STRIDE):

    PLIC_PRIORITY + 4*src     priority of source src (1..NSOURCES-1), 0 = never
    PLIC_PENDING              pending bits (read-only)
    PLIC_SENABLE + E*h        enable bits of hart h's context
    PLIC_SPRIORITY + C*h      priority threshold of hart h's context
    PLIC_SCLAIM + C*h         read: claim the best pending source enabled for the
                              context (0 = none); write: complete that source

A source claimed by one context is not pending for the others until it is completed,
so when several harts take the same SEIP only one of them gets the source and the
others claim 0 (as on QEMU).

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
ESTRIDE = _ML["PLIC_SENABLE_STRIDE"]
CSTRIDE = _ML["PLIC_SCONTEXT_STRIDE"]

NSOURCES = 32  # source 0 means "none"; 1..31 fit one 32-bit pending/enable word
PRIORITY_MASK = 7


class Plic(Device):
    """Interrupt controller; `seip(hart, level)` drives that hart's mip.SEIP."""

    size = 0x40_0000

    def __init__(self, name: str, ctx: DeviceContext, *, seip: Callable[[int, bool], None],
                 nharts: int = 1) -> None:
        super().__init__(name, ctx)
        self.seip = seip
        self.priority = [0] * NSOURCES
        self.line = 0      # bit i: source i's input is high
        self.claimed = 0   # bit i: source i is claimed and not yet completed
        self.enables = [0] * nharts     # per context (hart)
        self.thresholds = [0] * nharts
        self.claims = 0
        self._out = [False] * nharts

    @property
    def enable(self) -> int:
        return self.enables[0]

    @property
    def threshold(self) -> int:
        return self.thresholds[0]

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

    def _best(self, h: int) -> int:
        """Highest-priority pending source enabled for hart h's context above its
        threshold (lowest id wins ties)."""
        cand = self.pending & self.enables[h]
        best, best_prio = 0, self.thresholds[h]
        while cand:
            src = (cand & -cand).bit_length() - 1
            cand &= cand - 1
            if self.priority[src] > best_prio:
                best, best_prio = src, self.priority[src]
        return best

    def _update(self) -> None:
        for h in range(len(self._out)):
            out = self._best(h) != 0
            if out != self._out[h]:
                self._out[h] = out
                self.seip(h, out)

    def _context(self, offset: int, base: int, stride: int) -> int | None:
        """Hart whose register at `base` this offset is, or None."""
        h, r = divmod(offset - base, stride)
        return h if offset >= base and r == 0 and h < len(self._out) else None

    def read(self, offset: int, size: int) -> int:
        self.need_size(offset, size, 4)
        if PRIORITY < offset < PRIORITY + 4 * NSOURCES and offset % 4 == 0:
            return self.priority[(offset - PRIORITY) // 4]
        if offset == PENDING:
            return self.pending & 0xFFFF_FFFF
        if (h := self._context(offset, SENABLE, ESTRIDE)) is not None:
            return self.enables[h]
        if (h := self._context(offset, STHRESHOLD, CSTRIDE)) is not None:
            return self.thresholds[h]
        if (h := self._context(offset, SCLAIM, CSTRIDE)) is not None:
            src = self._best(h)
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
        elif (h := self._context(offset, SENABLE, ESTRIDE)) is not None:
            self.enables[h] = value & ~1  # source 0 does not exist
        elif (h := self._context(offset, STHRESHOLD, CSTRIDE)) is not None:
            self.thresholds[h] = value & PRIORITY_MASK
        elif self._context(offset, SCLAIM, CSTRIDE) is not None:
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
        n = len(self._out)
        ctx = ((offset - 0x2000) // 0x80 if 0x2000 <= offset < 0x20_0000
               else (offset - 0x20_0000) // 0x1000 if offset >= 0x20_0000 else -1)
        if 0 <= ctx < 2 * n and ctx % 2 == 0:
            return self.error(offset, size, f"context {ctx} (hart {ctx // 2} M-mode) is not "
                              "wired on this machine")
        if SENABLE <= offset < 0x20_0000 or offset >= STHRESHOLD:
            return self.error(offset, size, f"no such register (contexts exist for {n} "
                              f"hart{'s' if n > 1 else ''})")
        return self.error(offset, size, "no such register")

    def describe(self) -> str:
        return "plic"
