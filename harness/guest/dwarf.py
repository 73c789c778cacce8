"""DWARF types and global variables: what `print` shows and how `info proc` reads the
process table.

The compiled kernel's own debug info is the layout of its structures, so nothing here
retypes a struct: `struct proc`'s member offsets, `enum procstate`'s names and the
length of `proc[NPROC]` all come from the ELF. Only what the debugger needs is modelled:
base types, pointers, arrays, structs/unions, enums, typedefs (resolved) and functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.dwarf.die import DIE
from elftools.elf.elffile import ELFFile

DW_OP_ADDR = 0x03


@dataclass
class CType:
    """A C type: kind is base, pointer, array, struct, union, enum, func or void."""

    kind: str
    name: str = ""
    size: int = 0
    signed: bool = False
    target: CType | None = None         # pointee / element
    count: int | None = None            # array length (None: unknown)
    fields: list[Field] = field(default_factory=list)
    enumerators: dict[int, str] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.kind == "pointer":
            return f"{self.target} *" if self.target else "void *"
        if self.kind == "array":
            return f"{self.target} [{self.count if self.count is not None else ''}]"
        if self.kind in ("struct", "union", "enum"):
            return f"{self.kind} {self.name}".strip()
        return self.name or self.kind

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def is_char(self) -> bool:
        return self.kind == "base" and self.size == 1 and "char" in self.name


@dataclass
class Field:
    name: str
    offset: int
    type: CType


@dataclass
class Variable:
    name: str
    addr: int
    type: CType


VOID = CType("void", "void", 1)


class DwarfInfo:
    """Global variables and named struct types of one ELF file (read on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._vars: dict[str, Variable] | None = None
        self._structs: dict[str, CType] = {}
        self._types: dict[int, CType] = {}
        self._decl: list[CType] = []
        self._returns: dict[str, CType] = {}

    def variable(self, name: str) -> Variable | None:
        if self._vars is None:
            self._load()
        assert self._vars is not None
        return self._vars.get(name)

    def variables(self) -> list[str]:
        if self._vars is None:
            self._load()
        assert self._vars is not None
        return sorted(self._vars)

    def return_type(self, function: str) -> CType | None:
        """What a function returns (VOID for void), None if it has no debug info."""
        if self._vars is None:
            self._load()
        return self._returns.get(function)

    def struct(self, name: str) -> CType | None:
        if self._vars is None:
            self._load()
        return self._structs.get(name)

    # ---------------------------------------------------------------- reading
    def _load(self) -> None:
        self._vars = {}
        try:
            with open(self.path, "rb") as f:
                elf = ELFFile(f)
                if not elf.has_dwarf_info():
                    return
                for cu in elf.get_dwarf_info().iter_CUs():
                    for die in cu.get_top_DIE().iter_children():
                        self._top(die)
        except (ELFError, OSError):
            return
        for t in self._decl:  # incomplete struct declarations: complete them by name
            full = self._structs.get(t.name)
            if full is not None and full is not t:
                t.size, t.fields = full.size, full.fields

    def _top(self, die: DIE) -> None:
        if die.tag == "DW_TAG_variable":
            loc = die.attributes.get("DW_AT_location")
            if loc is None or not isinstance(loc.value, list) or not loc.value:
                return
            expr = loc.value
            if expr[0] != DW_OP_ADDR or len(expr) < 9:
                return
            src = die
            if "DW_AT_specification" in die.attributes:
                src = die.get_DIE_from_attribute("DW_AT_specification")
            name = _name(src)
            if not name:
                return
            addr = int.from_bytes(bytes(expr[1:9]), "little")
            assert self._vars is not None
            self._vars[name] = Variable(name, addr, self._type_of(src))
        elif die.tag in ("DW_TAG_structure_type", "DW_TAG_union_type"):
            if _name(die) and "DW_AT_declaration" not in die.attributes:
                self._convert(die)
        elif die.tag == "DW_TAG_subprogram" and "DW_AT_low_pc" in die.attributes:
            src = die
            if "DW_AT_specification" in die.attributes:
                src = die.get_DIE_from_attribute("DW_AT_specification")
            elif "DW_AT_abstract_origin" in die.attributes:
                src = die.get_DIE_from_attribute("DW_AT_abstract_origin")
            if _name(src):
                self._returns[_name(src)] = self._type_of(src)

    def _type_of(self, die: DIE) -> CType:
        if "DW_AT_type" not in die.attributes:
            return VOID
        return self._convert(die.get_DIE_from_attribute("DW_AT_type"))

    def _convert(self, die: DIE) -> CType:
        hit = self._types.get(die.offset)
        if hit is not None:
            return hit
        tag = die.tag
        name = _name(die)
        size = die.attributes["DW_AT_byte_size"].value if "DW_AT_byte_size" in die.attributes else 0
        if tag in ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type",
                   "DW_TAG_restrict_type", "DW_TAG_atomic_type"):
            t = self._type_of(die)
            self._types[die.offset] = t
            return t
        if tag == "DW_TAG_base_type":
            enc = die.attributes.get("DW_AT_encoding")
            enc = enc.value if enc is not None else 0
            t = CType("base", name, size, signed=enc in (0x05, 0x06, 0x0D))  # signed, signed_char
        elif tag == "DW_TAG_pointer_type":
            t = CType("pointer", "", size or 8)
            self._types[die.offset] = t  # before the target: struct proc *parent in proc
            t.target = self._type_of(die)
            return t
        elif tag == "DW_TAG_array_type":
            return self._array(die)
        elif tag in ("DW_TAG_structure_type", "DW_TAG_union_type"):
            return self._struct(die, name, size)
        elif tag == "DW_TAG_enumeration_type":
            t = CType("enum", name, size or 4, signed=True)
            for e in die.iter_children():
                if e.tag == "DW_TAG_enumerator":
                    t.enumerators[e.attributes["DW_AT_const_value"].value] = _name(e)
        elif tag == "DW_TAG_subroutine_type":
            t = CType("func", "", 1)
        else:
            t = VOID
        self._types[die.offset] = t
        return t

    def _array(self, die: DIE) -> CType:
        t = CType("array", "", 0)
        self._types[die.offset] = t  # before the element type, as for a pointer
        t.target = self._type_of(die)
        count = None
        for sub in die.iter_children():
            if sub.tag == "DW_TAG_subrange_type":
                if "DW_AT_count" in sub.attributes:
                    count = sub.attributes["DW_AT_count"].value
                elif "DW_AT_upper_bound" in sub.attributes:
                    count = sub.attributes["DW_AT_upper_bound"].value + 1
                break
        t.count = count if isinstance(count, int) else None
        t.size = (t.count or 0) * t.target.size
        return t

    def _struct(self, die: DIE, name: str, size: int) -> CType:
        kind = "struct" if die.tag == "DW_TAG_structure_type" else "union"
        t = CType(kind, name, size)
        self._types[die.offset] = t
        if "DW_AT_declaration" in die.attributes:
            self._decl.append(t)
            return t
        if name:
            self._structs[name] = t
        for m in die.iter_children():
            if m.tag != "DW_TAG_member":
                continue
            loc = m.attributes.get("DW_AT_data_member_location")
            off = loc.value if loc is not None and isinstance(loc.value, int) else 0
            t.fields.append(Field(_name(m), off, self._type_of(m)))
        return t


def _name(die: DIE) -> str:
    a = die.attributes.get("DW_AT_name")
    if a is None:
        return ""
    v = a.value
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


# ---------------------------------------------------------------- values

def scalar(t: CType, data: bytes) -> int:
    """The integer value of a base, enum or pointer type's bytes."""
    return int.from_bytes(data[: t.size or len(data)], "little", signed=t.signed)


def c_string(data: bytes) -> str:
    """A C string's text up to its NUL, escaped like gdb does."""
    end = data.find(b"\0")
    raw = data if end < 0 else data[:end]
    out = []
    for b in raw:
        ch = chr(b)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append({10: "\\n", 9: "\\t", 13: "\\r"}.get(b, f"\\{b:03o}"))
    return '"' + "".join(out) + '"'
