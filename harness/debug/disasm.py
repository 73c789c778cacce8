"""Disassembly: capstone, with branch targets made absolute and symbolised.

Capstone 5 prints RISC-V branch and jump targets as offsets from the instruction
(`bne a1, a4, -0xe`); here they become addresses with their symbol
(`bne a1, a4, 0x80001a2c <acquire+22>`). With -mcmodel=medany -mno-relax a call is an
`auipc` + `jalr` pair and a global's address an `auipc` + `addi`/load/store pair: the
second instruction gets a comment with the address they form (`# 0x80001ed6 <fork>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import capstone

_cs = capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)

Fetch = Callable[[int], "tuple[int, int] | None"]
Symbolize = Callable[[int], str]


@dataclass
class Insn:
    addr: int
    bits: int
    size: int
    text: str       # "bne a1, a4, 0x80001a2c <acquire+22>"
    comment: str = ""

    def line(self, sym: str = "", marker: bool = False) -> str:
        where = f" <{sym}>" if sym else ""
        hexbits = f"{self.bits:0{2 * self.size}x}"
        out = f"{'=> ' if marker else '   '}{self.addr:#x}{where}:\t{hexbits:<8}\t{self.text}"
        return out + (f"\t# {self.comment}" if self.comment else "")


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


def branch_target(bits: int, n: int, pc: int) -> int | None:
    """The target of a pc-relative branch or jump (jal, b*, c.j, c.beqz/c.bnez)."""
    if n == 4:
        op = bits & 0x7F
        if op == 0x6F:  # jal
            imm = ((bits >> 31) << 20 | ((bits >> 12) & 0xFF) << 12 | ((bits >> 20) & 1) << 11
                   | ((bits >> 21) & 0x3FF) << 1)
            return pc + _sext(imm, 21)
        if op == 0x63:  # beq bne blt bge bltu bgeu
            imm = ((bits >> 31) << 12 | ((bits >> 7) & 1) << 11 | ((bits >> 25) & 0x3F) << 5
                   | ((bits >> 8) & 0xF) << 1)
            return pc + _sext(imm, 13)
        return None
    q, f3 = bits & 3, (bits >> 13) & 7
    if q == 1 and f3 == 5:  # c.j
        imm = (((bits >> 12) & 1) << 11 | ((bits >> 11) & 1) << 4 | ((bits >> 9) & 3) << 8
               | ((bits >> 8) & 1) << 10 | ((bits >> 7) & 1) << 6 | ((bits >> 6) & 1) << 7
               | ((bits >> 3) & 7) << 1 | ((bits >> 2) & 1) << 5)
        return pc + _sext(imm, 12)
    if q == 1 and f3 in (6, 7):  # c.beqz c.bnez
        imm = (((bits >> 12) & 1) << 8 | ((bits >> 10) & 3) << 3 | ((bits >> 5) & 3) << 6
               | ((bits >> 3) & 3) << 1 | ((bits >> 2) & 1) << 5)
        return pc + _sext(imm, 9)
    return None


def is_call(bits: int, n: int) -> bool:
    """jal/jalr that link ra (or t0, the alternate link register), or c.jalr."""
    if n == 4:
        return bits & 0x7F in (0x6F, 0x67) and (bits >> 7) & 31 in (1, 5)
    return bits & 0xF07F == 0x9002 and (bits >> 7) & 31 != 0


def disassemble(fetch: Fetch, addr: int, count: int, symbolize: Symbolize,
                end: int | None = None) -> list[Insn]:
    """count instructions from addr (or up to end); stops at unreadable memory."""
    out: list[Insn] = []
    auipc: dict[int, int] = {}  # register -> value an auipc just put there
    while len(out) < count and (end is None or addr < end):
        got = fetch(addr)
        if got is None:
            break
        bits, n = got
        insn = next(_cs.disasm(bits.to_bytes(n, "little"), addr, 1), None)
        if insn is None:
            out.append(Insn(addr, bits, n, f".{'half' if n == 2 else 'word'} {bits:#x}"))
            addr += n
            auipc.clear()
            continue
        ops = insn.op_str
        target = branch_target(bits, n, addr)
        if target is not None:
            sym = symbolize(target)
            head, _, _ = ops.rpartition(", ")
            ops = (head + ", " if head else "") + f"{target:#x}" + (f" <{sym}>" if sym else "")
        text = f"{insn.mnemonic} {ops}".strip()
        comment = ""
        if n == 4:
            op, rd, rs1 = bits & 0x7F, (bits >> 7) & 31, (bits >> 15) & 31
            if rs1 in auipc and op in (0x67, 0x13, 0x03, 0x23):  # jalr addi load store
                imm = _sext(bits >> 20, 12) if op != 0x23 else _sext(
                    ((bits >> 25) << 5) | ((bits >> 7) & 31), 12)
                value = (auipc[rs1] + imm) & 0xFFFF_FFFF_FFFF_FFFF
                sym = symbolize(value)
                comment = f"{value:#x}" + (f" <{sym}>" if sym else "")
            if op == 0x17:  # auipc rd, imm
                auipc = {rd: (addr + _sext(bits & 0xFFFFF000, 32)) & 0xFFFF_FFFF_FFFF_FFFF}
            else:
                auipc = {r: v for r, v in auipc.items() if r != rd or op == 0x23}
        else:
            auipc.clear()
        out.append(Insn(addr, bits, n, text, comment))
        addr += n
    return out
