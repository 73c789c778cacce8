"""Data races in the manner of Linux's KCSAN: soft watchpoints on sampled accesses.

The C counter stops a hart before an S-mode instruction about every `sample_mean`
instructions (harness/fastpath/sched.c). If that instruction is a load, store or AMO of
the kernel's RAM, its bytes are watched and the hart is held (the schedule does not pick
it) while the others run up to `hold` instructions; then it goes on and makes its
access. Another hart's access to the watched bytes in that window is a race when

- at least one of the two is a write,
- not both are atomic (AMO, LR, SC),
- the two harts hold no spinlock in common (from the lock checks, lockdep.py: the held
  hart's locks when it was stopped, the other's when it made its access),
- neither site is marked as an intended race (kernel_c/racy.h, intended.py).

Not watched: accesses whose virtual address is not the physical one (a process's
kernel stack, mapped high: it belongs to one process), the lock primitives themselves
(their plain accesses to the lock word are the synchronisation, ordered by the AMOs and
fences around them), MMIO. Holding a hart changes the interleaving, so a data-race run
is replayed with the detector on again (`--race`): the sampling points and holds come
from the schedule's own random generator, and the run is as repeatable as any other.

The other hart's side is taken inside the C memory hook, while that hart is in the
middle of its instruction: only general registers and memory are read there (no CSR,
no privilege switch); its frames are walked through the frame pointer by hand.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from unicorn import UC_PROT_READ, UC_PROT_WRITE

from harness.abi.vmlayout import TRAMPOLINE
from harness.guest.datanames import DataNames
from harness.guest.programs import PGSIZE
from harness.machine.bus import mmio_form
from harness.machine.traps import mem_operand
from harness.race import intended
from harness.race.lockdep import Finding, LockDep

SAMPLE_MEAN = 1_000   # instructions between two samples, on average
HOLD = 4_000          # instructions of the other harts a watched hart waits
AMO_OPCODE = 0x2F
LR_FUNCT5 = 0b00010
PRIMITIVES = ("acquire", "release", "holding", "trylock", "push_off", "pop_off", "initlock")
MAX_FRAMES = 12
NEXT_TRIES = 32       # a sample on a non-access moves to the next instruction, so often
ALONE = 8             # a sample with every other hart idle: the next one this much later
SPINS = 8             # spin yields of the other harts that end a hold early: they wait
#                       for a lock the held hart has, and would only spin on
RA, SP, S0 = 1, 2, 8


@dataclass
class Access:
    """One memory access of a hart: the instruction, where, how wide, what kind."""

    pc: int
    va: int
    pa: int
    size: int
    write: bool
    atomic: bool

    def what(self, symbol: str) -> str:
        kind = ("atomic " if self.atomic else "") + ("write" if self.write else "read")
        return f"{kind} of {self.size} bytes {'to' if self.write else 'from'} " \
               f"{self.pa:#x} ({symbol})"


def decode(hart: Any, pc: int) -> Access | None:
    """The data access the instruction at pc is about to make (registers as they are
    now), or None for anything other than a direct-mapped load, store or AMO."""
    got = hart.fetch(pc)
    if got is None:
        return None
    op = mem_operand(*got)
    if op is None:
        return None
    rs1, disp, size = op
    insn, length = got
    atomic = length == 4 and insn & 0x7F == AMO_OPCODE
    if atomic:
        write = insn >> 27 != LR_FUNCT5
    else:
        form = mmio_form(insn, length)
        write = bool(form[0]) if form is not None else _fp_store(insn, length)
    va = (hart.x(rs1) + disp) & 0xFFFF_FFFF_FFFF_FFFF
    pa = hart.translate(va, UC_PROT_WRITE if write else UC_PROT_READ)
    if pa is None or pa != va:
        return None
    return Access(pc, va, pa, size, write, atomic)


def _fp_store(insn: int, length: int) -> bool:
    if length == 4:
        return insn & 0x7F == 0x27
    return insn & 3 in (0, 2) and (insn >> 13) & 7 >= 5


def conflicts(a: Access, b: Access, a_locks: set[int], b_locks: set[int]) -> bool:
    """Do the two accesses race (the first three rules of the module docstring)?"""
    if not (a.write or b.write):
        return False
    if a.atomic and b.atomic:
        return False
    return not (a_locks & b_locks)


@dataclass
class Watching:
    """The access a held hart is about to make, what it held, and until when."""

    hart: int
    acc: Access
    locks: set[int]
    classes: list[str]
    chain: tuple[int, ...]
    until: int
    spins: int = 0


@dataclass
class WatchStats:
    samples: int = 0          # samples the counter took
    watched: int = 0          # ... that were kernel RAM accesses and got a watchpoint
    hits: int = 0             # other harts' accesses to watched bytes


@dataclass
class KcsanState:
    watching: Watching | None
    seen: set[tuple]
    findings: list[Finding]
    stats: WatchStats = field(default_factory=WatchStats)


class DataRaceWatch:
    """The data-race watch of machine `m` (deterministic), on top of its lock checks
    `lockdep` (which locks each hart holds). Reports go to `lockdep.findings`' list of
    its own, `self.findings`; `on_report(finding)` is called with each new one (the
    debugger's stop)."""

    def __init__(self, m: Any, kernel: Any, lockdep: LockDep,
                 sample_mean: int = SAMPLE_MEAN, hold: int = HOLD,
                 focus: tuple[str, ...] = ()) -> None:
        if m.det is None:
            raise ValueError("the data-race watch needs a deterministic machine (a schedule)")
        self.m, self.kernel, self.lockdep = m, kernel, lockdep
        self.counter = m.det.counter
        self.sample_mean, self.hold = sample_mean, hold
        self.symbols = DataNames(kernel.elf, kernel.dwarf)
        self.intended = intended.load(kernel.path, kernel.elf, kernel.dwarf)
        self.watching: Watching | None = None
        self.seen: set[tuple] = set()
        self.findings: list[Finding] = []
        self.stats = WatchStats()
        self.on_report: Any = None
        self._skip = [(s.addr, s.addr + s.size) for s in kernel.elf.symbols
                      if s.name in PRIMITIVES]
        self._line_ok: dict[int, bool] = {}
        self._tries = 0           # samples in a row that found no access to watch
        m.race_watch = self
        m.det_observers.append(self)
        if len(m.cpus) > 1:
            self.counter.skip(self._skip + self._intended_code() + self._unfocused(focus)
                              + [(TRAMPOLINE, TRAMPOLINE + PGSIZE)])
            self.counter.on_watch = self._on_watch
            self.counter.watch_accesses(True)
            self.counter.sample(sample_mean)
            for c in m.cpus:
                c.uc.ctl_flush_tb()  # memory hooks are compiled into translated code

    def _intended_code(self) -> list[tuple[int, int]]:
        """The code of the source lines marked DATA_RACE_NEXT_LINE."""
        rows = self.kernel.lines.rows
        out = []
        for r, nxt in zip(rows, rows[1:], strict=False):
            if (os.path.basename(r.file), r.line) in self.intended.lines and nxt.addr > r.addr:
                out.append((r.addr, nxt.addr))
        return out

    def _unfocused(self, focus: tuple[str, ...]) -> list[tuple[int, int]]:
        """With `focus` (source file names: `ai_service.c`): all code outside those files,
        so every sample lands in them (a student's own change gets the watch's whole
        attention). Each access of the focused code still races with any other code."""
        if not focus:
            return []
        rows = self.kernel.lines.rows
        inside: list[tuple[int, int]] = []
        for r, nxt in zip(rows, rows[1:], strict=False):
            if os.path.basename(r.file) in focus and nxt.addr > r.addr:
                if inside and inside[-1][1] == r.addr:
                    inside[-1] = (inside[-1][0], nxt.addr)
                else:
                    inside.append((r.addr, nxt.addr))
        if not inside:
            raise ValueError(f"--focus {','.join(focus)}: no kernel code from those files "
                             "(give source file names such as ai_service.c)")
        out, at = [], 0
        for lo, hi in sorted(inside):
            if lo > at:
                out.append((at, lo))
            at = max(at, hi)
        return [*out, (at, 2**64 - 1)]

    def close(self) -> None:
        self.counter.skip([])
        self.counter.sample(0)
        self.counter.set_watch(0, 0, 0)
        self.counter.on_watch = None
        self.m.race_watch = None
        if self in self.m.det_observers:
            self.m.det_observers.remove(self)

    # ---------------------------------------------------------------- the machine's calls
    def on_sample(self, c: Any) -> bool:
        """Hart c stopped before an S-mode instruction for a sample: watch its access
        and hold it (True), or let it go on (False)."""
        self.stats.samples += 1
        if self.watching is not None:
            return False
        if not any(o.can_run() for o in self.m.cpus if o is not c):
            # nobody to race with now (the others wait in wfi): look again much later
            self.counter.s.sample_at = self.counter.total + ALONE * self.sample_mean
            return False
        pc = c.hart.pc
        acc = None if self._excluded(pc) else decode(c.hart, pc)
        if (acc is None or not self.m.ram.contains(acc.pa, acc.size)
                or self.intended.var(acc.pa, acc.size)):
            # KCSAN samples accesses, not instructions: try this hart's next one
            self._tries += 1
            if self._tries < NEXT_TRIES:
                self.counter.s.sample_at = self.counter.total + 1
            else:
                self._tries = 0
            return False
        self._tries = 0
        held = self.lockdep.held[c.id]
        self.watching = Watching(c.id, acc, {x.lock for x in held}, [x.cls for x in held],
                                 walk(c.hart, pc, self.kernel.elf), self.counter.total + self.hold)
        self.counter.set_watch(acc.pa, acc.pa + acc.size, c.id)
        self.stats.watched += 1
        return True

    def runnable(self, harts: list[int]) -> list[int]:
        """The harts the schedule may pick: not the held one, until its hold is over or
        nobody else can run."""
        w = self.watching
        if w is None or w.hart not in harts:
            return harts
        others = [h for h in harts if h != w.hart]
        if others and self.counter.total < w.until and w.spins < SPINS:
            return others
        self._end_watch()
        return harts

    def yielded(self) -> None:
        """Another hart's slice ended spinning on a lock (while a hart is held)."""
        if self.watching is not None:
            self.watching.spins += 1

    def _end_watch(self) -> None:
        self.watching = None
        self.counter.set_watch(0, 0, 0)

    def _excluded(self, pc: int) -> bool:
        """A lock primitive's or an intended-race line's instruction?"""
        if any(lo <= pc < hi for lo, hi in self._skip):
            return True
        ok = self._line_ok.get(pc)
        if ok is None:
            ok = self._line_ok[pc] = self.intended.line(self.kernel.where(pc)) is not None
        return ok

    # ---------------------------------------------------------------- a hit
    def _on_watch(self, hart: int, pa: int, size: int, write: bool) -> None:
        """Another hart's access to the watched bytes (from the C memory hook, while
        that hart runs: its pc is the accessing instruction)."""
        w = self.watching
        if w is None:
            return
        self.stats.hits += 1
        h = self.m.cpus[hart].hart
        pc = h.pc
        insn = h.fetch(pc)
        atomic = insn is not None and insn[1] == 4 and insn[0] & 0x7F == AMO_OPCODE
        other = Access(pc, pa, pa, size, write, atomic)
        mine = self.lockdep.held[hart]
        if not conflicts(w.acc, other, w.locks, {x.lock for x in mine}):
            return
        if self._excluded(pc):
            return
        self._end_watch()
        first, second = self._site(w.acc.pc), self._site(pc)
        key = ("data race", *sorted((first, second)))
        if key in self.seen:
            return
        self.seen.add(key)
        sym = self.symbols.name(w.acc.pa)
        p = self.lockdep.proc

        def who(x: int) -> str:
            name = p(x)
            return f"hart {x}" + (f", {name}" if name else "")

        def locks(cls: list[str]) -> str:
            return ", ".join(f'"{c}"' for c in cls) if cls else "no lock"

        f = Finding(
            "data race", f"{sym}: {first} / {second}",
            [(f"{w.acc.what(sym)} by {who(w.hart)} holding {locks(w.classes)} "
              "(held before it)", w.chain, w.hart),
             (f"{other.what(self.symbols.name(pa))} by {who(hart)} holding "
              f"{locks([x.cls for x in mine])}", walk(h, pc, self.kernel.elf), hart)],
            key=key, exact_top=True)
        self.findings.append(f)
        if self.on_report is not None:
            self.on_report(f)

    def _site(self, pc: int) -> str:
        """"kfree kalloc.c:52" of an instruction."""
        hit = self.kernel.function(pc)
        name = hit[0].name if hit else f"{pc:#x}"
        return f"{name} {self.kernel.where(pc)}".strip()

    # ---------------------------------------------------------------- snapshots
    def state(self) -> KcsanState:
        return KcsanState(copy.deepcopy(self.watching), set(self.seen), list(self.findings),
                          copy.copy(self.stats))

    def restore(self, st: KcsanState) -> None:
        self.watching = copy.deepcopy(st.watching)
        self.seen, self.findings = set(st.seen), list(st.findings)
        self.stats = copy.copy(st.stats)


def walk(hart: Any, pc: int, elf: Any) -> tuple[int, ...]:
    """pc, then the return addresses of the frame-pointer chain (general registers and
    memory reads only: safe inside a memory hook). A leaf saves s0 but not ra: its fp-8
    then holds the caller's frame pointer, not code, and ra is the return address."""
    out = [pc]
    fp, ra0 = hart.x(S0), hart.x(RA)
    for _ in range(MAX_FRAMES - 1):
        if not fp or fp & 7:
            break
        ra, prev = hart.read_u64(fp - 8), hart.read_u64(fp - 16)
        if ra is None or prev is None:
            break
        if not elf.contains_code(ra) and ra0:  # a leaf's frame: {fp-8 = caller's fp}
            ra, prev = ra0, ra
        ra0 = 0
        if not elf.contains_code(ra):
            break
        out.append(ra)
        if prev <= fp:
            break
        fp = prev
    return tuple(out)
