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
from dataclasses import dataclass, field
from typing import Any

from harness.abi import cheader
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


@dataclass
class PlicState:
    """The PLIC's registers and lines (the Python path's twin of `struct fp_plic`)."""

    nharts: int
    priority: list[int] = field(default_factory=lambda: [0] * NSOURCES)
    line: int = 0      # bit i: source i's input is high
    claimed: int = 0   # bit i: source i is claimed and not yet completed
    enables: list[int] = field(default_factory=list)     # per context (hart)
    thresholds: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)         # SEIP of each hart as last driven
    claims: int = 0

    def __post_init__(self) -> None:
        n = self.nharts
        self.enables, self.thresholds, self.out = [0] * n, [0] * n, [0] * n


class Plic(Device):
    """Interrupt controller; `seip(hart, level)` drives that hart's mip.SEIP."""

    size = 0x40_0000

    def __init__(self, name: str, ctx: DeviceContext, *, seip: Callable[[int, bool], None],
                 nharts: int = 1) -> None:
        super().__init__(name, ctx)
        self.seip = seip
        self.s: Any = PlicState(nharts)

    def use_c_path(self, st: Any) -> None:
        """Keep the state in `st` (a `struct fp_plic`) from now on, as it is now."""
        old, self.s = self.s, st
        st.nharts = old.nharts
        for name in ("line", "claimed", "claims"):
            setattr(st, name, getattr(old, name))
        for name in ("priority", "enables", "thresholds", "out"):
            for i, v in enumerate(getattr(old, name)):
                getattr(st, name)[i] = v

    @property
    def line(self) -> int:
        return int(self.s.line)

    @property
    def claimed(self) -> int:
        return int(self.s.claimed)

    @property
    def claims(self) -> int:
        return int(self.s.claims)

    @property
    def enables(self) -> list[int]:
        return list(self.s.enables)[: self.s.nharts]

    @property
    def thresholds(self) -> list[int]:
        return list(self.s.thresholds)[: self.s.nharts]

    @property
    def enable(self) -> int:
        return int(self.s.enables[0])

    @property
    def threshold(self) -> int:
        return int(self.s.thresholds[0])

    def set_line(self, src: int, level: bool) -> None:
        """A device's interrupt line changed (emulation thread only)."""
        if level:
            self.s.line |= 1 << src
        else:
            self.s.line &= ~(1 << src)
        self._update()

    def line_for(self, src: int) -> Callable[[bool], None]:
        """The `irq` callable for a device wired to source src."""
        if not 0 < src < NSOURCES:
            raise ValueError(f"PLIC source {src} out of range 1..{NSOURCES - 1}")
        return lambda level: self.set_line(src, level)

    @property
    def pending(self) -> int:
        return int(self.s.line & ~self.s.claimed)

    def _best(self, h: int) -> int:
        """Highest-priority pending source enabled for hart h's context above its
        threshold (lowest id wins ties)."""
        s = self.s
        cand = s.line & ~s.claimed & s.enables[h]
        best, best_prio = 0, s.thresholds[h]
        while cand:
            src = (cand & -cand).bit_length() - 1
            cand &= cand - 1
            if s.priority[src] > best_prio:
                best, best_prio = src, s.priority[src]
        return best

    def _update(self) -> None:
        s = self.s
        for h in range(s.nharts):
            out = int(self._best(h) != 0)
            if out != s.out[h]:
                s.out[h] = out
                self.seip(h, bool(out))

    def _context(self, offset: int, base: int, stride: int) -> int | None:
        """Hart whose register at `base` this offset is, or None."""
        h, r = divmod(offset - base, stride)
        return h if offset >= base and r == 0 and h < self.s.nharts else None

    def read(self, offset: int, size: int) -> int:
        self.need_size(offset, size, 4)
        s = self.s
        if PRIORITY < offset < PRIORITY + 4 * NSOURCES and offset % 4 == 0:
            return int(s.priority[(offset - PRIORITY) // 4])
        if offset == PENDING:
            return self.pending & 0xFFFF_FFFF
        if (h := self._context(offset, SENABLE, ESTRIDE)) is not None:
            return int(s.enables[h])
        if (h := self._context(offset, STHRESHOLD, CSTRIDE)) is not None:
            return int(s.thresholds[h])
        if (h := self._context(offset, SCLAIM, CSTRIDE)) is not None:
            src = self._best(h)
            if src:
                s.claimed |= 1 << src
                s.claims += 1
                self._update()
            return src
        raise self._unknown(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        self.need_size(offset, size, 4)
        s = self.s
        value &= 0xFFFF_FFFF
        if PRIORITY < offset < PRIORITY + 4 * NSOURCES and offset % 4 == 0:
            s.priority[(offset - PRIORITY) // 4] = value & PRIORITY_MASK
        elif (h := self._context(offset, SENABLE, ESTRIDE)) is not None:
            s.enables[h] = value & ~1  # source 0 does not exist
        elif (h := self._context(offset, STHRESHOLD, CSTRIDE)) is not None:
            s.thresholds[h] = value & PRIORITY_MASK
        elif self._context(offset, SCLAIM, CSTRIDE) is not None:
            if 0 < value < NSOURCES:
                s.claimed &= ~(1 << value)  # completing an unclaimed source is ignored
        elif offset == PENDING:
            raise self.error(offset, size, "the pending bits are read-only")
        else:
            raise self._unknown(offset, size)
        self._update()

    def _unknown(self, offset: int, size: int) -> Exception:
        if offset == PRIORITY:
            return self.error(offset, size, "source 0 does not exist")
        n = self.s.nharts
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
