"""The deterministic machine's instruction counter and switch points: harness/fastpath/sched.c.

One `Counter` per machine (a `struct sched` in C) and one C hook set per hart. The
counter is the machine's position in time: `total` instructions executed by all harts
(the number `when` shows and `goto` takes), `count(h)` per hart. It also owns the one
random generator of a seeded schedule (harness/det/schedule.py draws from it), so copying
`state()` and putting it back (`restore`) returns the schedule to that moment too.

The C hooks must be the first code hooks of each hart (added before any other and before
any code is translated): they run first at every instruction, so a later hook that stops
the run before an instruction (a breakpoint, a spin yield) leaves it counted once too
often, which `uncount()` gives back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from unicorn import Uc
from unicorn.unicorn_py3 import unicorn as _ucmod

from harness import fastpath

RAN, LIMIT, POINT, SAMPLE = 0, 1, 2, 3  # struct sched.stopped
NEVER = 2**64 - 1
_API = ("reg_read", "hook_add", "hook_del", "emu_stop", "vmem_read")


def _lib() -> tuple[Any, Any]:
    got = fastpath.load()
    if got is None:
        raise ValueError(f"a deterministic schedule needs the C fast path: {fastpath.ERROR}")
    return got


class Counter:
    """The instruction counter of one machine's harts (see the module docstring)."""

    def __init__(self, seed: int = 0) -> None:
        ffi, lib = self._ffi, self._lib = _lib()
        self.s = ffi.new("struct sched *")
        self.s.limit = NEVER
        for h in range(lib.SCHED_MAXCPU):
            self.s.hart_limit[h] = NEVER
        lib.sched_seed(self.s, seed)
        self._harts: list[Any] = []
        self._handles: list[Any] = []
        self.on_watch: Callable[[int, int, int, bool], None] | None = None  # (hart, pa, n, w)

    # ---------------------------------------------------------------- harts
    def attach(self, uc: Uc, hart: int) -> None:
        """Count hart `hart`'s instructions (before any other hook of it is added)."""
        ffi = self._ffi
        h = ffi.new("struct sched_hart *")
        h.s, h.id = self.s, hart
        h.uc = ffi.cast("void *", uc._uch.value)
        handle = ffi.new_handle((self, hart))
        h.handle = handle
        for name in _API:
            fn = getattr(_ucmod.uclib, f"uc_{name}")
            setattr(h, name, ffi.cast("void *", ctypes.cast(fn, ctypes.c_void_p).value))
        err = self._lib.sched_attach(h)
        if err:
            raise RuntimeError(f"uc_hook_add failed for the instruction counter (uc_err {err})")
        self._harts.append(h)
        self._handles.append(handle)
        uc._harness_sched = self  # type: ignore[attr-defined]  # C points into self.s

    def add_point(self, hart: int, addr: int) -> None:
        """A switch point at `addr` on hart `hart` (see harness/fastpath/sched.c)."""
        if self._lib.sched_add_point(self._harts[hart], addr):
            raise RuntimeError(f"cannot add a switch point at {addr:#x} (too many?)")

    def watch_accesses(self, on: bool) -> None:
        """Every hart's loads and stores go through the race watch (flush translations
        after this: hooks are compiled into translated code)."""
        for h in self._harts:
            if self._lib.sched_watch_accesses(h, int(on)):
                raise RuntimeError("uc_hook_add failed for the race watch")

    # ---------------------------------------------------------------- the count
    @property
    def total(self) -> int:
        return int(self.s.total)

    def count(self, hart: int) -> int:
        return int(self.s.count[hart])

    def counts(self) -> list[int]:
        return [int(self.s.count[h.id]) for h in self._harts]

    def limit(self, n: int) -> None:
        """End the current or next run before instruction number total+n+1 (total+n
        instructions executed in all)."""
        self.s.limit = min(self.total + n, NEVER)
        self.s.stopped = RAN

    def unlimit(self) -> None:
        self.s.limit = NEVER

    def limit_hart(self, hart: int, count: int | None) -> None:
        """Stop before hart `hart`'s next instruction once it has executed `count` in all
        (None: no such limit)."""
        self.s.hart_limit[hart] = NEVER if count is None else count

    @property
    def stopped(self) -> int:
        return int(self.s.stopped)

    def uncount(self, hart: int) -> None:
        """A later hook stopped the run before the instruction the counter just counted."""
        self.s.total -= 1
        self.s.count[hart] -= 1

    @property
    def points(self) -> int:
        return int(self.s.points)

    @property
    def switches(self) -> int:
        return int(self.s.switches)

    # ---------------------------------------------------------------- randomness (schedule.Rng)
    def below(self, n: int) -> int:
        return int(self._lib.sched_below(self.s, n))

    def set_point_permille(self, permille: int) -> None:
        self.s.point_permille = permille

    def set_change_at(self, points: int) -> None:
        self.s.change_at = points

    # ---------------------------------------------------------------- race sampling
    def sample(self, mean: int) -> None:
        """Stop before an S-mode memory access about every `mean` instructions (0: off)."""
        self.s.sample_mean = mean
        self.s.sample_at = self.total + (self.below(2 * mean) + 1 if mean else 0)

    def skip(self, ranges: list[tuple[int, int]]) -> None:
        """Code the sampling passes over: [lo, hi) ranges (merged; at most SCHED_MAXSKIP)."""
        merged: list[list[int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        cap = int(self._lib.SCHED_MAXSKIP)
        if len(merged) > cap:
            raise ValueError(f"{len(merged)} code ranges to skip: at most {cap}")
        for i, (lo, hi) in enumerate(merged):
            self.s.skip_lo[i], self.s.skip_hi[i] = lo, hi
        self.s.nskip = len(merged)

    def set_watch(self, lo: int, hi: int, hart: int) -> None:
        """Report other harts' accesses to physical [lo, hi) (hi = 0: none)."""
        w = self.s.watch
        w.lo, w.hi, w.hart, w.hits = lo, hi, hart, 0

    # ---------------------------------------------------------------- snapshots
    def state(self) -> bytes:
        return bytes(self._ffi.buffer(self.s))

    def restore(self, state: bytes) -> None:
        self._ffi.buffer(self.s)[:] = state


def _watch(handle: Any, addr: int, size: int, write: int) -> int:
    counter, hart = fastpath.load()[0].from_handle(handle)  # type: ignore[index]
    if counter.on_watch is not None:
        counter.on_watch(hart, addr, size, bool(write))
    return 0


if fastpath.load() is not None:
    fastpath.load()[0].def_extern(name="fp_py_watch")(_watch)  # type: ignore[index]
