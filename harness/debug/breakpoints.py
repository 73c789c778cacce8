"""Breakpoints and watchpoints as range-restricted Unicorn hooks.

A breakpoint is a UC_HOOK_CODE hook whose range is its one address, so Unicorn only
calls Python when that instruction is about to run: code elsewhere pays nothing (no
global per-instruction hook). A watchpoint is a UC_HOOK_MEM_WRITE hook over its bytes
(while one exists, Unicorn's stores take its slow path, in C). Hooks are compiled into
translated blocks, so every add or delete flushes the translation cache (reference
gotcha 11). A hook that decides to stop calls `Machine.pause()`: the guest stops before
that instruction (breakpoint) or right after the store (watchpoint, see target.py).
Unicorn calls memory hooks with the *physical* address once paging is on (code hooks
get the virtual PC), so a watchpoint hooks the physical bytes its virtual address maps
to when it is set: it watches that process's variable (a forked child's copy is another
page), and also catches the kernel writing it through its direct map (copyout).

User programs share addresses (all are linked at 0), so a user location also checks,
when its hook fires, that the hart is in U-mode and that the process on the CPU runs
that program; a kernel location checks for S-mode. Resuming from a breakpoint skips
the hooks of the instruction at the PC once (unless an interrupt will be taken first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from unicorn import UC_HOOK_CODE, UC_HOOK_MEM_WRITE, Uc

from harness.cpu.registers import PRIV_U
from harness.debug import DebugError
from harness.guest.memory import Phys
from harness.guest.procs import ProcTable
from harness.guest.programs import Location, Program
from harness.machine.board import Machine

MAX_WATCH = 4096


@dataclass(eq=False)
class Breakpoint:
    """break/tbreak (or an internal one for next/finish, never listed)."""

    number: int
    locations: list[Location]
    spec: str
    temporary: bool = False
    condition: str | None = None
    enabled: bool = True
    hits: int = 0
    internal: bool = False
    predicate: Callable[[], bool] | None = None  # internal: fire only when true
    handles: list[tuple[Uc, int]] = field(default_factory=list)  # (hart's Unicorn, hook)

    @property
    def kind(self) -> str:
        return "breakpoint"


@dataclass(eq=False)
class Watchpoint:
    """watch: stop after a store changes [addr, addr+size) (virtual; physical pa)."""

    number: int
    addr: int
    size: int
    spec: str
    program: Program | None  # the kernel, a user program, or None (any: GDB's Z2)
    pa: int = 0
    enabled: bool = True
    hits: int = 0
    handles: list[tuple[Uc, int]] = field(default_factory=list)  # (hart's Unicorn, hook)
    condition: str | None = None
    temporary: bool = False

    @property
    def kind(self) -> str:
        return "watchpoint"


@dataclass
class Hit:
    """Why the last pause happened."""

    point: Breakpoint | Watchpoint
    pc: int
    old: bytes = b""        # watch: the watched bytes before the store
    new: bytes = b""        # watch: after it
    store_addr: int = 0     # watch: the store's physical address and width
    store_size: int = 0
    store_old: bytes = b""  # watch: memory the store overwrote (an AMO's result)
    error: str = ""         # a condition could not be evaluated
    hart: int = 0           # the hart that hit it


class BreakpointTable:
    """All breakpoints and watchpoints of one machine, and their hooks (`procs`: the
    kernel's process table, which says what program runs; None without debug info)."""

    def __init__(self, machine: Machine, phys: Phys, procs: ProcTable | None) -> None:
        self.m, self.phys, self.procs = machine, phys, procs
        self.ucs: list[Uc] = [c.uc for c in machine.cpus]  # a point fires on any hart
        self.points: dict[int, Breakpoint | Watchpoint] = {}
        self.internal: list[Breakpoint] = []  # next/finish/until helpers
        self._next = 1
        self.hit: Hit | None = None
        self._skip: dict[int, list[int]] = {}  # hart -> [pc, hooks there to let pass]
        self.condition_eval: Callable[[str], bool] | None = None  # set by the interpreter
        self.suspended = False  # time travel is going somewhere: no point stops it

    # ---------------------------------------------------------------- table
    def _number(self, internal: bool) -> int:
        if internal:
            return -1
        n = self._next
        self._next += 1
        return n

    def add(self, locations: list[Location], spec: str, *, temporary: bool = False,
            condition: str | None = None, internal: bool = False,
            predicate: Callable[[], bool] | None = None) -> Breakpoint:
        bp = Breakpoint(self._number(internal), locations, spec, temporary, condition,
                        internal=internal, predicate=predicate)
        for uc in self.ucs:
            for loc in locations:
                bp.handles.append((uc, uc.hook_add(UC_HOOK_CODE, self._on_code, (bp, loc),
                                                   loc.addr, loc.addr)))
            uc.ctl_flush_tb()
        if internal:
            self.internal.append(bp)
        else:
            self.points[bp.number] = bp
        return bp

    def add_watch(self, addr: int, size: int, spec: str, program: Program | None,
                  pa: int, condition: str | None = None) -> Watchpoint:
        """Watch [addr, addr+size), which the caller translated to physical pa."""
        if not 0 < size <= MAX_WATCH:
            raise DebugError(f"a watchpoint covers 1..{MAX_WATCH} bytes, not {size}")
        if (pa & 0xFFF) + size > 0x1000:
            raise DebugError("a watchpoint cannot cross a page boundary (watch each part)")
        wp = Watchpoint(self._number(False), addr, size, spec, program, pa=pa,
                        condition=condition)
        # Unicorn matches a hook on the access's first byte: widen by 7 bytes below so
        # an 8-byte store that starts before the watched range still calls us
        for uc in self.ucs:
            wp.handles.append((uc, uc.hook_add(UC_HOOK_MEM_WRITE, self._on_write, wp,
                                               max(pa - 7, 0), pa + size - 1)))
            uc.ctl_flush_tb()
        self.points[wp.number] = wp
        return wp

    def remove(self, point: Breakpoint | Watchpoint) -> None:
        for uc, h in point.handles:
            uc.hook_del(h)
        point.handles.clear()
        for uc in self.ucs:
            uc.ctl_flush_tb()
        if point in self.internal:
            self.internal.remove(point)  # type: ignore[arg-type]
        else:
            self.points.pop(point.number, None)

    def get(self, number: int) -> Breakpoint | Watchpoint:
        p = self.points.get(number)
        if p is None:
            raise DebugError(f"No breakpoint number {number}.")
        return p

    def listed(self) -> list[Breakpoint | Watchpoint]:
        return [self.points[n] for n in sorted(self.points)]

    def at(self, pc: int) -> int:
        """How many enabled breakpoint hooks sit on pc."""
        n = 0
        for p in self._all_code():
            if p.enabled:
                n += sum(1 for loc in p.locations if loc.addr == pc)
        return n

    def _all_code(self) -> list[Breakpoint]:
        return [p for p in [*self.internal, *self.points.values()] if isinstance(p, Breakpoint)]

    # ---------------------------------------------------------------- resuming
    def arm_skip(self, pc: int, hart: int = 0) -> None:
        """Hart `hart`'s next run starts with the instruction at pc: let its hooks pass
        once there."""
        self._skip[hart] = [pc, self.at(pc)]

    def disarm(self) -> None:
        self._skip.clear()

    def take_hit(self) -> Hit | None:
        hit, self.hit = self.hit, None
        return hit

    # ---------------------------------------------------------------- hooks
    def _matches(self, program: Program | None) -> bool:
        """Is the hart running `program` (kernel: S-mode; user: U-mode in a process of
        that program; None: anything)?"""
        if program is None:
            return True
        user = self.m.hart.priv == PRIV_U
        if not program.user:
            return not user
        return user and self.procs is not None and self.procs.current_name() == program.name

    def _on_code(self, uc: Uc, addr: int, size: int, data: tuple[Breakpoint, Location]) -> None:
        if self.suspended:
            return
        skip = self._skip.get(self.m.cur)
        if skip is not None and skip[1] and addr == skip[0]:
            skip[1] -= 1
            return
        bp, loc = data
        if not bp.enabled or self.hit is not None or not self._matches(loc.program):
            return
        if bp.predicate is not None and not bp.predicate():
            return
        error = ""
        if bp.condition and self.condition_eval is not None:
            try:
                if not self.condition_eval(bp.condition):
                    return
            except DebugError as e:
                error = f"Error in testing condition for breakpoint {bp.number}: {e}"
        bp.hits += 1
        self.hit = Hit(bp, addr, error=error, hart=self.m.cur)
        self.m.pause(f"breakpoint {bp.number}")

    def _on_write(self, uc: Uc, access: int, addr: int, size: int, value: int,
                  wp: Watchpoint) -> None:
        if (self.suspended or not wp.enabled or self.hit is not None or addr + size <= wp.pa
                or addr >= wp.pa + wp.size):
            return  # (any mode: the physical bytes belong to the watched variable)
        hart = self.m.hart
        phys = self.phys
        old = phys.read(wp.pa, wp.size)
        store_old = phys.read(addr, size)
        if old is None or store_old is None:
            return
        new = bytearray(old)
        data = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        for i, b in enumerate(data):
            if 0 <= addr + i - wp.pa < wp.size:
                new[addr + i - wp.pa] = b
        if bytes(new) == old:
            return  # a store of the same value: gdb's watch does not stop either
        if wp.condition and self.condition_eval is not None:
            try:
                if not self.condition_eval(wp.condition):
                    return
            except DebugError:
                pass
        wp.hits += 1
        self.hit = Hit(wp, hart.pc, old, bytes(new), addr, size, store_old, hart=self.m.cur)
        self.m.pause(f"watchpoint {wp.number}", before=False)
