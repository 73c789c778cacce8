"""The machine's time base: `mtime` at TIMEBASE_HZ (kernel_c/memlayout.h).

Two clocks:

- HostClock (default, `--clock host`): mtime is host monotonic time since reset, so
  guest time is real time and a sleeping guest costs nothing.
- IcountClock (`--clock icount`): mtime follows the number of executed instructions
  (INSNS_PER_TICK instructions per tick, i.e. a 100-MIPS virtual CPU at 10 MHz), and
  time jumps forward to the next deadline while the guest waits in wfi. The instruction
  count is only known at slice boundaries, so every guest read of the time also adds one
  tick: time never stands still for a guest that polls it. Runs without host input are
  then reproducible instruction for instruction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from harness.abi import cheader

TIMEBASE_HZ = cheader.load("memlayout.h")["TIMEBASE_HZ"]
INSNS_PER_TICK = 10
NEVER = 2**64 - 1


class Clock(Protocol):
    hz: int

    def mtime(self) -> int:
        """Current mtime (for the machine's own decisions)."""
        ...

    def guest_read(self) -> int:
        """mtime as the guest reads it (rdtime, the MTIME register)."""
        ...

    def host_ns(self, mtime: int) -> int | None:
        """Host monotonic ns at which mtime reaches `mtime`, or None if host time does
        not drive this clock."""
        ...


class HostClock:
    """mtime = host monotonic time since reset."""

    hz = TIMEBASE_HZ

    def __init__(self) -> None:
        self.t0 = time.monotonic_ns()

    def mtime(self) -> int:
        return (time.monotonic_ns() - self.t0) * self.hz // 1_000_000_000

    def guest_read(self) -> int:
        return self.mtime()

    def host_ns(self, mtime: int) -> int | None:
        if mtime >= NEVER:
            return None
        return self.t0 + -(-mtime * 1_000_000_000 // self.hz)  # round up: never early


class IcountClock:
    """mtime = executed instructions / INSNS_PER_TICK (advanced by the run loop)."""

    hz = TIMEBASE_HZ

    def __init__(self) -> None:
        self.insns = 0
        self.reads = 0  # guest reads so far, one tick each

    def mtime(self) -> int:
        return self.insns // INSNS_PER_TICK + self.reads

    def guest_read(self) -> int:
        self.reads += 1
        return self.mtime()

    def host_ns(self, mtime: int) -> int | None:
        return None

    def advance_to(self, mtime: int) -> None:
        """Skip idle time (the guest waits in wfi) up to `mtime`."""
        self.insns = max(self.insns, (mtime - self.reads) * INSNS_PER_TICK)


class DetClock(IcountClock):
    """The deterministic machine's clock (harness/det/mode.py): IcountClock's mtime, with
    the instruction count read live from the C counter (exact in the middle of a run
    slice too, e.g. when a device stamps a request) plus the idle time skipped."""

    def __init__(self, executed: Callable[[], int]) -> None:  # noqa: D107
        self._executed = executed
        self.idle = 0   # instructions' worth of guest time skipped while every hart waited
        self.reads = 0

    @property  # type: ignore[override]
    def insns(self) -> int:
        return self._executed() + self.idle

    def advance_to(self, mtime: int) -> None:
        target = (mtime - self.reads) * INSNS_PER_TICK
        now = self.insns
        if target > now:
            self.idle += target - now

    def advance_insns(self, v: int) -> None:
        """Skip idle time up to guest time v (instructions)."""
        now = self.insns
        if v > now:
            self.idle += v - now
