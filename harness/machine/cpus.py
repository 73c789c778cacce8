"""The machine's harts: one Unicorn instance each, over the one shared RAM mapping.

A `Cpu` is everything one hart owns: its Unicorn instance and register access (`Hart`),
its trap delivery (`Traps`) and its MMIO bus (`MmioBus`, so restart bookkeeping is per
hart), plus the run loop's view of it: where it resumes, whether it has been started
(HART_START) and whether it waits in wfi.

Scheduling (harness/machine/board.py runs it) is round-robin on the emulation thread: one hart
executes at a time, for a slice, then the next hart that can run. So every guest load,
store, AMO and LR/SC executes with no other hart in the middle of it: AMOs are atomic
across harts without host atomics. An SC succeeds only if the word still holds the value
its LR loaded (Unicorn implements SC as a compare-and-swap against that value), so a
store of another value by another hart between the two breaks the reservation. The
kernel's spin loops execute `pause` (Zihintpause), which the machine hooks: a hart
spinning on a lock another hart holds gives up the rest of its slice at once.

Stores cut by a stop. A stop from the waker thread (end of slice, deadline, event) lands
either at the start of a translated block or right after a load or store, with the PC
left on that instruction, which Unicorn runs again on resume (harness/machine/bus.py). With one
hart repeating a RAM store is harmless; with several it is not: the other harts run in
between, and the repeated store would write a stale value over theirs (a lock released
twice frees another hart's lock). So after such a stop `complete_store` looks at the
instruction: a store whose bytes are already in memory is completed (PC past it) before
any other hart runs; that is exact whether or not it had executed. An AMO cannot be told
apart so (kernel code is written to survive a repeated one: spinlock.c, ipi.c; a kernel
that does not say so gets its AMOs hooked, Machine._on_atomic_edge); a user program's own
AMO can still repeat, rarely (docs/ARCHITECTURE.md, "Harts", the limit); with
`--clock icount` no run is stopped from outside, so nothing is ever repeated.

Instruction fetch: each instance keeps its own translated code and does not notice the
kernel's stores into a page it translated as user code (nor another instance's stores).
`fence.i` in kernel text is hooked and drops this hart's translations of the user pages
that may have changed since its last fence.i, which gives the harts exactly the coherence
RISC-V defines: code written by one hart runs on another after a fence.i on the one that
runs it (our kernel does that after exec and before running a process when code pages
were freed: kernel_c/icache.c). Which pages: those in the kernel's log of freed code
pages (`CodeLog`, kernel_c/icache.h); a kernel without one (the bare-metal stubs), or a
hart that missed more entries than the log holds, drops all of user memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicorn import UC_PROT_WRITE, Uc

from harness.abi import cheader
from harness.cpu.physmem import PhysMem
from harness.cpu.registers import REG_PC, Hart
from harness.machine.bus import MmioBus, mmio_form
from harness.machine.traps import Traps, mem_operand

FENCE_I = 0x0000_100F
_ICACHE = cheader.load("icache.h")
CODELOG_SIZE = _ICACHE["CODELOG_SIZE"]
_CODELOG = _ICACHE.struct("codelog")
PAUSE = 0x0100_000F  # fence w, 0 (Zihintpause)


@dataclass
class Cpu:
    """One hart of the machine."""

    id: int
    uc: Uc
    hart: Hart
    traps: Traps
    bus: MmioBus
    pc: int = 0
    started: bool = False   # running since reset (hart 0) or HART_START
    idle: bool = False      # executed wfi; the PC is past it
    counted: bool = False   # its translated blocks carry Unicorn's count hook
    start_pc: int = -1      # where its current run began (the pause hook skips it once)
    paused_once: bool = False
    fence_i: int = 0        # fence.i executed (translations of user memory dropped)
    codeseq: int = 0        # CodeLog.seq at its last fence.i
    yields: int = 0         # slices given up in a spin loop (pause)
    stores_completed: int = 0  # stores cut by a stop, completed (complete_store)
    ipi_at: float = 0.0     # perf_counter of an IPI that found it idle, until it runs
    yield_at: tuple[int, int] = (-1, -1)  # deterministic mode: (pc, count) of its last yield

    def can_run(self) -> bool:
        """Started and not waiting in wfi for an interrupt that has not come."""
        return self.started and (not self.idle or bool(self.hart.pending_enabled()))


@dataclass(frozen=True)
class CodeLog:
    """The kernel's log of freed user-code pages (struct codelog, kernel_c/icache.h)."""

    ram: PhysMem
    addr: int  # the kernel's `codelog` symbol

    def since(self, seq: int) -> tuple[int, list[int] | None]:
        """(the log's seq now, the pages logged since `seq`), or None for the pages when
        the log has wrapped past some of them (or the kernel restarted it: a reset)."""
        now = self.ram.u64(self.addr + _CODELOG.offset("seq"))
        # < SIZE, not <=: an append may be rewriting slot now % SIZE
        if not 0 <= now - seq < CODELOG_SIZE:
            return now, None
        pa = self.addr + _CODELOG.offset("pa")
        return now, [self.ram.u64(pa + 8 * (i % CODELOG_SIZE)) for i in range(seq, now)]


def complete_store(c: Cpu, ram: PhysMem) -> int:
    """After a stop from outside: if the PC is on a RAM store whose bytes are already in
    memory, move past it (see the module docstring). Returns the PC to resume at."""
    h = c.hart
    got = h.fetch(c.pc)
    op = mem_operand(*got) if got else None
    form = mmio_form(*got) if got else None
    if got is None or op is None or form is None or not form[0]:
        return c.pc
    rs1, disp, width = op
    pa = h.translate((h.x(rs1) + disp) & 0xFFFF_FFFF_FFFF_FFFF, UC_PROT_WRITE)
    if pa is None or not ram.contains(pa, width):
        return c.pc
    if int.from_bytes(ram.read(pa, width), "little") != h.x(form[1]) & ((1 << 8 * width) - 1):
        return c.pc
    c.stores_completed += 1
    c.pc += got[1]
    h.set(REG_PC, c.pc)
    return c.pc


def scan_atomic_writes(data: bytes) -> list[int]:
    """Offsets (2-byte aligned) of the 32-bit AMO and SC instructions in code bytes: the
    A-extension writes that a restart would repeat (LR only reads). Data that happens to
    look like one costs a hook that never fires."""
    out = []
    for i in range(0, len(data) - 3, 2):
        insn = int.from_bytes(data[i : i + 4], "little")
        if insn & 0x7F == 0x2F and (insn >> 12) & 7 in (2, 3) and insn >> 27 != 0b00010:
            out.append(i)
    return out


def scan_words(data: bytes, word: int) -> list[int]:
    """Offsets (2-byte aligned) of a 32-bit instruction word in code bytes."""
    pat = word.to_bytes(4, "little")
    out, i = [], data.find(pat)
    while i >= 0:
        if i % 2 == 0:
            out.append(i)
        i = data.find(pat, i + 1)
    return out
