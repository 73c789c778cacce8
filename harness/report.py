"""The fault report: what the harness prints when the guest panics or the machine stops it.

    === kernel panic: panic: kerneltrap: unexpected scause ... ===
    hart 0 in S-mode at 0x80001a2c  panic+0x5e  (printf.c:131)
      ra  0x...  sp  0x...  ...                      (all 32 registers)
    last trap: scause 0xd (load page fault)  sepc 0x80003f10 <fileread+0x22>  stval 0x0
      sstatus ... satp ... stvec ...
    instruction at sepc:   0x80003f10: 6398  ld a4, 0(a5)       (capstone)
    backtrace (frame pointers):
      #0 0x80001a2c  panic+0x5e       printf.c:131
      #1 0x80002b10  kerneltrap+0x64  trap.c:166
      #2 0x80003f10  fileread+0x22    file.c:80     <- interrupted here (sepc)

The backtrace follows gcc's RISC-V frame-pointer convention: in a function with frame
pointer fp (s0), the return address is at fp-8 and the caller's fp at fp-16. Two cases
break the chain and are handled:
- a function stopped before its prologue set s0 (or one that never sets it): s0 is
  still its caller's frame, and its own return address is only in ra;
- a leaf function saves s0 but not ra: fp-8 holds the caller's fp, not code.
In both, the return address is taken from ra (the register for the innermost frame; the
copy kernelvec saved at the bottom of its trap frame for an interrupted function). Our
kernelvec pushes a frame record {fp-8 = sepc, fp-16 = interrupted s0} before calling
kerneltrap (docs/ARCHITECTURE.md), so the walk continues into the interrupted function.
"""

from __future__ import annotations

from dataclasses import dataclass

import capstone
from unicorn import riscv_const as R

from harness.elf import ElfImage
from harness.hart import ABI_NAMES, PRIV_NAMES, REG_S0, Hart
from harness.machine import Exit, Machine, RunResult
from harness.traps import INTERRUPT, cause_name

MAX_FRAMES = 32

_cs = capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)

TITLES = {
    Exit.PANIC: "kernel panic",
    Exit.FAULT: "machine fault",
    Exit.TIMEOUT: "timeout",
    Exit.QUIT: "stopped",
    Exit.HANG: "hang",
}


def disassemble(hart: Hart, addr: int, count: int = 1) -> list[str]:
    """Lines "0x80001234: 00053503  ld a0, 0(a0)" for count instructions at addr."""
    lines = []
    for _ in range(count):
        got = hart.fetch(addr)
        if got is None:
            lines.append(f"{addr:#x}: <not readable>")
            break
        bits, n = got
        code = bits.to_bytes(n, "little")
        insn = next(_cs.disasm(code, addr, 1), None)
        text = f"{insn.mnemonic} {insn.op_str}".strip() if insn else "<not an instruction>"
        lines.append(f"{addr:#x}: {bits:0{2 * n}x}  {text}")
        addr += n
    return lines


@dataclass(frozen=True)
class Frame:
    """One backtrace entry: an instruction address (the pc, an interrupted sepc) or a
    return address; addr None when a caller's return address was not saved anywhere."""

    addr: int | None
    exact: bool = False  # addr is an instruction's address, not a return address
    trap: bool = False   # addr is the sepc of a trap frame record


