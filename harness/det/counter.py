"""The deterministic machine's instruction counter and switch points: harness/fastpath/sched.c.

One `Counter` per machine (a `struct sched` in C) and one C hook set per hart. The
counter is the machine's position in time: `total` instructions executed by all harts
(the number `when` shows and `goto` takes), `count(h)` per hart. It also owns the one
random generator of a seeded schedule (harness/det/schedule.py draws from it), so copying
`state()` and putting it back (`restore`) returns the schedule to that moment too.

Instructions are counted per translated block (see harness/fastpath/sched.h): a block's
count is added when the hart leaves it, so during a run (`begin` .. `end`) `total` and
`count` add the running block's instructions up to the PC, and `end` settles the block
the run stopped in. The C hooks must be each hart's first hooks (added before any other
and before any code is translated): a trap hook of ours counts up to the faulting
instruction before the trap hooks move the PC. A later code hook that stops the run
before an instruction leaves it counted, which `uncount()` gives back (as for an MMIO
stop, the instruction at the PC is counted: it may have done its access).

`setup` tells the counter the machine's layout once the kernel is loaded: where RAM is,
the kernel's code (its blocks are decoded once, for every hart), its sret instructions
(where the privilege may change) and the device windows (an MMIO callback then sees the
exact PC, so a device stamping a request reads the exact time).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from unicorn import Uc
from unicorn.unicorn_py3 import unicorn as _ucmod

from harness import fastpath
from harness.abi.vmlayout import TRAMPOLINE

RAN, LIMIT, POINT, SAMPLE = 0, 1, 2, 3  # struct sched.stopped
NEVER = 2**64 - 1
_API = ("reg_read", "reg_write", "hook_add", "hook_del", "emu_stop", "vmem_read",
        "vmem_translate", "ctl", "mem_protect")
SRET = (0x1020_0073).to_bytes(4, "little")
PAGE = 0x1000


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
        self.code = ffi.new("struct sched_code *")  # the layout `setup` fills in
        self._ram: Any = None  # keeps RAM's buffer exported while C points into it
        self._slots: Any = None  # the kernel text's block table (struct sched_code.slots)
        self._harts: list[Any] = []
        self._ucs: list[Uc] = []
        self._handles: list[Any] = []
        self._running: Any = None  # the struct sched_hart of the hart in a run
        self._running_id = -1
        self.on_watch: Callable[[int, int, int, bool], None] | None = None  # (hart, pa, n, w)

    # ---------------------------------------------------------------- harts
    def attach(self, uc: Uc, hart: int) -> None:
        """Count hart `hart`'s instructions (before any other hook of it is added)."""
        ffi = self._ffi
        h = ffi.new("struct sched_hart *")
        h.s, h.code, h.id = self.s, self.code, hart
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
        self._ucs.append(uc)
        self._handles.append(handle)
        uc._harness_sched = self  # type: ignore[attr-defined]  # C points into self.s

    def add_point(self, hart: int, addr: int) -> None:
        """A switch point at `addr` on hart `hart` (see harness/fastpath/sched.c)."""
        if self._lib.sched_add_point(self._harts[hart], addr):
            raise RuntimeError(f"cannot add a switch point at {addr:#x} (too many?)")

    def setup(self, ram: Any, image: Any, windows: list[tuple[int, int]]) -> None:
        """The machine's layout, once its kernel is loaded and its devices mapped: `ram`
        (harness/cpu/physmem.py), the kernel ELF `image` (harness/guest/elf.py) and the device
        windows as (physical base, size). Without it every block is read through the
        MMU, which is slower, not less exact."""
        c, lib = self.code, self._lib
        self._ram = ctypes.c_char.from_buffer(ram.view)
        c.ram = self._ffi.cast("uint8_t *", ctypes.addressof(self._ram))
        c.ram_base, c.ram_size = ram.base, ram.size
        fixed = [(s.vaddr, s.vaddr + s.memsz, s.paddr) for s in image.segments
                 if "X" in s.flags and ram.contains(s.paddr, s.memsz)]
        srets = [s.vaddr + off for s in image.segments if "X" in s.flags
                 for off in _find(s.data, SRET)]
        try:
            tramp = image.symbol("trampoline")
        except KeyError:
            tramp = None
        if tramp is not None and ram.contains(tramp, PAGE):
            # the trampoline page runs at TRAMPOLINE in every address space
            fixed.append((TRAMPOLINE, TRAMPOLINE + PAGE, tramp))
            srets += [TRAMPOLINE + a - tramp for a in srets if tramp <= a < tramp + PAGE]
        # the block cache keeps addresses' low 32 bits: ranges that meet there are left
        # to the MMU path (the largest, the kernel's text, first: on_block's fast case)
        fixed.sort(key=lambda r: r[0] - r[1])
        kept: list[tuple[int, int, int]] = []
        for lo, hi, pa in fixed:
            if all(hi - lo <= (klo - lo) % 2**32 and khi - klo <= (lo - klo) % 2**32
                   for klo, khi, _ in kept):
                kept.append((lo, hi, pa))
        if len(kept) > lib.SCHED_MAXFIXED or len(windows) > lib.SCHED_MAXWIN:
            raise ValueError(f"{len(kept)} code ranges and {len(windows)} device windows: "
                             f"at most {lib.SCHED_MAXFIXED} and {lib.SCHED_MAXWIN}")
        for i, (lo, hi, pa) in enumerate(kept):
            c.fixed_lo[i], c.fixed_hi[i], c.fixed_pa[i] = lo, hi, pa
            c.fixed_host[i] = c.ram + (pa - ram.base)
        c.nfixed = len(kept)
        if kept:
            self._slots = self._ffi.new("uint32_t[]", (kept[0][1] - kept[0][0] + 1) // 2)
            c.slots = self._slots
        for i, (base, size) in enumerate(windows):
            c.win_lo[i], c.win_hi[i] = base, base + size
        c.nwin = len(windows)
        for h in self._harts:
            lib.sched_layout(h)
            for a in sorted(set(srets)):
                if lib.sched_add_sret(h, a):
                    raise RuntimeError(f"cannot hook the sret at {a:#x} (too many?)")
            err = lib.sched_guard_mmio(h)
            if err:
                raise RuntimeError(f"cannot guard the device windows (uc_err {err})")

    def watch_accesses(self, on: bool) -> None:
        """Every hart's loads and stores go through the race watch (flush translations
        after this: hooks are compiled into translated code)."""
        for h in self._harts:
            if self._lib.sched_watch_accesses(h, int(on)):
                raise RuntimeError("uc_hook_add failed for the race watch")

    # ---------------------------------------------------------------- runs
    def begin(self, hart: int) -> None:
        """Hart `hart` is about to run (emu_start)."""
        h = self._harts[hart]
        self._lib.sched_begin(h)
        self._running, self._running_id = h, hart

    def end(self, hart: int) -> None:
        """Hart `hart`'s run ended: count the block it stopped in."""
        h = self._harts[hart]
        self._running, self._running_id = None, -1
        if self._lib.sched_end(h):
            raise RuntimeError(f"hart {hart}: the instruction counter lost its place (a "
                               "block it could not read, or a run end it could not set)")

    # ---------------------------------------------------------------- the count
    @property
    def total(self) -> int:
        h = self._running
        return int(self.s.total) if h is None else int(self._lib.sched_total_now(h))

    def count(self, hart: int) -> int:
        if hart == self._running_id:
            return int(self._lib.sched_count_now(self._running))
        return int(self.s.count[hart])

    def counts(self) -> list[int]:
        return [self.count(int(h.id)) for h in self._harts]

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

    def stats(self) -> dict[str, int]:
        """Kernel blocks decoded, runs ended inside a block (an exit set)."""
        c = self.code
        return {"decoded": int(c.misses), "exits": int(c.exits)}

    # ---------------------------------------------------------------- randomness (schedule.Rng)
    def below(self, n: int) -> int:
        return int(self._lib.sched_below(self.s, n))

    def set_point_permille(self, permille: int) -> None:
        self.s.point_permille = permille

    def set_change_at(self, points: int) -> None:
        self.s.change_at = points

    # ---------------------------------------------------------------- race sampling
    def sample(self, mean: int) -> None:
        """Stop before an S-mode memory access about every `mean` instructions (0: off).
        The sampling hook looks at every instruction: each hart keeps it from `attach`
        only if sampling is on when it first runs (harness/fastpath/sched.c)."""
        for h in self._harts:
            if self._lib.sched_sampling(h, int(mean > 0)):
                raise RuntimeError("uc_hook_add failed for the race sampling")
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


def _find(data: bytes, word: bytes) -> list[int]:
    """Offsets of `word` in `data` at instruction alignment (2 bytes: a stray match
    across two instructions costs one look at the privilege, nothing else)."""
    out, i = [], data.find(word)
    while i >= 0:
        if i % 2 == 0:
            out.append(i)
        i = data.find(word, i + 1)
    return out


def _watch(handle: Any, addr: int, size: int, write: int) -> int:
    counter, hart = fastpath.load()[0].from_handle(handle)  # type: ignore[index]
    if counter.on_watch is not None:
        counter.on_watch(hart, addr, size, bool(write))
    return 0


if fastpath.load() is not None:
    fastpath.load()[0].def_extern(name="fp_py_watch")(_watch)  # type: ignore[index]
