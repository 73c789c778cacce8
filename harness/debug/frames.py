"""Backtraces across the user/kernel boundary.

Kernel frames come from harness/report.py's frame-pointer walk (the same one the panic
report uses, through kernelvec's frame record for interrupts). A kernel chain that ends
in `usertrap` belongs to a trap from user space: the process's user registers are then
in its trap frame (`p->trapframe`, a physical page; layout from DWARF), and the walk
goes on through the process's own page table with the user program's symbols. A system
call's user frame #0 is shown at the `ecall` (usertrap already advanced `epc` past it).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.debug.dwarf import scalar
from harness.debug.procs import Proc
from harness.debug.programs import Program
from harness.debug.target import Target
from harness.debug.vmem import AddressSpace, RegsView
from harness.hart import PRIV_U
from harness.report import backtrace as fp_backtrace
from harness.report import follows_call

ECALL = 0x0000_0073
NO_VECTOR = 0xFFFF_FFFF_FFFF_F000  # a stvec no user symbol covers


@dataclass
class Frame:
    level: int
    pc: int | None          # None: a return address that was never saved
    program: Program | None
    space: AddressSpace
    exact: bool             # pc is an instruction, not a return address
    trap: bool = False      # the sepc of an interrupted kernel function
    entry: Proc | None = None  # first user frame below a trap from this process
    sp: int | None = None   # innermost frame's stack pointer (for finish/next)

    @property
    def lookup_pc(self) -> int | None:
        """The address to symbolise: a return address right after a call is looked up
        at pc-1 (a call to a function that never returns is the caller's last insn)."""
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


def backtrace(t: Target) -> list[Frame]:
    """The frames of the stopped hart, innermost first."""
    h = t.hart
    pc = h.pc
    if t.priv == PRIV_U:
        prog = t.program_at()
        space = t.space()
        regs = {n: h.x(n) for n in (1, 2, 8)}
        return _user_frames(t, prog, space, pc, regs, 0, None)
    kernel = t.programs.kernel
    space = t.space()
    frames = []
    for i, f in enumerate(fp_backtrace(h, kernel.elf, pc)):
        frames.append(Frame(i, f.addr, kernel, space, f.exact, f.trap,
                            sp=h.x(2) if i == 0 else None))
    last = frames[-1] if frames else None
    proc = t.current_proc()
    if (proc is not None and last is not None and last.function() == "usertrap"
            and t.procs is not None):
        user = _trap_frame_regs(t, proc)
        if user is not None:
            upc, regs = user
            prog = t.programs.user(proc.name)
            frames += _user_frames(t, prog, t.proc_space(proc), upc, regs, len(frames), proc)
    return frames


def process_backtrace(t: Target, proc: Proc) -> list[Frame]:
    """The frames of a process that is not on the CPU: its kernel stack from the
    registers swtch() saved in p->context (it stopped in sched()), then its user frames
    from the trap frame, as for the running process."""
    if t.procs is None:
        return []
    ptype = t.procs.ptype
    ctx_field = ptype.field("context")
    if ctx_field is None:
        return []
    raw = t.phys.read(proc.addr + ctx_field.offset, ctx_field.type.size)
    if raw is None:
        return []
    regs = {}
    for reg, name in ((1, "ra"), (2, "sp"), (8, "s0")):
        f = ctx_field.type.field(name)
        if f is None:
            return []
        regs[reg] = scalar(f.type, raw[f.offset : f.offset + 8])
    kernel = t.programs.kernel
    space = t.kernel_space()
    stvec = kernel.symbol("kernelvec")
    view = RegsView(space, regs, stvec.addr if stvec else NO_VECTOR)
    frames = [Frame(i, f.addr, kernel, space, f.exact, f.trap)
              for i, f in enumerate(fp_backtrace(view, kernel.elf, regs[1]))]  # type: ignore[arg-type]
    if frames:
        frames[0].exact = False  # the saved ra: a return address into sched()
    if frames and frames[-1].function() == "usertrap":
        user = _trap_frame_regs(t, proc)
        if user is not None:
            upc, uregs = user
            frames += _user_frames(t, t.programs.user(proc.name), t.proc_space(proc), upc,
                                   uregs, len(frames), proc)
    return frames


def _trap_frame_regs(t: Target, proc: Proc) -> tuple[int, dict[int, int]] | None:
    """(user pc, {1: ra, 2: sp, 8: s0}) from the process's trap frame."""
    tf = t.programs.kernel.dwarf.struct("trapframe")
    if tf is None:
        return None
    raw = t.phys.read(proc.trapframe, tf.size)
    if raw is None:
        return None

    def get(name: str) -> int:
        f = tf.field(name)  # type: ignore[union-attr]
        return scalar(f.type, raw[f.offset : f.offset + 8]) if f else 0

    epc = get("epc")
    space = t.proc_space(proc)
    word = space.vread(epc - 4, 4)
    if word is not None and int.from_bytes(word, "little") == ECALL:
        epc -= 4  # a system call in progress: usertrap moved epc past the ecall
    return epc, {1: get("ra"), 2: get("sp"), 8: get("s0")}


def _user_frames(t: Target, prog: Program | None, space: AddressSpace, pc: int,
                 regs: dict[int, int], level: int, entry: Proc | None) -> list[Frame]:
    if prog is None:
        return [Frame(level, pc, None, space, True, entry=entry, sp=regs.get(2))]
    view = RegsView(space, regs, NO_VECTOR)
    start = prog.function(prog.elf.entry)
    out = []
    for i, f in enumerate(fp_backtrace(view, prog.elf, pc)):  # type: ignore[arg-type]
        fr = Frame(level + i, f.addr, prog, space, f.exact, f.trap,
                   entry=entry if i == 0 else None, sp=regs.get(2) if i == 0 else None)
        out.append(fr)
        hit = prog.function(fr.lookup_pc) if fr.lookup_pc is not None else None
        if start is not None and hit is not None and hit[0] == start[0]:
            break  # the entry point (_start) has no caller: what lies above is argv
    return out
