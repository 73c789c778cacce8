"""The register map of the GDB stub, as data, and the target description built from it.

gdb's RISC-V support (riscv-tdep.c) recognises three features by name: the integer
registers and pc (`org.gnu.gdb.riscv.cpu`), CSRs by their names
(`org.gnu.gdb.riscv.csr`) and the privilege mode `priv` (`org.gnu.gdb.riscv.virtual`:
0 = U, 1 = S, 3 = M). Remote register numbers follow gdb's own numbering: x0..x31 are
0..31, pc is 32, CSR number n is 65 + n, priv is 65 + 4096. The `g` packet carries
x0..x31 and pc; everything else is read with `p`. There is no FPU feature: the guest
runs with mstatus.FS = 0 (rv64imac).
"""

from __future__ import annotations

from dataclasses import dataclass

from unicorn import riscv_const as R

from harness.cpu.registers import ABI_NAMES

FIRST_CSR = 65
PRIV_REGNUM = FIRST_CSR + 4096


@dataclass(frozen=True)
class GdbReg:
    name: str
    regnum: int
    feature: str      # cpu | csr | virtual
    kind: str         # x | pc | csr | priv
    uc_reg: int       # Unicorn register id
    type: str = "int"


def _x_name(i: int) -> str:
    return "fp" if i == 8 else ABI_NAMES[i]


_X_TYPES = {1: "code_ptr", 2: "data_ptr", 3: "data_ptr", 4: "data_ptr", 8: "data_ptr"}

# CSR name -> CSR number (the privileged spec)
CSR_NUMBERS = {
    "sstatus": 0x100, "sie": 0x104, "stvec": 0x105, "scounteren": 0x106,
    "sscratch": 0x140, "sepc": 0x141, "scause": 0x142, "stval": 0x143, "sip": 0x144,
    "satp": 0x180,
    "mstatus": 0x300, "misa": 0x301, "medeleg": 0x302, "mideleg": 0x303, "mie": 0x304,
    "mtvec": 0x305, "mscratch": 0x340, "mepc": 0x341, "mcause": 0x342, "mtval": 0x343,
    "mip": 0x344,
}

REGS: list[GdbReg] = (
    [GdbReg(_x_name(i), i, "cpu", "x", R.UC_RISCV_REG_X0 + i, _X_TYPES.get(i, "int"))
     for i in range(32)]
    + [GdbReg("pc", 32, "cpu", "pc", R.UC_RISCV_REG_PC, "code_ptr")]
    + [GdbReg(name, FIRST_CSR + num, "csr", "csr", getattr(R, f"UC_RISCV_REG_{name.upper()}"))
       for name, num in CSR_NUMBERS.items()]
    + [GdbReg("priv", PRIV_REGNUM, "virtual", "priv", R.UC_RISCV_REG_PRIV)]
)
BY_NUMBER = {r.regnum: r for r in REGS}
G_PACKET = [r for r in REGS if r.feature == "cpu"]  # x0..x31, pc

FEATURES = (("cpu", "org.gnu.gdb.riscv.cpu"), ("csr", "org.gnu.gdb.riscv.csr"),
            ("virtual", "org.gnu.gdb.riscv.virtual"))


def target_xml() -> str:
    """The whole target description (one document, no includes)."""
    out = ['<?xml version="1.0"?>', '<!DOCTYPE target SYSTEM "gdb-target.dtd">',
           '<target version="1.0">', "  <architecture>riscv:rv64</architecture>"]
    for key, fname in FEATURES:
        out.append(f'  <feature name="{fname}">')
        for r in REGS:
            if r.feature == key:
                group = ' group="system"' if key != "cpu" else ""
                out.append(f'    <reg name="{r.name}" bitsize="64" type="{r.type}" '
                           f'regnum="{r.regnum}"{group}/>')
        out.append("  </feature>")
    out.append("</target>")
    return "\n".join(out) + "\n"