def backtrace(hart: Hart, elf: ElfImage, pc: int) -> list[Frame]:
    """Frames from pc outwards, following frame pointers through guest memory (read
    through the current page table)."""
    stvec = hart.csr(R.UC_RISCV_REG_STVEC) & ~3
    vector = elf.lookup(stvec)
    vec_size = trap_frame_size(hart, stvec)
    frames = [Frame(pc, exact=True)]
    fp = hart.get(REG_S0)
    # the return address of the innermost function whose frame is not (yet) on the chain
    pending_ra: int | None = hart.x(1)
    if in_prologue(hart, elf, pc):
        frames.append(Frame(pending_ra))
        pending_ra = None
    for _ in range(MAX_FRAMES):
        if fp == 0 or fp % 8:
            break
        ra, prev = hart.read_u64(fp - 8), hart.read_u64(fp - 16)
        if ra is None or prev is None or ra == 0:
            break
        if not elf.contains_code(ra):  # a leaf: fp-8 holds the caller's fp
            ra, prev = pending_ra, ra
        pending_ra = None
        if ra is not None and not elf.contains_code(ra):
            break
        frames.append(Frame(ra))
        if prev <= fp:  # callers' frames are above ours; anything else ends the chain
            break
        hit = elf.lookup(ra - 1) if ra is not None else None
        if vector is not None and hit is not None and hit[0] == vector[0]:
            # prev is kernelvec's frame record: {fp-8 = sepc, fp-16 = interrupted s0}
            sepc, s0 = hart.read_u64(prev - 8), hart.read_u64(prev - 16)
            if sepc is None or s0 is None:
                break
            frames.append(Frame(sepc, exact=True, trap=True))
            saved_ra = hart.read_u64(prev - vec_size) if vec_size else None
            if in_prologue(hart, elf, sepc):
                frames.append(Frame(saved_ra if saved_ra and elf.contains_code(saved_ra)
                                    else None))
            else:
                pending_ra = saved_ra
            if s0 <= prev:
                break
            fp = s0
            continue
        fp = prev
    return frames


MAX_VECTOR_SCAN = 64  # instructions of the trap vector searched for its frame allocation


def trap_frame_size(hart: Hart, stvec: int) -> int | None:
    """Bytes the trap vector's first `addi sp, sp, -N` allocates (kernelvec may check the
    stack before it); kernelvec saves the interrupted ra at the bottom of that frame,
    0(sp)."""
    pos = stvec
    for _ in range(MAX_VECTOR_SCAN):
        got = hart.fetch(pos)
        if got is None:
            return None
        size = _sp_allocation(*got)
        if size is not None:
            return size
        pos += got[1]
    return None


def _sp_allocation(bits: int, n: int) -> int | None:
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


def in_prologue(hart: Hart, elf: ElfImage, addr: int) -> bool:
    """True if the function containing addr has not set its frame pointer (s0 = sp + N)
    before addr: then s0 still belongs to its caller."""
    hit = elf.lookup(addr)
    if hit is None or not hit[0].size:
        return False
    pos = hit[0].addr
    while pos < addr:
        got = hart.fetch(pos)
        if got is None:
            return False
        bits, n = got
        if n == 4 and bits & 0xFFFFF == 0x10413:  # addi s0, sp, imm
            return False
        if n == 2 and bits & 0xE01F == 0x0000 and bits:  # c.addi4spn s0, sp, imm
            return False
        pos += n
    return True


def follows_call(hart: Hart, addr: int) -> bool:
    """True if the instruction before addr is a call (jal/jalr/c.jalr linking ra)."""
    word = hart.vread(addr - 4, 4)
    if word is not None:
        bits = int.from_bytes(word, "little")
        if bits & 0x7F in (0x6F, 0x67) and (bits >> 7) & 31 == 1:  # jal/jalr ra, ...
            return True
    half = hart.vread(addr - 2, 2)
    if half is not None:
        h = int.from_bytes(half, "little")
        return h & 0xF07F == 0x9002 and (h >> 7) & 31 != 0  # c.jalr rs1
    return False


def _where(elf: ElfImage, addr: int, return_address: bool = False) -> str:
    """"sym+off  file:line". A return address right after a call is looked up at
    addr-1: after a call to a function that never returns it points past the caller's
    end, at the next function."""
    look = addr - 1 if return_address else addr
    hit = elf.lookup(look)
    if hit is None:
        return ""
    sym, off = hit
    name = f"{sym.name}+{addr - sym.addr:#x}" if addr != sym.addr else sym.name
    line = elf.source_line(look)
    return "  ".join(p for p in (name, line) if p)


