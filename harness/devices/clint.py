"""CLINT-style timer at CLINT (kernel_c/memlayout.h; driver kernel_c/timer.c).

Two 64-bit registers, each accessed as two 32-bit halves (Unicorn splits 8-byte MMIO
accesses, low word first):

    CLINT_MTIME     read-only   current time (harness/clock.py), TIMEBASE_HZ
    CLINT_MTIMECMP  read/write  deadline: the supervisor timer interrupt (STIP) is
                                pending while mtime >= mtimecmp

This is not QEMU's CLINT: there is no M-mode, so the comparator drives STIP directly
(Unicorn cannot raise MTIP). Writing mtimecmp re-evaluates STIP at once, so a handler
that moves the deadline into the future sees STIP drop before its `sret`.
"""

from __future__ import annotations

from collections.abc import Callable

from harness import cheader
from harness.clock import NEVER, Clock
from harness.devices.base import Device, DeviceContext

_ML = cheader.load("memlayout.h")
MTIMECMP = _ML["CLINT_MTIMECMP"] - _ML["CLINT"]
MTIME = _ML["CLINT_MTIME"] - _ML["CLINT"]


class Clint(Device):
    """Timer comparator. `stip(level)` drives mip.STIP; `on_deadline(mtimecmp)` tells the
    run loop when the next interrupt is due."""

    size = 0x10000

    def __init__(self, name: str, ctx: DeviceContext, *, clock: Clock,
                 stip: Callable[[bool], None], on_deadline: Callable[[int], None]) -> None:
        super().__init__(name, ctx)
        self.clock = clock
        self.stip = stip
        self.on_deadline = on_deadline
        self.mtimecmp = NEVER
        self._level = False
        self._latched_mtime: int | None = None  # mtime sampled by a low-half read

    @property
    def level(self) -> bool:
        """Whether the comparator drives STIP now (as of the last tick or write)."""
        return self._level

    def tick(self) -> None:
        """Re-evaluate STIP against the current time (the run loop calls this)."""
        level = self.clock.mtime() >= self.mtimecmp
        if level != self._level:
            self._level = level
            self.stip(level)

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
        if offset in (MTIMECMP, MTIMECMP + 4):
            self.need_size(offset, size, 4)
            return (self.mtimecmp >> (32 if offset != MTIMECMP else 0)) & 0xFFFF_FFFF
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset in (MTIMECMP, MTIMECMP + 4):
            self.need_size(offset, size, 4)
            value &= 0xFFFF_FFFF
            if offset == MTIMECMP:
                self.mtimecmp = (self.mtimecmp & ~0xFFFF_FFFF) | value
            else:
                self.mtimecmp = (self.mtimecmp & 0xFFFF_FFFF) | (value << 32)
            self.tick()
            self.on_deadline(self.mtimecmp)
            return
        if offset in (MTIME, MTIME + 4):
            raise self.error(offset, size, "mtime is read-only on this machine")
        super().write(offset, size, value)

    def describe(self) -> str:
        return "clint"
