"""The kernel's intended races: the records of kernel_c/racy.h, read from the ELF.

`DATA_RACE_OK(var, why)` records {&var, sizeof var, why} in section .data_race_var,
`DATA_RACE_NEXT_LINE(why)` records {__FILE__, line, why} in .data_race_line. The record
layouts come from the kernel's DWARF (struct data_race_var, struct data_race_line), the
strings from its read-only data. A kernel without the sections has no intended races.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

from harness.guest.dwarf import DwarfInfo
from harness.guest.elf import ElfImage


@dataclass
class Intended:
    ranges: list[tuple[int, int, str]] = field(default_factory=list)   # [lo, hi), why
    lines: dict[tuple[str, int], str] = field(default_factory=dict)     # (file, line): why

    def var(self, pa: int, n: int) -> str | None:
        for lo, hi, why in self.ranges:
            if pa < hi and pa + n > lo:
                return why
        return None

    def line(self, where: str) -> str | None:
        """The reason for a "file.c:123" site, if marked."""
        file, _, line = where.rpartition(":")
        if not line.isdigit():
            return None
        return self.lines.get((os.path.basename(file), int(line)))


def load(path: Path, elf: ElfImage, dwarf: DwarfInfo) -> Intended:
    out = Intended()
    with open(path, "rb") as f:
        e = ELFFile(f)
        sections = {s.name: s.data() for s in e.iter_sections()
                    if s.name in (".data_race_var", ".data_race_line")}
    for name, struct, first in ((".data_race_var", "data_race_var", "addr"),
                                (".data_race_line", "data_race_line", "file")):
        data = sections.get(name)
        t = dwarf.struct(struct)
        if not data or t is None or not t.size:
            continue
        offs = {f.name: f.offset for f in t.fields}
        for i in range(0, len(data) - t.size + 1, t.size):
            rec = data[i : i + t.size]

            def word(member: str, rec: bytes = rec, offs: dict[str, int] = offs) -> int:
                return int.from_bytes(rec[offs[member] : offs[member] + 8], "little")

            why = _string(elf, word("why"))
            if first == "addr":
                lo = word("addr")
                out.ranges.append((lo, lo + word("size"), why))
            else:
                file = os.path.basename(_string(elf, word("file")))
                out.lines[(file, word("line"))] = why
    return out


def _string(elf: ElfImage, addr: int) -> str:
    for seg in elf.segments:
        if seg.vaddr <= addr < seg.vaddr + len(seg.data):
            raw = seg.data[addr - seg.vaddr : addr - seg.vaddr + 512]
            return raw.split(b"\0", 1)[0].decode(errors="replace")
    return ""
