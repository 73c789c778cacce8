"""An address's name in the kernel: the global it lies in and the member path inside it.

`kmem.freelist`, `proc[3].state`, `ai.sv.slot[1].ngenerated`: the ELF's object symbols
say which global (static ones too), the DWARF type of that global says which member.
Addresses in no global (a kalloc'd page: a pipe, a process's kernel stack) are named by
what they are not: "heap".
"""

from __future__ import annotations

import bisect

from harness.guest.dwarf import CType, DwarfInfo
from harness.guest.elf import ElfImage

MAX_DEPTH = 8


class DataNames:
    """The data symbols of one program image (built once, e.g. per race detector)."""

    def __init__(self, elf: ElfImage, dwarf: DwarfInfo) -> None:
        objs = [s for s in elf.symbols if s.size and not elf.contains_code(s.addr)]
        objs.sort(key=lambda s: s.addr)
        self._objs = objs
        self._addrs = [s.addr for s in objs]
        self._dwarf = dwarf

    def name(self, addr: int, outer: bool = False) -> str:
        """The member path of addr ("kmem.freelist"), "kmem+0x18" without a type, or
        "heap" outside every global."""
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0 or addr >= self._objs[i].addr + self._objs[i].size:
            return "heap"
        sym = self._objs[i]
        off = addr - sym.addr
        var = self._dwarf.variable(sym.name)
        if var is None or var.addr != sym.addr:
            return f"{sym.name}+{off:#x}" if off else sym.name
        return sym.name + member_path(var.type, off, outer)


def member_path(t: CType, off: int, outer: bool = False) -> str:
    """".sv.slot[1].ngenerated" for byte `off` of a value of type t; `outer`: the
    outermost member that starts there (a wait channel `proc[1]`, not `proc[1].lock.locked`)."""
    out = ""
    for _ in range(MAX_DEPTH):
        if outer and out and off == 0 and t.kind != "array":
            break
        if t.kind == "array" and t.target is not None and t.target.size:
            i, off = divmod(off, t.target.size)
            out += f"[{i}]"
            t = t.target
        elif t.kind in ("struct", "union") and t.fields:
            inside = [f for f in t.fields if f.offset <= off < f.offset + max(f.type.size, 1)]
            if not inside:
                break
            f = inside[-1]
            out += f".{f.name}"
            off -= f.offset
            t = f.type
        else:
            break
    return out + (f"+{off:#x}" if off and t.kind not in ("base", "pointer", "enum") else "")