def format_report(m: Machine, result: RunResult) -> str:
    """The whole report for a PANIC, FAULT, TIMEOUT or QUIT result."""
    h, elf = m.hart, m.kernel
    title = TITLES.get(result.exit, result.exit.value)
    message = result.message or (f"code {result.status}" if result.exit == Exit.PANIC else "")
    out = [f"=== {title}: {message} ==="]
    pc = result.pc if result.pc is not None else h.pc
    priv = PRIV_NAMES.get(h.priv, h.priv)
    out.append(f"hart {m.cur} in {priv}-mode at {pc:#x}  {_where(elf, pc)}".rstrip())
    regs = h.gprs()
    for row in range(0, 32, 4):
        out.append("  " + "  ".join(f"{ABI_NAMES[i]:>4} {regs[i]:#018x}"
                                    for i in range(row, row + 4)))
    scause = h.csr(R.UC_RISCV_REG_SCAUSE)
    sepc = h.csr(R.UC_RISCV_REG_SEPC)
    stval = h.csr(R.UC_RISCV_REG_STVAL)
    if scause == sepc == 0:
        out.append("last trap: none yet")
    else:
        out.append(f"last trap: scause {scause:#x} ({cause_name(scause)})  sepc {sepc:#x} "
                   f"{_where(elf, sepc)}  stval {stval:#x}".rstrip())
    out.append("  " + "  ".join(f"{name} {h.csr(reg):#x}" for name, reg in (
        ("sstatus", R.UC_RISCV_REG_SSTATUS), ("sie", R.UC_RISCV_REG_SIE),
        ("sip", R.UC_RISCV_REG_SIP), ("stvec", R.UC_RISCV_REG_STVEC),
        ("satp", R.UC_RISCV_REG_SATP))))
    if result.exit == Exit.PANIC and sepc and not scause & INTERRUPT:
        out.append("instruction at sepc (the last trap):")
        out += ["  " + line for line in disassemble(h, sepc)]
    out.append("instruction at pc:")
    out += ["  " + line for line in disassemble(h, pc)]
    out.append("backtrace (frame pointers):")
    for i, f in enumerate(backtrace(h, elf, pc)):
        if f.addr is None:
            out.append(f"  #{i:<2} ?  (return address not saved: a leaf or a function "
                       "stopped in its prologue)")
            continue
        # a return address right after a call is looked up at addr-1 (see _where)
        ret = not f.exact and follows_call(h, f.addr)
        note = "  <- trapped here (sepc)" if f.trap else ""
        out.append(f"  #{i:<2} {f.addr:#x}  {_where(elf, f.addr, ret)}{note}".rstrip())
    if len(m.cpus) > 1:
        out += format_harts(m)
    return "\n".join(out)


def format_harts(m: Machine) -> list[str]:
    """One line per hart: state, privilege, pc and the process it runs (cpus[h].proc,
    when the kernel's debug info can be read)."""
    names: dict[int, str] = {}
    try:
        from harness.debug.procs import ProcTable
        from harness.debug.programs import Program
        from harness.debug.vmem import Phys

        table = ProcTable(Program("kernel", m.config.kernel, user=False), Phys(m))
        for c in m.cpus:
            p = table.current(c.id) if c.started else None
            if p is not None:
                names[c.id] = f"pid {p.pid} ({p.name})"
    except Exception:  # noqa: BLE001 (a stub without debug info: no process column)
        pass
    out = [f"harts ({len(m.cpus)}; * = the one above):"]
    for c in m.cpus:
        if not c.started:
            out.append(f"  {' '}{c.id}  parked")
            continue
        h = c.hart
        pc = h.pc
        state = "wfi" if c.idle else "running"
        out.append(f"  {'*' if c.id == m.cur else ' '}{c.id}  {state:<7} "
                   f"{PRIV_NAMES.get(h.priv, h.priv)}-mode  {pc:#x}  {_where(m.kernel, pc)}  "
                   f"{names.get(c.id, 'no process')}".rstrip())
    return out

