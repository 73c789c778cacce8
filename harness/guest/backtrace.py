"""Backtraces: the frame-pointer walk over the kernel, trap frame records and user space.

The walk follows gcc's RISC-V frame-pointer convention: in a function with frame
pointer fp (s0), the return address is at fp-8 and the caller's fp at fp-16. Two cases
break the chain and are handled:
- a function stopped before its prologue set s0 (or one that never sets it): s0 is
  still its caller's frame, and its own return address is only in ra;
- a leaf function saves s0 but not ra: fp-8 holds the caller's fp, not code.
In both, the return address is taken from ra (the register for the innermost frame; the
copy kernelvec saved at the bottom of its trap frame for an interrupted function). Our
kernelvec pushes a frame record {fp-8 = sepc, fp-16 = interrupted s0} before calling
kerneltrap (docs/ARCHITECTURE.md), so the walk continues into the interrupted function.

`frame_chain` walks one program's frames from any registers: a hart (the fault report),
or the registers a process saved (`RegsView` over its address space). On top of it,
`backtrace` crosses the user/kernel boundary: a kernel chain that ends in `usertrap`
belongs to a trap from user space, whose user registers are in the process's trap frame
(`p->trapframe`, a physical page; layout from DWARF), and the walk goes on through the
process's own page table with the user program's symbols. A system call's user frame #0
is shown at the `ecall` (usertrap already advanced `epc` past it). `process_backtrace`
does the same for a process that is not on the CPU, from the registers swtch() saved in
its `p->context` (the hang report and `info proc`'s backtraces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from unicorn import UC_PROT_READ
from unicorn import riscv_const as R

from harness.cpu.registers import PRIV_U, REG_S0, Hart
from harness.guest.dwarf import scalar
from harness.guest.elf import ElfImage
from harness.guest.memory import AddressSpace, RegsView
from harness.guest.procs import Proc
from harness.guest.programs import Program
from harness.guest.spaces import Guest

MAX_FRAMES = 32
MAX_VECTOR_SCAN = 64  # instructions of the trap vector searched for its frame allocation
ECALL = 0x0000_0073
NO_VECTOR = 0xFFFF_FFFF_FFFF_F000  # a stvec no user symbol covers


class Memory(Protocol):
    """What code and stacks are read from: a Hart (its current MMU view) or an
    AddressSpace."""

    def vread(self, va: int, n: int, prot: int = UC_PROT_READ) -> bytes | None: ...
    def read_u64(self, va: int) -> int | None: ...
    def fetch(self, va: int) -> tuple[int, int] | None: ...


class Cpu(Memory, Protocol):
    """Registers and memory to walk frames from: a Hart, or a RegsView."""

    def x(self, n: int) -> int: ...
    def get(self, reg: int) -> int: ...
    def csr(self, reg: int) -> int: ...


@dataclass
class Frame:
    """One backtrace entry, innermost first."""

    level: int
    pc: int | None          # None: a return address that was never saved
    space: Memory           # where pc's code is (an AddressSpace, or the hart walked)
    exact: bool = False     # pc is an instruction (the pc, an interrupted sepc), not a
                            # return address
    trap: bool = False      # the sepc of an interrupted kernel function (a trap record)
    program: Program | None = None  # whose code pc is in (None: not known)
    entry: Proc | None = None  # first user frame below a trap from this process
    sp: int | None = None   # innermost frame's stack pointer (for finish/next)

    @property
    def lookup_pc(self) -> int | None:
        """The address to symbolise: a return address right after a call is looked up
        at pc-1 (after a call to a function that never returns it points past the
        caller's end, at the next function)."""
        if self.pc is None or self.exact:
            return self.pc
        return self.pc - 1 if follows_call(self.space, self.pc) else self.pc

    def function(self) -> str:
        if self.program is None or self.lookup_pc is None:
            return "??"
        hit = self.program.function(self.lookup_pc)
        return hit[0].name if hit else "??"

    def where(self) -> str:
        if self.program is None or self.lookup_pc is None:
            return ""
        return self.program.where(self.lookup_pc)


# ---------------------------------------------------------------- the frame-pointer walk
def frame_chain(cpu: Cpu, elf: ElfImage, pc: int, *, level: int = 0,
                space: Memory | None = None, program: Program | None = None) -> list[Frame]:
    """Frames from pc outwards in one program (elf), following frame pointers through
    the memory cpu reads (a hart: its current page table). Levels count from `level`;
    every frame gets `space` (default: cpu) and `program`."""
    mem = cpu if space is None else space
    frames: list[Frame] = []

    def add(addr: int | None, exact: bool = False, trap: bool = False) -> None:
        frames.append(Frame(level + len(frames), addr, mem, exact, trap, program))

    stvec = cpu.csr(R.UC_RISCV_REG_STVEC) & ~3
    vector = elf.lookup(stvec)
    vec_size = trap_frame_size(cpu, stvec)
    add(pc, exact=True)
    fp = cpu.get(REG_S0)
    # the return address of the innermost function whose frame is not (yet) on the chain
    pending_ra: int | None = cpu.x(1)
    if in_prologue(cpu, elf, pc):
        add(pending_ra)
        pending_ra = None
    for _ in range(MAX_FRAMES):
        if fp == 0 or fp % 8:
            break
        ra, prev = cpu.read_u64(fp - 8), cpu.read_u64(fp - 16)
        if ra is None or prev is None or ra == 0:
            break
        if not elf.contains_code(ra):  # a leaf: fp-8 holds the caller's fp
            ra, prev = pending_ra, ra
        pending_ra = None
        if ra is not None and not elf.contains_code(ra):
            break
        add(ra)
        if prev <= fp:  # callers' frames are above ours; anything else ends the chain
            break
        hit = elf.lookup(ra - 1) if ra is not None else None
        if vector is not None and hit is not None and hit[0] == vector[0]:
            # prev is kernelvec's frame record: {fp-8 = sepc, fp-16 = interrupted s0}
            sepc, s0 = cpu.read_u64(prev - 8), cpu.read_u64(prev - 16)
            if sepc is None or s0 is None:
                break
            add(sepc, exact=True, trap=True)
            saved_ra = cpu.read_u64(prev - vec_size) if vec_size else None
            if in_prologue(cpu, elf, sepc):
                add(saved_ra if saved_ra and elf.contains_code(saved_ra) else None)
            else:
                pending_ra = saved_ra
            if s0 <= prev:
                break
            fp = s0
            continue
        fp = prev
    return frames


def trap_frame_size(cpu: Cpu, stvec: int) -> int | None:
    """Bytes the trap vector's first `addi sp, sp, -N` allocates (kernelvec may check the
    stack before it); kernelvec saves the interrupted ra at the bottom of that frame,
    0(sp)."""
    pos = stvec
    for _ in range(MAX_VECTOR_SCAN):
        got = cpu.fetch(pos)
        if got is None:
            return None
        size = sp_allocation(*got)
        if size is not None:
            return size
        pos += got[1]
    return None


def sp_allocation(bits: int, n: int) -> int | None:
    """N for `addi sp, sp, -N` (or its compressed forms), else None."""
    if n == 4 and bits & 0xFFFFF == 0x10113:  # addi sp, sp, imm
        imm = bits >> 20
        imm -= (1 << 12) if imm & 0x800 else 0
        return -imm if imm < 0 else None
    if n == 2 and bits & 0xEF83 == 0x0101:  # c.addi sp, sp, imm (6-bit imm)
        imm = ((bits >> 12) & 1) << 5 | ((bits >> 2) & 0x1F)
        imm -= (1 << 6) if imm & 0x20 else 0
        return -imm if imm < 0 else None
    if n == 2 and bits & 0xEF83 == 0x6101:  # c.addi16sp sp, imm
        imm = (((bits >> 12) & 1) << 9 | ((bits >> 3) & 3) << 7 | ((bits >> 5) & 1) << 6
               | ((bits >> 2) & 1) << 5 | ((bits >> 6) & 1) << 4)
        imm -= (1 << 10) if imm & 0x200 else 0
        return -imm if imm < 0 else None
    return None


def in_prologue(mem: Memory, elf: ElfImage, addr: int) -> bool:
    """True if the function containing addr has not set its frame pointer (s0 = sp + N)
    before addr: then s0 still belongs to its caller."""
    hit = elf.lookup(addr)
    if hit is None or not hit[0].size:
        return False
    pos = hit[0].addr
    while pos < addr:
        got = mem.fetch(pos)
        if got is None:
            return False
        bits, n = got
        if n == 4 and bits & 0xFFFFF == 0x10413:  # addi s0, sp, imm
            return False
        if n == 2 and bits & 0xE01F == 0x0000 and bits:  # c.addi4spn s0, sp, imm
            return False
        pos += n
    return True


def follows_call(mem: Memory, addr: int) -> bool:
    """True if the instruction before addr is a call (jal/jalr/c.jalr linking ra)."""
    word = mem.vread(addr - 4, 4)
    if word is not None:
        bits = int.from_bytes(word, "little")
        if bits & 0x7F in (0x6F, 0x67) and (bits >> 7) & 31 == 1:  # jal/jalr ra, ...
            return True
    half = mem.vread(addr - 2, 2)
    if half is not None:
        h = int.from_bytes(half, "little")
        return h & 0xF07F == 0x9002 and (h >> 7) & 31 != 0  # c.jalr rs1
    return False


# ---------------------------------------------------------------- across user/kernel
def backtrace(g: Guest, hart: Hart) -> list[Frame]:
    """The frames of a stopped hart, innermost first: kernel, then the user frames
    below a trap from user space."""
    pc = hart.pc
    if hart.priv == PRIV_U:
        prog = g.program_at(pc, PRIV_U)
        regs = {n: hart.x(n) for n in (1, 2, 8)}
        return _user_frames(prog, g.space(hart), pc, regs, 0, None)
    kernel = g.programs.kernel
    frames = frame_chain(hart, kernel.elf, pc, space=g.space(hart), program=kernel)
    if frames:
        frames[0].sp = hart.x(2)
    proc = g.current_proc()
    if proc is not None and frames and frames[-1].function() == "usertrap":
        frames += _below_trap(g, proc, len(frames))
    return frames


def process_backtrace(g: Guest, proc: Proc) -> list[Frame]:
    """The frames of a process that is not on the CPU: its kernel stack from the
    registers swtch() saved in p->context (it stopped in sched()), then its user frames
    from the trap frame, as for the running process."""
    regs = saved_context(g, proc)
    if regs is None:
        return []
    kernel = g.programs.kernel
    space = g.kernel_space()
    stvec = kernel.symbol("kernelvec")
    view = RegsView(space, regs, stvec.addr if stvec else NO_VECTOR)
    frames = frame_chain(view, kernel.elf, regs[1], space=space, program=kernel)
    if frames:
        frames[0].exact = False  # the saved ra: a return address into sched()
    if frames and frames[-1].function() == "usertrap":
        frames += _below_trap(g, proc, len(frames))
    return frames


def saved_context(g: Guest, proc: Proc) -> dict[int, int] | None:
    """{1: ra, 2: sp, 8: s0} from the struct context swtch() saved in p->context."""
    if g.procs is None:
        return None
    ctx_field = g.procs.ptype.field("context")
    if ctx_field is None:
        return None
    raw = g.phys.read(proc.addr + ctx_field.offset, ctx_field.type.size)
    if raw is None:
        return None
    regs = {}
    for reg, name in ((1, "ra"), (2, "sp"), (8, "s0")):
        f = ctx_field.type.field(name)
        if f is None:
            return None
        regs[reg] = scalar(f.type, raw[f.offset : f.offset + 8])
    return regs


def _below_trap(g: Guest, proc: Proc, level: int) -> list[Frame]:
    """The user frames of proc below its trap into the kernel (none if unreadable)."""
    user = _trap_frame_regs(g, proc)
    if user is None:
        return []
    upc, regs = user
    return _user_frames(g.programs.user(proc.name), g.proc_space(proc), upc, regs, level,
                        proc)


def _trap_frame_regs(g: Guest, proc: Proc) -> tuple[int, dict[int, int]] | None:
    """(user pc, {1: ra, 2: sp, 8: s0}) from the process's trap frame."""
    tf = g.programs.kernel.dwarf.struct("trapframe")
    if tf is None:
        return None
    raw = g.phys.read(proc.trapframe, tf.size)
    if raw is None:
        return None

    def get(name: str) -> int:
        f = tf.field(name)  # type: ignore[union-attr]
        return scalar(f.type, raw[f.offset : f.offset + 8]) if f else 0

    epc = get("epc")
    word = g.proc_space(proc).vread(epc - 4, 4)
    if word is not None and int.from_bytes(word, "little") == ECALL:
        epc -= 4  # a system call in progress: usertrap moved epc past the ecall
    return epc, {1: get("ra"), 2: get("sp"), 8: get("s0")}


def _user_frames(prog: Program | None, space: AddressSpace, pc: int,
                 regs: dict[int, int], level: int, entry: Proc | None) -> list[Frame]:
    if prog is None:
        return [Frame(level, pc, space, True, entry=entry, sp=regs.get(2))]
    view = RegsView(space, regs, NO_VECTOR)
    start = prog.function(prog.elf.entry)
    out = []
    for i, f in enumerate(frame_chain(view, prog.elf, pc, level=level, space=space,
                                      program=prog)):
        if i == 0:
            f.entry, f.sp = entry, regs.get(2)
        out.append(f)
        hit = prog.function(f.lookup_pc) if f.lookup_pc is not None else None
        if start is not None and hit is not None and hit[0] == start[0]:
            break  # the entry point (_start) has no caller: what lies above is argv
    return out
