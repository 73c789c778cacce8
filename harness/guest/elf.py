"""ELF images: loadable segments for the machine, symbols and source lines for reports.

pyelftools reads the file once; the symbol table is kept as a sorted list so that
`symbolize(addr)` is a bisection. DWARF line tables are decoded lazily, only when a
report asks for a source line.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

EM_RISCV = "EM_RISCV"


class ElfLoadError(Exception):
    """The file is missing or is not an rv64 executable the machine can load."""


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD segment: its bytes go to paddr, the rest up to memsz is zero."""

    paddr: int
    vaddr: int
    data: bytes
    memsz: int
    flags: str  # e.g. "R-X"


@dataclass(frozen=True)
class Symbol:
    name: str
    addr: int
    size: int


@dataclass
class ElfImage:
    """A loaded ELF file (kernel, test stub or user program)."""

    path: Path
    entry: int
    segments: list[Segment]
    symbols: list[Symbol]  # functions and objects, sorted by address
    _addrs: list[int] = field(default_factory=list, repr=False)
    _lines: list[tuple[int, str, int]] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: str | Path) -> ElfImage:
        path = Path(path)
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                if elf.header["e_machine"] != EM_RISCV or elf.elfclass != 64:
                    raise ElfLoadError(f"{path}: not an rv64 ELF file "
                                       f"({elf.header['e_machine']}, {elf.elfclass}-bit)")
                if elf.header["e_type"] != "ET_EXEC":
                    raise ElfLoadError(f"{path}: not an executable ({elf.header['e_type']})")
                segments = [
                    Segment(s["p_paddr"], s["p_vaddr"], s.data(), s["p_memsz"],
                            _flags(s["p_flags"]))
                    for s in elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_memsz"]]
                symbols = _symbols(elf)
                entry = elf.header["e_entry"]
        except FileNotFoundError:
            raise ElfLoadError(f"{path}: no such file") from None
        except (ELFError, OSError) as exc:
            raise ElfLoadError(f"{path}: cannot read ELF file: {exc}") from None
        if not segments:
            raise ElfLoadError(f"{path}: no loadable segments")
        img = cls(path, entry, segments, symbols)
        img._addrs = [s.addr for s in symbols]
        return img

    def symbol(self, name: str) -> int:
        """Address of a symbol by name (KeyError if absent)."""
        for s in self.symbols:
            if s.name == name:
                return s.addr
        raise KeyError(name)

    def lookup(self, addr: int) -> tuple[Symbol, int] | None:
        """(symbol containing addr, offset), or None. Size-0 symbols (assembly labels)
        cover addresses up to the next symbol, within the same loaded segment."""
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0:
            return None
        sym = self.symbols[i]
        if sym.size:
            return (sym, addr - sym.addr) if addr < sym.addr + sym.size else None
        for seg in self.segments:
            if seg.vaddr <= sym.addr < seg.vaddr + seg.memsz:
                return (sym, addr - sym.addr) if addr < seg.vaddr + seg.memsz else None
        return None

    def symbolize(self, addr: int) -> str:
        """"name+0x1c" for an address inside a known symbol, else ""."""
        hit = self.lookup(addr)
        if hit is None:
            return ""
        sym, off = hit
        return f"{sym.name}+{off:#x}" if off else sym.name

    def source_line(self, addr: int) -> str:
        """"file.c:123" for an address, from DWARF line tables, or "" without -g."""
        if self._lines is None:
            self._lines = _line_table(self.path)
        i = bisect.bisect_right(self._lines, (addr, "\uffff", 1 << 30)) - 1
        if i < 0:
            return ""
        a, fname, line = self._lines[i]
        hit = self.lookup(addr)
        if hit is None or a < hit[0].addr:  # the nearest row belongs to another function
            return ""
        return f"{fname}:{line}"

    def contains_code(self, addr: int) -> bool:
        """True if addr is inside an executable segment (by virtual address)."""
        return any(s.vaddr <= addr < s.vaddr + s.memsz and "X" in s.flags for s in self.segments)


def _flags(p_flags: int) -> str:
    return "".join(c if p_flags & bit else "-" for c, bit in
                   (("R", P_FLAGS.PF_R), ("W", P_FLAGS.PF_W), ("X", P_FLAGS.PF_X)))


def _symbols(elf: ELFFile) -> list[Symbol]:
    tab = elf.get_section_by_name(".symtab")
    if not isinstance(tab, SymbolTableSection):
        return []
    out: dict[int, Symbol] = {}
    for s in tab.iter_symbols():
        kind = s["st_info"]["type"]
        if not s.name or s["st_shndx"] == "SHN_UNDEF" or kind not in ("STT_FUNC", "STT_OBJECT",
                                                                     "STT_NOTYPE"):
            continue
        if kind == "STT_NOTYPE" and (s.name.startswith(".L") or s.name.startswith("$")):
            continue
        addr = s["st_value"]
        # prefer sized symbols (functions) over bare labels at the same address
        if addr not in out or (s["st_size"] and not out[addr].size):
            out[addr] = Symbol(s.name, addr, s["st_size"])
    return sorted(out.values(), key=lambda s: s.addr)


def _line_table(path: Path) -> list[tuple[int, str, int]]:
    rows: list[tuple[int, str, int]] = []
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return rows
            dwarf = elf.get_dwarf_info()
            for cu in dwarf.iter_CUs():
                lp = dwarf.line_program_for_CU(cu)
                if lp is None:
                    continue
                files = lp["file_entry"]
                base = 1 if lp.header["version"] < 5 else 0
                for entry in lp.get_entries():
                    st = entry.state
                    if st is None or st.end_sequence:
                        continue
                    idx = st.file - base
                    name = files[idx].name.decode() if 0 <= idx < len(files) else "?"
                    rows.append((st.address, name, st.line))
    except (ELFError, OSError, KeyError, IndexError):
        return []
    rows.sort()
    return rows
