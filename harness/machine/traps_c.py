"""Synchronous traps at emulator speed: the C hooks of harness/fastpath/traps.c.

`CTraps` is a `Traps` (harness/machine/traps.py, the specification and the Python path) whose
Unicorn hooks are C functions: an ecall, a page fault, an illegal instruction (with
`csrr time` emulated) and an ebreak are delivered without entering Python. What C does not
decide it hands back, unchanged, to the Python path through two cffi callbacks
(`fp_py_intr`, `fp_py_invalid`): an ecall from S, an unset stvec, an exception the machine
does not model (all MachineFaults) and rdtime under `--clock icount` (Python's clock counts
the read). The counters are the same ones: `counts` (a `TrapCounts` over the C table the
machine's harts share), `rdtime`, `ebreak_delivered`.

Choosing the path: `MachineConfig.traps`, else the environment variable HARNESS_TRAPS
(`c`, the default, or `python`). `python_path()` sends one hart's traps to Python while a
tool needs to see each of them; the C hooks stay registered and pass every event on.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from unicorn import Uc
from unicorn import riscv_const as R
from unicorn.unicorn_py3 import unicorn as _ucmod

from harness import fastpath
from harness.cpu.clock import Clock, HostClock
from harness.cpu.registers import Hart
from harness.machine.traps import Traps

ENV = "HARNESS_TRAPS"
PATHS = ("c", "python")
_API = ("reg_read", "reg_write", "reg_write2", "reg_write_batch", "vmem_read", "hook_add",
        "hook_del", "ctl", "emu_stop")
_warned = False


def trap_path(requested: str = "") -> str:
    """"c" or "python": the request, else $HARNESS_TRAPS, else C when it is built. A C
    path asked for by name but not built is an error; by default it is a warning."""
    global _warned
    want = (requested or os.environ.get(ENV, "")).strip().lower()
    if want and want not in PATHS:
        raise ValueError(f"unknown trap path '{want}' ({ENV} / --traps: c or python)")
    if want == "python":
        return "python"
    if fastpath.load() is None:
        if want == "c":
            raise ValueError(fastpath.ERROR)
        if not _warned:
            _warned = True
            print(f"harness: {fastpath.ERROR}; traps take the Python path", file=sys.stderr)
        return "python"
    return "c"


class TrapCounts(MutableMapping[int, int]):
    """Delivered traps by scause in the C table (one per machine, shared by its harts):
    what `Traps.counts` is on the C path; both paths count into it."""

    def __init__(self) -> None:
        ffi, lib = _c_lib()
        self.n = lib.FP_NCAUSE
        self.array = ffi.new("uint64_t[]", self.n)

    def __getitem__(self, cause: int) -> int:
        return int(self.array[cause]) if 0 <= cause < self.n else 0

    def __setitem__(self, cause: int, value: int) -> None:
        self.array[cause] = value

    def __delitem__(self, cause: int) -> None:
        self.array[cause] = 0

    def __iter__(self) -> Iterator[int]:
        return (c for c in range(self.n) if self.array[c])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"TrapCounts({dict(self)})"


def _c_lib() -> tuple[Any, Any]:
    got = fastpath.load()
    if got is None:
        raise ValueError(fastpath.ERROR)
    ffi, lib = got
    for name in ("X0", "SSTATUS", "STVEC", "SCOUNTEREN", "MIP", "SEPC", "SCAUSE", "STVAL",
                 "PC", "PRIV"):
        if getattr(lib, f"REG_{name}") != getattr(R, f"UC_RISCV_REG_{name}"):
            raise ValueError(f"harness/fastpath/unicorn_api.h: REG_{name} is not this "
                             "Unicorn's register number (another Unicorn version?)")
    return ffi, lib


class CTraps(Traps):
    """Traps delivered by the C hooks; the Python path for whatever C hands over."""

    def __init__(self, uc: Uc, hart: Hart, clock: Clock, counts: TrapCounts) -> None:
        ffi, lib = _c_lib()
        self._ffi, self._lib = ffi, lib
        c = self._c = ffi.new("struct fp_hart *")
        self._self_handle = ffi.new_handle(self)  # kept: C holds only the pointer
        c.uc = ffi.cast("void *", uc._uch.value)
        c.handle = self._self_handle
        c.counts = counts.array
        for name in _API:
            fn = getattr(_ucmod.uclib, f"uc_{name}")
            setattr(c, name, ffi.cast("void *", ctypes.cast(fn, ctypes.c_void_p).value))
        if isinstance(clock, HostClock):
            c.host_clock, c.t0_ns, c.hz = 1, clock.t0, clock.hz
        self.uc = uc
        # the hooks point into self._c: it must live as long as the engine does
        uc._harness_traps = self  # type: ignore[attr-defined]
        super().__init__(uc, hart, clock.guest_read, counts)

    def _attach(self, uc: Uc) -> None:
        err = self._lib.fp_attach(self._c)
        if err:
            raise RuntimeError(f"uc_hook_add failed for the C trap hooks (uc_err {err})")

    def watch(self, on: bool) -> None:
        """While on, every trap takes the Python path, which calls `after_trap`."""
        self._c.watch = int(on)

    def hurry(self, at_ns: int) -> None:
        """C ends the run at a trap from U-mode at or after host monotonic `at_ns` (0: off)."""
        self._c.hurry_ns, self._c.hurried = at_ns, 0

    def hurried(self) -> bool:
        return bool(self._c.hurried)

    @contextmanager
    def python_path(self) -> Iterator[None]:
        """Every trap of this hart takes the Python path inside the block (nestable)."""
        self._c.python += 1
        try:
            yield
        finally:
            self._c.python -= 1

    # the counters live in C; the Python path's `self.rdtime += 1` lands here too
    @property
    def rdtime(self) -> int:  # type: ignore[override]
        return int(self._c.rdtime)

    @rdtime.setter
    def rdtime(self, value: int) -> None:
        self._c.rdtime = value

    @property
    def ebreak_delivered(self) -> bool:  # type: ignore[override]
        return bool(self._c.ebreak_delivered)

    @ebreak_delivered.setter
    def ebreak_delivered(self, value: bool) -> None:
        self._c.ebreak_delivered = int(value)

    @property
    def python_traps(self) -> int:
        """Traps C handed to the Python path (fallbacks, and all of them in python_path)."""
        return int(self._c.python_traps)


def make_traps(path: str, uc: Uc, hart: Hart, clock: Clock,
               counts: MutableMapping[int, int]) -> Traps:
    """One hart's trap delivery on the chosen path (`trap_path`), counting into `counts`
    (`new_counts(path)`, one per machine)."""
    if path == "c":
        assert isinstance(counts, TrapCounts)
        return CTraps(uc, hart, clock, counts)
    return Traps(uc, hart, clock.guest_read, counts)


def new_counts(path: str) -> MutableMapping[int, int]:
    """The machine's table of delivered traps by scause for the chosen path."""
    if path == "c":
        return TrapCounts()
    from collections import Counter

    return Counter()


def _intr(uc: Any, intno: int, handle: Any) -> None:
    t: CTraps = fastpath.load()[0].from_handle(handle)  # type: ignore[index]
    try:
        t._on_intr(t.uc, intno, None)
    except BaseException as e:  # what the binding's hook wrapper does (uccallback)
        if t.uc._hook_exception is None:
            t.uc._hook_exception = e
        t.uc.emu_stop()


def _invalid(uc: Any, handle: Any) -> int:
    t: CTraps = fastpath.load()[0].from_handle(handle)  # type: ignore[index]
    try:
        return int(t._on_invalid(t.uc, None))
    except BaseException as e:
        if t.uc._hook_exception is None:
            t.uc._hook_exception = e
        t.uc.emu_stop()
        return 0


if fastpath.load() is not None:
    _ffi = fastpath.load()[0]  # type: ignore[index]
    _ffi.def_extern(name="fp_py_intr")(_intr)
    _ffi.def_extern(name="fp_py_invalid")(_invalid)
