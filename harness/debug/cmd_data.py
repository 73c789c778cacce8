"""Commands that look at and change data: print, set, x, disassemble."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from harness.debug import DebugError
from harness.debug.cmdbase import PER_LINE, SIZES, CommandBase
from harness.debug.disasm import disassemble
from harness.debug.expr import CSR_REGS, REGISTERS
from harness.debug.values import format_value
from harness.guest.programs import Program


class DataCommands(CommandBase):
    """print, set, x, disassemble."""

    # ---------------------------------------------------------------- data
    def cmd_print(self, arg: str) -> str:
        """print[/FMT] EXPR: an expression's value (FMT: x d u o t c a)."""
        fmt, expr = self._fmt(arg)
        if not expr:
            raise DebugError("Argument required (expression to compute).")
        ev = self.evaluator()
        text = format_value(ev, ev.evaluate(expr), fmt)
        self.history.append(text)
        return f"${len(self.history)} = {text}"

    def _fmt(self, arg: str) -> tuple[str | None, str]:
        if arg.startswith("/"):
            m = re.match(r"/([xduotca])\s*(.*)$", arg)
            if not m:
                raise DebugError(f"Undefined output format \"{arg.split()[0][1:]}\".")
            return m.group(1), m.group(2)
        return None, arg

    def cmd_set(self, arg: str) -> str:
        """set var EXPR = VALUE, set $REG = VALUE: change memory or a register."""
        m = re.match(r"(?:var(?:iable)?\s+)?(.+?)\s*=\s*(.+)$", arg)
        if not m:
            raise DebugError("set var EXPR = VALUE, or set $REG = VALUE")
        lhs, rhs = m.group(1).strip(), m.group(2).strip()
        ev = self.evaluator()
        value = ev.integer(rhs)
        if lhs.startswith("$"):
            name = lhs[1:]
            h = self.t.hart
            if name in REGISTERS:
                h.set(REGISTERS[name], value)
            elif name in CSR_REGS:
                h.set_csr(CSR_REGS[name], value)
            else:
                raise DebugError(f"No register ${name}.")
        else:
            target = ev.evaluate(lhs)
            t = target.type
            if target.addr is None or t is None or t.kind not in ("base", "enum", "pointer"):
                raise DebugError(f"Left operand of assignment is not a modifiable scalar: {lhs}")
            data = (value & ((1 << (8 * t.size)) - 1)).to_bytes(t.size, "little")
            self.t.write(target.addr, data, target.space)
        self._frames = None
        self._locals = None
        return ""

    def cmd_x(self, arg: str) -> str:
        """x/NFU ADDR: examine memory. N count, F format (x d u o t a c s i), U size
        (b h w g). Addresses go through the current page table; kernel addresses also
        work from user mode and, from the kernel, user addresses are read in the current
        process's page table. Device memory is never read."""
        m = re.match(r"/(\d*)([xduotacsi]?)([bhwg]?)([xduotacsi]?)\s*(.*)$", arg)
        count, fmt, size = 1, self.x_fmt, self.x_size
        expr = arg
        if m:
            count = int(m.group(1)) if m.group(1) else 1
            fmt = m.group(2) or m.group(4) or fmt
            implied = {"a": 8, "c": 1}.get(fmt) if m.group(2) or m.group(4) else None
            size = SIZES[m.group(3)] if m.group(3) else (implied or size)
            expr = m.group(5)
        ev = self.evaluator()
        if expr:
            addr, v = ev.address(expr)
            # an object or a pointer lives in its program's space; a plain number is
            # looked up by target.read's rules (current, kernel, current process)
            typed = v.type is not None and v.type.kind in ("array", "struct", "union",
                                                          "func", "pointer")
            space = v.space if typed else None
        elif self.x_next is not None:
            addr, space = self.x_next, None
        else:
            raise DebugError("Argument required (starting display address).")
        self.x_fmt = fmt
        if fmt not in "si":
            self.x_size = size
        prog = self.context_program()
        if fmt == "i":
            return self._x_insns(addr, count, space, prog)
        if fmt == "s":
            return self._x_strings(addr, count, space, prog)
        data = self.t.read(addr, count * size, space)
        lines = []
        per = PER_LINE[size] if fmt not in "ac" else (2 if fmt == "a" else 8)
        for i in range(0, count, per):
            cells = []
            for j in range(i, min(count, i + per)):
                word = int.from_bytes(data[j * size : (j + 1) * size], "little")
                cells.append(self._x_cell(word, fmt, size, prog))
            a = addr + i * size
            lines.append(f"{a:#x}{self._sym_tag(prog, a)}:\t" + "\t".join(cells))
        self.x_next = addr + count * size
        return "\n".join(lines)

    def _x_insns(self, addr: int, count: int, space: Any, prog: Program | None) -> str:
        """x/Ni: N instructions disassembled."""
        fetch = (space.fetch if space is not None else self._fetch_any)
        insns = disassemble(fetch, addr, count, self._symbolizer(prog))
        if not insns:
            raise DebugError(f"Cannot access memory at address {addr:#x}")
        self.x_next = insns[-1].addr + insns[-1].size
        return "\n".join(i.line(self._sym(prog, i.addr), i.addr == self.t.pc) for i in insns)

    def _x_strings(self, addr: int, count: int, space: Any, prog: Program | None) -> str:
        """x/Ns: N NUL-terminated strings (at most 4 KiB each)."""
        from harness.guest.dwarf import c_string

        out = []
        for _ in range(count):
            raw = bytearray()
            while len(raw) < 4096:
                b = self.t.read(addr + len(raw), 1, space)
                if b == b"\0":
                    break
                raw += b
            out.append(f"{addr:#x}{self._sym_tag(prog, addr)}:\t{c_string(bytes(raw))}")
            addr += len(raw) + 1
        self.x_next = addr
        return "\n".join(out)

    def _x_cell(self, v: int, fmt: str, size: int, prog: Program | None) -> str:
        bits = 8 * size
        if fmt == "x":
            return f"0x{v:0{2 * size}x}"
        if fmt == "d":
            return str(v - (1 << bits) if v >> (bits - 1) else v)
        if fmt == "u":
            return str(v)
        if fmt == "o":
            return f"0{v:o}"
        if fmt == "t":
            return f"{v:0{bits}b}"
        if fmt == "c":
            c = v & 0xFF
            return f"{c} '{chr(c)}'" if 32 <= c < 127 else f"{c} '\\{c:03o}'"
        return f"{v:#x}{self._sym_tag(prog, v)}"  # a

    def cmd_disassemble(self, arg: str) -> str:
        """disassemble [FUNC | ADDR | START,END | START,+LEN]: the function around the
        PC by default; branch targets resolved and symbolised."""
        prog = self.context_program()
        ev = self.evaluator()
        if "," in arg:
            a, b = (s.strip() for s in arg.split(",", 1))
            start = ev.integer(a)
            end = start + ev.integer(b[1:]) if b.startswith("+") else ev.integer(b)
            title = f"Dump of assembler code from {start:#x} to {end:#x}:"
        else:
            if arg:
                try:
                    locs = self.programs.resolve(arg if ":" in arg and not arg.startswith("*")
                                                 else arg, prog, None, ev.integer)
                    prog, pc = locs[0].program or prog, locs[0].addr
                except DebugError:
                    pc = ev.integer(arg)
            else:
                f = self.selected()
                if f is None or f.pc is None:
                    raise DebugError("No frame selected.")
                prog, pc = f.program, f.lookup_pc or 0
            if pc >= 0x80000000 or prog is None:
                prog = self.programs.kernel if self.programs.kernel.function(pc) else prog
            hit = prog.function(pc) if prog is not None else None
            if hit is None:
                raise DebugError(f"No function contains specified address {pc:#x}.")
            sym = hit[0]
            start = pc - hit[1]
            size = sym.size or next((s.addr for s in prog.elf.symbols if s.addr > sym.addr),
                                    sym.addr + 0x100) - sym.addr  # an assembly label
            end = start + min(size, 0x1000)
            title = f"Dump of assembler code for function {sym.name}:"
        fetch = self._code_fetch(prog)
        insns = disassemble(fetch, start, 100_000, self._symbolizer(prog), end)
        if not insns:
            raise DebugError(f"Cannot access memory at address {start:#x}")
        pc_now = self.t.pc if self.t.alive else None
        body = []
        for i in insns:
            name = self._sym(prog, i.addr)
            rel = name[name.index("+"):] if "+" in name else "+0"
            body.append(i.line(f"{rel}" if title.endswith(":") and "function" in title else name,
                               marker=i.addr == pc_now and prog is self.t.program_at()))
        return "\n".join([title, *body, "End of assembler dump."])

    def _code_fetch(self, prog: Program | None) -> Callable[[int], tuple[int, int] | None]:
        """Instructions from memory where the program runs, else from its ELF file."""
        if prog is None:
            return self._fetch_any
        try:
            space = self.t.space_for(prog)
        except DebugError:
            space = None

        def fetch(addr: int) -> tuple[int, int] | None:
            got = space.fetch(addr) if space is not None else None
            return got if got is not None else prog.code(prog.linked(addr))
        return fetch
