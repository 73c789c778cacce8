"""The programs of a guest: the kernel and the user programs, with their symbols,
line tables and types; and location specs, which name code in them.

User programs are all linked at virtual address 0 (user_c/user.ld), so an address alone
does not say which program it is in: a user location is (program, address), and a user
breakpoint fires only while a process running that program is on the CPU. The program
of a process is the ELF `build/user/_<name>` of its `proc.name` (exec sets it).

Location specs (break, tbreak, list, until):

    FUNC                 kernel function; else the user programs that define FUNC
    PROG:FUNC            FUNC in user program PROG (`sh:runcmd`); `kernel:FUNC` too
    FILE:LINE            a line (FILE a path suffix: proc.c, user_c/sh.c); every program
                         whose code has that line gets a location (ulib.c is in all)
    PROG:FILE:LINE       that line in one program only
    LINE                 a line of the current source file
    *ADDR                an address expression: kernel at kernel addresses, else the
                         current user program (or any, with no process on the CPU)
    PROG:*ADDR           an address in one user program
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harness.abi.vmlayout import TRAMPOLINE
from harness.guest import GuestError
from harness.guest.dwarf import DwarfInfo
from harness.guest.elf import ElfImage, ElfLoadError, Symbol
from harness.guest.lines import LineTable, Row
from harness.guest.locals import Scopes

PGSIZE = 4096


class Program:
    """One ELF: the kernel or a user program."""

    def __init__(self, name: str, path: Path, user: bool) -> None:
        self.name, self.path, self.user = name, path, user
        try:
            self.elf = ElfImage.load(path)
        except ElfLoadError as e:
            raise GuestError(str(e)) from None
        # ElfImage keeps one name per address; the STT_FILE names are the sources
        self._by_name, self._files = _all_symbols(path)
        # the trampoline page runs at TRAMPOLINE, not where it is linked
        self._tramp = None if user else self._by_name.get("trampoline")

    def __repr__(self) -> str:
        return f"Program({self.name})"

    @cached_property
    def lines(self) -> LineTable:
        return LineTable.load(self.path)

    @cached_property
    def dwarf(self) -> DwarfInfo:
        return DwarfInfo(self.path)

    @cached_property
    def scopes(self) -> Scopes:
        return Scopes(self.path, self.dwarf)

    def has_source(self, file: str) -> bool:
        """Could FILE (a path suffix) be one of this program's sources? (a cheap check on
        the symbol table's file names, before reading line tables)"""
        stem = file.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return stem in self._files

    @property
    def symbol_names(self) -> list[str]:
        return list(self._by_name)

    def symbol(self, name: str) -> Symbol | None:
        return self._by_name.get(name)

    def linked(self, addr: int) -> int:
        """The link-time address of addr (the trampoline page runs at TRAMPOLINE)."""
        if self._tramp is not None and TRAMPOLINE <= addr < TRAMPOLINE + PGSIZE:
            return addr - TRAMPOLINE + self._tramp.addr
        return addr

    def runtime(self, addr: int) -> int:
        """Where code linked at addr runs (the inverse of `linked`)."""
        t = self._tramp
        if t is not None and t.addr <= addr < t.addr + PGSIZE:
            return addr - t.addr + TRAMPOLINE
        return addr

    def function(self, addr: int) -> tuple[Symbol, int] | None:
        """(symbol, offset) of the code at addr."""
        return self.elf.lookup(self.linked(addr))

    def has_code(self, addr: int) -> bool:
        return self.elf.contains_code(self.linked(addr))

    def describe(self, addr: int) -> str:
        """"sym+0x1c" or ""."""
        return self.elf.symbolize(self.linked(addr))

    def row(self, addr: int) -> Row | None:
        """The line-table row of addr, from the function's own file where it has one."""
        a = self.linked(addr)
        hit = self.elf.lookup(a)
        home = None
        if hit is not None:
            first = self.lines.row_at(hit[0].addr)
            home = first.file if first is not None else None
        return self.lines.row_at(a, home)

    def where(self, addr: int) -> str:
        """"file:line" of addr or ""."""
        r = self.row(addr)
        return f"{r.file}:{r.line}" if r else ""

    def after_prologue(self, sym: Symbol) -> int:
        """Where `break FUNC` stops: past the standard prologue (frame allocation,
        register saves, s0 = sp + N) and to the end of the function's opening line in the
        line table, as gdb does, but never past the first call; the entry itself for
        assembly functions."""
        end = sym.addr + max(sym.size, 1)
        rows = self.lines.function_rows(sym.addr, end)
        if rows and rows[0].file.endswith((".S", ".s")):
            return sym.addr  # assembly: no compiler prologue to skip
        pos = sym.addr
        while pos < end:
            got = self.code(pos)
            if got is None or not _is_prologue(*got):
                break
            pos += got[1]
        if rows and rows[0].addr == sym.addr:
            first = rows[0]
            later = [r.addr for r in rows if r.addr > sym.addr and r.line != first.line
                     and r.file == first.file]
            while later and pos < min(later[0], end):
                got = self.code(pos)
                if got is None or _is_call(*got):
                    break
                pos += got[1]
        return pos

    def code(self, addr: int) -> tuple[int, int] | None:
        """(instruction bits, length) at a link-time address, from the ELF file."""
        for seg in self.elf.segments:
            off = addr - seg.vaddr
            if 0 <= off and off + 2 <= len(seg.data):
                half = int.from_bytes(seg.data[off : off + 2], "little")
                if half & 3 != 3:
                    return half, 2
                if off + 4 <= len(seg.data):
                    return int.from_bytes(seg.data[off : off + 4], "little"), 4
        return None


