"""DWARF line tables: which source line an address belongs to, and back.

Every row of the line program is kept with its `is_stmt` flag: a statement start is
where `step`/`next` may stop and where `break file:line` goes. File names are shown
relative to the compilation directory ("kernel_c/proc.c", "user_c/sh.c"), as the
Makefiles pass them to gcc; `source_path` finds the file on disk.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile


@dataclass(frozen=True)
class Row:
    """One line-table row: code from addr (to the next row) belongs to file:line."""

    addr: int
    file: str
    line: int
    stmt: bool


class LineTable:
    """The line rows of one ELF file, sorted by address."""

    def __init__(self, rows: list[Row], ends: list[tuple[int, int]], comp_dirs: list[str]) -> None:
        self.rows = rows
        self._addrs = [r.addr for r in rows]
        self._ends = ends  # (start, end) of each sequence, sorted
        self._stmt = {r.addr for r in rows if r.stmt}
        self.comp_dirs = comp_dirs
        self.files = sorted({r.file for r in rows})

    @classmethod
    def load(cls, path: Path) -> LineTable:
        """Read the line programs of every compilation unit (empty without -g)."""
        rows: list[tuple[int, int, str, int, bool]] = []
        ends: list[tuple[int, int]] = []
        dirs: list[str] = []
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                if not elf.has_dwarf_info():
                    return cls([], [], [])
                dwarf = elf.get_dwarf_info()
                for cu in dwarf.iter_CUs():
                    lp = dwarf.line_program_for_CU(cu)
                    if lp is None:
                        continue
                    comp = cu.get_top_DIE().attributes.get("DW_AT_comp_dir")
                    comp_dir = comp.value.decode() if comp else ""
                    if comp_dir and comp_dir not in dirs:
                        dirs.append(comp_dir)
                    names = _file_names(lp, comp_dir)
                    base = 1 if lp.header["version"] < 5 else 0
                    start = None
                    for entry in lp.get_entries():
                        st = entry.state
                        if st is None:
                            continue
                        if st.end_sequence:
                            if start is not None:
                                ends.append((start, st.address))
                            start = None
                            continue
                        if start is None:
                            start = st.address
                        idx = st.file - base
                        name = names[idx] if 0 <= idx < len(names) else "?"
                        rows.append((st.address, len(rows), name, st.line, bool(st.is_stmt)))
        except (ELFError, OSError, KeyError, IndexError):
            return cls([], [], [])
        rows.sort()  # by address, program order within one address
        ends.sort()
        return cls([Row(a, f, ln, s) for a, _, f, ln, s in rows], ends, dirs)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def _in_sequence(self, addr: int) -> bool:
        i = bisect.bisect_right(self._ends, (addr, 1 << 64)) - 1
        return i >= 0 and self._ends[i][0] <= addr < self._ends[i][1]

    def row_at(self, addr: int, prefer_file: str | None = None) -> Row | None:
        """The row covering addr: the last one at the highest address <= addr, or the
        last there from prefer_file (at -O2 a function's rows and those of the helpers
        inlined into it share addresses)."""
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0 or not self._in_sequence(addr):
            return None
        if prefer_file is not None:
            j, a = i, self._addrs[i]
            while j >= 0 and self._addrs[j] == a:
                if self.rows[j].file == prefer_file:
                    return self.rows[j]
                j -= 1
        return self.rows[i]

    def is_stmt_start(self, addr: int) -> bool:
        return addr in self._stmt

    def match_file(self, name: str) -> list[str]:
        """Files of this table that `name` designates (a path suffix: "proc.c",
        "kernel_c/proc.c" or an absolute path)."""
        name = name.lstrip("./") if not name.startswith("/") else name
        out = []
        for f in self.files:
            rooted = self.comp_dirs and not f.startswith("/")
            full = f"{self.comp_dirs[0]}/{f}" if rooted else f
            if f == name or full == name or f.endswith("/" + name):
                out.append(f)
        return out

    def line_addresses(self, file: str, line: int) -> tuple[int, list[int]]:
        """(line, statement addresses) for file:line; a line without code moves to the
        next line that has some, as gdb does. ([] if no later line has code.)"""
        lines = sorted({r.line for r in self.rows if r.file == file and r.stmt and r.line >= line})
        if not lines:
            return line, []
        best = lines[0]
        return best, sorted({r.addr for r in self.rows
                             if r.file == file and r.line == best and r.stmt})

    def function_rows(self, start: int, end: int) -> list[Row]:
        i = bisect.bisect_left(self._addrs, start)
        j = bisect.bisect_left(self._addrs, end)
        return self.rows[i:j]

    def source_path(self, file: str) -> Path | None:
        """Where the source file is on disk, or None."""
        p = Path(file)
        cands = [p] if p.is_absolute() else [Path(d) / p for d in self.comp_dirs]
        for c in cands:
            if c.is_file():
                return c
        return None


def _file_names(lp: object, comp_dir: str) -> list[str]:
    """File names of a line program, relative to comp_dir where possible."""
    header = lp.header  # type: ignore[attr-defined]
    dirs = [d.decode() if isinstance(d, bytes) else str(d) for d in header["include_directory"]]
    version = header["version"]
    out = []
    for fe in header["file_entry"]:
        name = fe.name.decode() if isinstance(fe.name, bytes) else str(fe.name)
        di = fe.dir_index
        if version < 5:
            d = dirs[di - 1] if 0 < di <= len(dirs) else ""
        else:
            d = dirs[di] if 0 <= di < len(dirs) else ""
        if not name.startswith("/") and d:
            name = f"{d}/{name}"
        if comp_dir and name.startswith(comp_dir + "/"):
            name = name[len(comp_dir) + 1 :]
        out.append(name)
    return out
