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
pointer fp (s0), the return address is at fp-8 and the caller's fp at fp-16. Leaf
functions do not save ra, so for the innermost frame, if fp-8 does not hold a code
address, the return address is taken from the ra register and the caller's fp from fp-8.
Our kernelvec pushes a frame record {ra = sepc, fp = interrupted s0} before calling
kerneltrap, so the walk continues into the interrupted function.
"""

from __future__ import annotations

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


def backtrace(hart: Hart, elf: ElfImage, pc: int) -> list[int | None]:
    """Addresses from pc outwards (pc, then return addresses), following frame pointers
    through guest memory. None marks a caller whose return address was not saved (a
    leaf function interrupted by a trap)."""
    frames: list[int | None] = [pc]
    fp = hart.get(REG_S0)
    for depth in range(MAX_FRAMES):
        if fp == 0 or fp % 8:
            break
        ra = hart.read_u64(fp - 8)
        prev = hart.read_u64(fp - 16)
        if ra is None or prev is None:
            break
        if not elf.contains_code(ra):
            # a leaf function: it saved no ra, and fp-8 holds its caller's fp
            prev = ra
            ra = hart.x(1) if depth == 0 else None
        if ra is not None and not elf.contains_code(ra):
            break
        frames.append(ra)
        if prev <= fp:  # callers' frames are above ours; anything else ends the chain
            break
        fp = prev
    return frames


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
    out.append(f"hart 0 in {priv}-mode at {pc:#x}  {_where(elf, pc)}".rstrip())
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
    vector = elf.lookup(h.csr(R.UC_RISCV_REG_STVEC) & ~3)
    prev_in_vector = False
    for i, addr in enumerate(backtrace(h, elf, pc)):
        if addr is None:
            out.append(f"  #{i:<2} ?  (a leaf function: its return address was not saved)")
            prev_in_vector = False
            continue
        # pc, the interrupted pc in a trap's frame record, or a thread's first function
        exact = i == 0 or prev_in_vector or not follows_call(h, addr)
        note = "  <- trapped here (sepc)" if i and addr == sepc and prev_in_vector else ""
        out.append(f"  #{i:<2} {addr:#x}  {_where(elf, addr, not exact)}{note}".rstrip())
        hit = elf.lookup(addr - 1)
        prev_in_vector = vector is not None and hit is not None and hit[0] == vector[0]
    return "\n".join(out)