@dataclass(frozen=True)
class Location:
    """A code address in one program (program None: any user program, for raw user
    addresses and GDB's breakpoints, which carry no program)."""

    program: Program | None
    addr: int
    line: int | None = None  # the line a FILE:LINE spec asked for (after gdb's move)

    @property
    def kernel(self) -> bool:
        return self.program is not None and not self.program.user

    def describe(self) -> str:
        p = self.program
        if p is None:
            return f"{self.addr:#x} (any process)"
        where = p.where(self.addr)
        row = p.row(self.addr)
        if self.line is not None and row is not None:
            where = f"{row.file}:{self.line}"
        sym = p.describe(self.addr)
        out = f"{self.addr:#x}"
        if p.user:
            out += f" in {p.name}"
        if sym:
            out += f" <{sym}>"
        if where:
            file, line = where.rsplit(":", 1)
            out += f": file {file}, line {line}"
        return out


class Programs:
    """The kernel plus every user program of a build directory (loaded on demand)."""

    def __init__(self, kernel: Path, user_dir: Path | None) -> None:
        self.kernel = Program("kernel", kernel, user=False)
        self.user_dir = user_dir
        self._user: dict[str, Program | None] = {}

    def user_names(self) -> list[str]:
        if self.user_dir is None or not self.user_dir.is_dir():
            return []
        return sorted(p.name[1:] for p in self.user_dir.glob("_*") if p.is_file())

    def user(self, name: str) -> Program | None:
        """The user program called name (as proc.name spells it), or None."""
        if name not in self._user:
            path = self.user_dir / f"_{name}" if self.user_dir else None
            self._user[name] = Program(name, path, user=True) if path and path.is_file() else None
        return self._user[name]

    def users(self) -> list[Program]:
        return [p for p in (self.user(n) for n in self.user_names()) if p is not None]

    def get(self, name: str) -> Program | None:
        return self.kernel if name == "kernel" else self.user(name)

    # ---------------------------------------------------------------- location specs
    def resolve(self, spec: str, current: Program | None, current_file: str | None,
                eval_addr) -> list[Location]:  # noqa: ANN001 - eval_addr(str) -> int
        """The locations a spec names (see the module docstring); GuestError if none."""
        spec = spec.strip()
        if not spec:
            raise GuestError("no location given")
        prog: Program | None = None
        m = re.match(r"([A-Za-z_][\w.-]*):(?=[*A-Za-z_/.\d])(.*)$", spec)
        if m and not re.search(r"\.[chSs]$", m.group(1)) and self.get(m.group(1)) is not None:
            prog = self.get(m.group(1))
            spec = m.group(2)
        elif m and not re.search(r"\.[chSs]$", m.group(1)) and not m.group(2).isdigit():
            raise GuestError(f"No program \"{m.group(1)}\" (programs: kernel, "
                             f"{', '.join(self.user_names())})")
        if spec.startswith("*"):
            addr = eval_addr(spec[1:])
            if prog is None:
                if self.kernel.has_code(addr):
                    prog = self.kernel
                elif current is not None and current.user:
                    prog = current
            return [Location(prog, addr)]
        m = re.fullmatch(r"(.+):(\d+)", spec)
        if m:
            return self._file_line(m.group(1), int(m.group(2)), prog)
        if spec.isdigit():
            if current_file is None or current is None:
                raise GuestError("No current source file; give FILE:LINE")
            return self._file_line(current_file, int(spec), current)
        return self._function(spec, prog, current)

    def _file_line(self, file: str, line: int, prog: Program | None) -> list[Location]:
        if prog is not None:
            progs = [prog]
        elif self.kernel.lines.match_file(file):
            progs = [self.kernel]  # kernel sources are not linked into user programs
        else:
            progs = [p for p in self.users() if p.has_source(file)]
        out: list[Location] = []
        known = False
        for p in progs:
            for f in p.lines.match_file(file):
                known = True
                found, addrs = p.lines.line_addresses(f, line)
                # one location per function, at its lowest address (as gdb does)
                seen: set[str] = set()
                for a in addrs:
                    fn = p.describe(a).split("+")[0]
                    if fn not in seen:
                        seen.add(fn)
                        out.append(Location(p, p.runtime(a), found))
        if not known:
            where = f" in {prog.name}" if prog is not None else ""
            raise GuestError(f"No source file named {file}{where}.")
        if not out:
            raise GuestError(f"No line {line} in file \"{file}\" (no code at or after it).")
        return out

    def _function(self, name: str, prog: Program | None, current: Program | None) -> list[Location]:
        if prog is not None:
            progs = [prog]
        elif self.kernel.symbol(name) is not None:
            progs = [self.kernel]
        elif current is not None and current.user and current.symbol(name) is not None:
            progs = [current]
        else:
            progs = [p for p in self.users() if p.symbol(name) is not None]
        out = []
        for p in progs:
            sym = p.symbol(name)
            if sym is not None:
                addr = p.after_prologue(sym) if sym.size else sym.addr
                out.append(Location(p, p.runtime(addr)))
        if not out:
            where = f" in {prog.name}" if prog is not None else ""
            raise GuestError(f"Function \"{name}\" not defined{where}.")
        return out


