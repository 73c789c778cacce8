"""Local variables and arguments of the innermost frame, from DWARF location expressions.

At -O2 most locals live in registers for part of a function, so their DW_AT_location
is a location list: (address range, expression) pairs. For the PC this module finds
the function, the lexical blocks and inlined calls around it, and each variable's
expression for that address, and evaluates it on a small DWARF stack machine: in a
register (DW_OP_regN), at an address (DW_OP_bregN, DW_OP_fbreg from the frame base),
or a computed value (... DW_OP_stack_value). The frame base of gcc's RISC-V code is
DW_OP_call_frame_cfa: with frame pointers the CFA is s0 once the prologue has set it,
and sp plus what the prologue allocated before that. What a list does not cover at
the PC, or an expression needing the caller's state (DW_OP_entry_value, pieces), is
`<optimized out>`, as in gdb. Only frame #0 has locals: outer frames' registers are not
recoverable without unwind tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.dwarf.die import DIE
from elftools.dwarf.dwarf_expr import DWARFExprOp, DWARFExprParser
from elftools.dwarf.locationlists import LocationEntry, LocationExpr, LocationParser
from elftools.elf.elffile import ELFFile

from harness.guest.dwarf import VOID, CType, DwarfInfo

MASK = (1 << 64) - 1


@dataclass
class Local:
    name: str
    type: CType
    arg: bool                          # a formal parameter
    ops: list[DWARFExprOp] | None      # the expression at the PC; None: optimized out


@dataclass
class Place:
    """Where a local is: kind "reg" (regno), "addr" (memory) or "value" (computed)."""

    kind: str
    value: int


class Scopes:
    """The functions of one ELF with their variables (read on first use)."""

    def __init__(self, path: Path, types: DwarfInfo) -> None:
        self.path = path
        self.types = types

    @cached_property
    def _index(self) -> list[tuple[int, int, int, int]]:
        """(low, high, CU offset, DIE offset) of every concrete function."""
        out = []
        try:
            with open(self.path, "rb") as f:
                dwarf = ELFFile(f).get_dwarf_info()
                for cu in dwarf.iter_CUs():
                    for die in cu.get_top_DIE().iter_children():
                        if die.tag == "DW_TAG_subprogram":
                            for lo, hi in _ranges(dwarf, cu, die):
                                out.append((lo, hi, cu.cu_offset, die.offset))
        except (ELFError, OSError):
            return []
        return sorted(out)

    def at(self, pc: int) -> tuple[str, list[Local]] | None:
        """(function name, its variables in scope at pc, innermost first)."""
        hits = [(cu, off) for lo, hi, cu, off in self._index if lo <= pc < hi]
        if not hits:
            return None
        cu_off, die_off = hits[0]
        with open(self.path, "rb") as f:
            dwarf = ELFFile(f).get_dwarf_info()
            cu = dwarf.get_CU_at(cu_off)
            die = dwarf.get_DIE_from_refaddr(die_off, cu)
            parser = LocationParser(dwarf.location_lists())
            exprs = DWARFExprParser(dwarf.structs)
            out: list[Local] = []
            self._collect(dwarf, cu, die, pc, parser, exprs, out)
            return _name(_origin(die)), out

    def _collect(self, dwarf, cu, die: DIE, pc: int, parser: LocationParser,  # noqa: ANN001
                 exprs: DWARFExprParser, out: list[Local]) -> None:
        mine: list[Local] = []
        for ch in die.iter_children():
            if ch.tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine"):
                if any(lo <= pc < hi for lo, hi in _ranges(dwarf, cu, ch)):
                    self._collect(dwarf, cu, ch, pc, parser, exprs, out)
            elif ch.tag in ("DW_TAG_variable", "DW_TAG_formal_parameter"):
                src = _origin(ch)
                name = _name(src)
                if not name:
                    continue
                t = self.types._type_of(src) if "DW_AT_type" in src.attributes else VOID
                mine.append(Local(name, t, ch.tag == "DW_TAG_formal_parameter",
                                  _ops_at(ch, cu, pc, parser, exprs)))
        out.extend(mine)  # after the inner scopes: inner names shadow outer ones


def _origin(die: DIE) -> DIE:
    while "DW_AT_abstract_origin" in die.attributes:
        die = die.get_DIE_from_attribute("DW_AT_abstract_origin")
    return die


def _name(die: DIE) -> str:
    a = die.attributes.get("DW_AT_name")
    return a.value.decode(errors="replace") if a is not None else ""


def _ranges(dwarf, cu, die: DIE) -> list[tuple[int, int]]:  # noqa: ANN001
    a = die.attributes
    if "DW_AT_low_pc" in a and "DW_AT_high_pc" in a:
        lo = a["DW_AT_low_pc"].value
        hi = a["DW_AT_high_pc"]
        return [(lo, hi.value if hi.form == "DW_FORM_addr" else lo + hi.value)]
    if "DW_AT_ranges" in a:
        rl = dwarf.range_lists()
        if rl is None:
            return []
        base = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
        base_addr = base.value if base is not None else 0
        out = []
        for e in rl.get_range_list_at_offset(a["DW_AT_ranges"].value, cu=cu):
            if hasattr(e, "begin_offset"):
                absolute = getattr(e, "is_absolute", False)
                b = e.begin_offset if absolute else base_addr + e.begin_offset
                en = e.end_offset if absolute else base_addr + e.end_offset
                out.append((b, en))
            elif hasattr(e, "base_address"):
                base_addr = e.base_address
        return out
    return []


def _ops_at(die: DIE, cu, pc: int, parser: LocationParser,  # noqa: ANN001
            exprs: DWARFExprParser) -> list[DWARFExprOp] | None:
    loc = die.attributes.get("DW_AT_location")
    if loc is None:
        return None
    parsed = parser.parse_from_attribute(loc, cu["version"], die)
    if isinstance(parsed, LocationExpr):
        return exprs.parse_expr(parsed.loc_expr)
    base = cu.get_top_DIE().attributes.get("DW_AT_low_pc")
    base_addr = base.value if base is not None else 0
    for e in parsed:
        if isinstance(e, LocationEntry):
            absolute = getattr(e, "is_absolute", False)
            lo = e.begin_offset if absolute else base_addr + e.begin_offset
            hi = e.end_offset if absolute else base_addr + e.end_offset
            if lo <= pc < hi:
                return exprs.parse_expr(e.loc_expr)
        elif hasattr(e, "base_address"):
            base_addr = e.base_address
    return None


_BINARY: dict[str, Callable[[int, int], int]] = {
    "DW_OP_plus": lambda a, b: a + b, "DW_OP_minus": lambda a, b: a - b,
    "DW_OP_mul": lambda a, b: a * b, "DW_OP_and": lambda a, b: a & b,
    "DW_OP_or": lambda a, b: a | b, "DW_OP_xor": lambda a, b: a ^ b,
    "DW_OP_shl": lambda a, b: a << b, "DW_OP_shr": lambda a, b: a >> b,
    "DW_OP_shra": lambda a, b: (a - (1 << 64) if a >> 63 else a) >> b,
}


def evaluate(ops: list[DWARFExprOp], reg: Callable[[int], int], cfa: int,
             read_u64: Callable[[int], int | None]) -> Place | None:
    """Run a location expression; None when it cannot be evaluated here."""
    stack: list[int] = []
    for op in ops:
        name = op.op_name
        if name.startswith("DW_OP_lit"):
            stack.append(int(name[9:]))
        elif name.startswith("DW_OP_const"):
            stack.append(op.args[0] & MASK)
        elif name.startswith("DW_OP_reg") and name != "DW_OP_regx":
            return Place("reg", int(name[9:])) if len(ops) == 1 else None
        elif name == "DW_OP_regx":
            return Place("reg", op.args[0]) if len(ops) == 1 else None
        elif name.startswith("DW_OP_breg") and name != "DW_OP_bregx":
            stack.append((reg(int(name[10:])) + op.args[0]) & MASK)
        elif name == "DW_OP_bregx":
            stack.append((reg(op.args[0]) + op.args[1]) & MASK)
        elif name == "DW_OP_fbreg":
            stack.append((cfa + op.args[0]) & MASK)
        elif name == "DW_OP_call_frame_cfa":
            stack.append(cfa)
        elif name == "DW_OP_addr":
            stack.append(op.args[0])
        elif name == "DW_OP_plus_uconst" and stack:
            stack.append((stack.pop() + op.args[0]) & MASK)
        elif name in _BINARY and len(stack) >= 2:
            b, a = stack.pop(), stack.pop()
            stack.append(_BINARY[name](a, b) & MASK)
        elif name == "DW_OP_neg" and stack:
            stack.append(-stack.pop() & MASK)
        elif name == "DW_OP_not" and stack:
            stack.append(~stack.pop() & MASK)
        elif name == "DW_OP_deref" and stack:
            v = read_u64(stack.pop())
            if v is None:
                return None
            stack.append(v)
        elif name == "DW_OP_stack_value" and stack:
            return Place("value", stack.pop())
        else:
            return None  # entry values, pieces, implicit pointers: optimized out
    return Place("addr", stack.pop()) if stack else None
