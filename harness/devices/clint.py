"""CLINT-style timer at CLINT (kernel_c/memlayout.h; driver kernel_c/timer.c).

64-bit registers, each accessed as two 32-bit halves (Unicorn splits 8-byte MMIO
accesses, low word first):

    CLINT_MTIME                  read-only   current time (harness/cpu/clock.py), TIMEBASE_HZ
    CLINT_MTIMECMP + 8*hart      read/write  hart's deadline: its supervisor timer
                                             interrupt (STIP) is pending while
                                             mtime >= mtimecmp (QEMU virt's layout)

This is not QEMU's CLINT: there is no M-mode, so the comparator drives STIP directly
(Unicorn cannot raise MTIP). Writing mtimecmp re-evaluates STIP at once, so a handler
that moves the deadline into the future sees STIP drop before its `sret`.

With the host clock and the C bus (harness/machine/bus_c.py) the registers are served in C
(harness/fastpath/clint.c) and `cmp`/`levels` are views of its `struct fp_clint`
(`use_c_path`): this object stays the owner as the run loop, the hang watch and the
debugger see it, and its `on_deadline` is called from C only when a store moved the
earliest deadline before the one the running slice ends at.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from typing import Any

from harness.abi import cheader
from harness.cpu.clock import NEVER, Clock
from harness.devices.base import Device, DeviceContext

_ML = cheader.load("memlayout.h")
MTIMECMP = _ML["CLINT_MTIMECMP"] - _ML["CLINT"]
MTIME = _ML["CLINT_MTIME"] - _ML["CLINT"]
STRIDE = _ML["CLINT_MTIMECMP_STRIDE"]


class Clint(Device):
    """One timer comparator per hart. `stip(hart, level)` drives that hart's mip.STIP;
    `on_deadline()` tells the run loop that a deadline moved."""

    size = 0x10000

    def __init__(self, name: str, ctx: DeviceContext, *, clock: Clock,
                 stip: Callable[[int, bool], None], on_deadline: Callable[[], None],
                 nharts: int = 1) -> None:
        super().__init__(name, ctx)
        self.clock = clock
        self.stip = stip
        self.on_deadline = on_deadline
        self.cmp: MutableSequence[int] = [NEVER] * nharts  # mtimecmp of each hart
        self.levels: MutableSequence[bool] | MutableSequence[int] = [False] * nharts
        self._latched_mtime: int | None = None  # mtime sampled by a low-half read
        self.fast: Any = None  # the struct fp_clint (use_c_path), or None

    def use_c_path(self, st: Any) -> None:
        """Keep cmp/levels in `st` (a `struct fp_clint`) from now on, as they are now."""
        n = len(self.cmp)
        st.nharts, st.mtime_off, st.cmp_off, st.stride = n, MTIME, MTIMECMP, STRIDE
        for h in range(n):
            st.cmp[h], st.level[h] = self.cmp[h], self.levels[h]
        self.fast = st
        self.cmp, self.levels = st.cmp[0:n], st.level[0:n]  # views, not copies

    @property
    def mtimecmp(self) -> int:
        """The earliest deadline of any hart (NEVER if none is armed)."""
        return min(self.cmp)

    @property
    def level(self) -> bool:
        """Whether a comparator drives STIP now (as of the last tick or write)."""
        return any(self.levels)

    def armed_ahead(self) -> int:
        """The earliest deadline whose STIP is not raised yet (NEVER if none)."""
        pairs = zip(self.cmp, self.levels, strict=True)
        return min((c for c, lv in pairs if not lv), default=NEVER)

    def tick(self) -> None:
        """Re-evaluate every STIP against the current time (the run loop calls this)."""
        now = self.clock.mtime()
        for h, cmp in enumerate(self.cmp):
            level = now >= cmp
            if level != self.levels[h]:
                self.levels[h] = level
                self.stip(h, level)

    def _hart_of(self, offset: int) -> int | None:
        h, r = divmod(offset - MTIMECMP, STRIDE)
        return h if offset >= MTIMECMP and 0 <= h < len(self.cmp) else None

    def read(self, offset: int, size: int) -> int:
        if offset in (MTIME, MTIME + 4):
            self.need_size(offset, size, 4)
            if offset == MTIME:
                self._latched_mtime = self.clock.guest_read()
                return self._latched_mtime & 0xFFFF_FFFF
            # the high half of an 8-byte load pairs with the low half just read
            t = self._latched_mtime if self._latched_mtime is not None else self.clock.guest_read()
            self._latched_mtime = None
            return t >> 32
        h = self._hart_of(offset)
        if h is not None and offset % 4 == 0:
            self.need_size(offset, size, 4)
            high = (offset - MTIMECMP) % STRIDE
            return (self.cmp[h] >> (32 if high else 0)) & 0xFFFF_FFFF
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        h = self._hart_of(offset)
        if h is not None and offset % 4 == 0:
            self.need_size(offset, size, 4)
            value &= 0xFFFF_FFFF
            if (offset - MTIMECMP) % STRIDE == 0:
                self.cmp[h] = (self.cmp[h] & ~0xFFFF_FFFF) | value
            else:
                self.cmp[h] = (self.cmp[h] & 0xFFFF_FFFF) | (value << 32)
            self.tick()
            self.on_deadline()
            return
        if offset in (MTIME, MTIME + 4):
            raise self.error(offset, size, "mtime is read-only on this machine")
        super().write(offset, size, value)

    def describe(self) -> str:
        return "clint"