def _is_prologue(bits: int, n: int) -> bool:
    """addi sp,sp,-N / sd reg,N(sp) / addi s0,sp,N and their compressed forms."""
    if n == 4:
        return (bits & 0xFFFFF == 0x10113 and bits >> 31 == 1          # addi sp, sp, -N
                or bits & 0xF_F07F == 0x1_3023                          # sd rs2, N(sp)
                or bits & 0xFFFFF == 0x10413)                           # addi s0, sp, N
    return (bits & 0xEF83 in (0x0101, 0x6101) and bits & 0x1000 != 0   # c.addi(16)sp -N
            or bits & 0xE003 == 0xE002                                  # c.sdsp
            or bits & 0xE01F == 0 and bits != 0)                        # c.addi4spn s0


def _is_call(bits: int, n: int) -> bool:
    if n == 4:
        return bits & 0x7F in (0x6F, 0x67) and (bits >> 7) & 31 != 0
    return bits & 0xF07F == 0x9002 and bits != 0x9002


def _all_symbols(path: Path) -> tuple[dict[str, Symbol], set[str]]:
    """Every named function/object/label of an ELF by name (sized symbols win), and the
    source file names of its STT_FILE symbols."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    out: dict[str, Symbol] = {}
    files: set[str] = set()
    with open(path, "rb") as f:
        tab = ELFFile(f).get_section_by_name(".symtab")
        if not isinstance(tab, SymbolTableSection):
            return out, files
        for s in tab.iter_symbols():
            kind = s["st_info"]["type"]
            if kind == "STT_FILE":
                files.add(s.name.rsplit("/", 1)[-1].rsplit(".", 1)[0])  # usys.S: usys.o
                continue
            if (not s.name or s["st_shndx"] == "SHN_UNDEF" or s.name.startswith((".L", "$"))
                    or kind not in ("STT_FUNC", "STT_OBJECT", "STT_NOTYPE")):
                continue
            old = out.get(s.name)
            if old is None or (s["st_size"] and not old.size):
                out[s.name] = Symbol(s.name, s["st_value"], s["st_size"])
    return out, files
