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

The backtrace is the frame-pointer walk of harness/guest/backtrace.py, run on the hart
(through its current page table) with the kernel's symbols.
"""

from __future__ import annotations

import capstone
from unicorn import riscv_const as R

from harness.cpu.registers import ABI_NAMES, PRIV_NAMES, Hart
from harness.guest.backtrace import frame_chain
from harness.guest.elf import ElfImage
from harness.machine.board import Machine
from harness.machine.config import Exit, RunResult
from harness.machine.traps import INTERRUPT, cause_name

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


def _where(elf: ElfImage, addr: int, look: int | None = None) -> str:
    """"sym+off  file:line" of addr, looked up at `look` (a return address right after
    a call is looked up at addr-1: see Frame.lookup_pc)."""
    look = addr if look is None else look
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
    for f in frame_chain(h, elf, pc):
        if f.pc is None:
            out.append(f"  #{f.level:<2} ?  (return address not saved: a leaf or a function "
                       "stopped in its prologue)")
            continue
        note = "  <- trapped here (sepc)" if f.trap else ""
        out.append(f"  #{f.level:<2} {f.pc:#x}  {_where(elf, f.pc, f.lookup_pc)}{note}".rstrip())
    if len(m.cpus) > 1:
        out += format_harts(m)
    return "\n".join(out)


def format_harts(m: Machine) -> list[str]:
    """One line per hart: state, privilege, pc and the process it runs (cpus[h].proc,
    when the kernel's debug info can be read)."""
    names: dict[int, str] = {}
    try:
        from harness.guest.procs import ProcTable
        from harness.guest.programs import Program
        from harness.machine.guest_view import machine_phys

        table = ProcTable(Program("kernel", m.config.kernel, user=False), machine_phys(m))
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

