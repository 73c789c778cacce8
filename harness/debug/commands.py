"""The command interpreter of `harness debug`: gdb's commands, one method each.

`Interpreter.execute(line)` runs one command and returns its output as text (a
DebugError carries the message of a command that failed), so tests and the GDB stub's
`monitor` command drive it exactly as the prompt does. Commands may be abbreviated to
any unique prefix, and gdb's short aliases work (b, c, s, n, si, ni, bt, p, x, l, i r).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.debug import DebugError, stepping
from harness.debug.breakpoints import Breakpoint, Watchpoint
from harness.debug.disasm import disassemble
from harness.debug.dwarf import CType
from harness.debug.expr import CSR_REGS, REGISTERS, Evaluator, Value
from harness.debug.frames import Frame, backtrace, process_backtrace
from harness.debug.locals import Local, evaluate
from harness.debug.programs import Program
from harness.debug.target import Stop, Target, describe_end
from harness.debug.values import _bytes, format_value
from harness.debug.vmem import flags_text, satp_root
from harness.hart import ABI_NAMES, PRIV_U
from harness.machine import ML
from harness.traps import cause_name

LIST_LINES = 10
KERNBASE = ML["KERNBASE"]
SIZES = {"b": 1, "h": 2, "w": 4, "g": 8}
PER_LINE = {1: 8, 2: 8, 4: 4, 8: 2}
ALIASES = {"b": "break", "br": "break", "tb": "tbreak", "d": "delete", "c": "continue",
           "cont": "continue", "r": "run", "s": "step", "n": "next", "si": "stepi",
           "ni": "nexti", "fin": "finish", "p": "print", "bt": "backtrace",
           "where": "backtrace", "l": "list", "i": "info", "f": "frame", "q": "quit",
           "disas": "disassemble", "h": "help", "u": "until", "inspect": "print"}
INFO_SUBCOMMANDS = ("breakpoints", "watchpoints", "registers", "all-registers", "proc",
                    "frame", "symbol", "line", "mem", "programs", "source", "locals", "args")
SSTATUS_BITS = (("SIE", 1), ("SPIE", 5), ("UBE", 6), ("SPP", 8), ("SUM", 18), ("MXR", 19))
SIE_BITS = (("SSIE", 1), ("STIE", 5), ("SEIE", 9))
SIP_BITS = (("SSIP", 1), ("STIP", 5), ("SEIP", 9))


@dataclass
class ListPos:
    program: Program
    file: str
    line: int  # next line `list` prints


class Interpreter:
    """gdb-style commands over one Target."""

    def __init__(self, target: Target, send_input: Callable[[bytes], None] | None = None) -> None:
        self.t = target
        self.programs = target.programs
        self.send_input = send_input or target.m.send_input
        self.frame_no = 0
        self._frames: list[Frame] | None = None
        self._locals: list[tuple[Local, Value | None]] | None = None
        self.list_pos: ListPos | None = None
        self.x_fmt, self.x_size = "x", 4
        self.x_next: int | None = None
        self.history: list[str] = []  # print's $1, $2, ...
        self.last_stop: Stop | None = None
        self._sources: dict[Path, list[str]] = {}
        self.quit_requested = False
        target.bps.condition_eval = lambda text: self.evaluator().truth(text)
        self.commands: dict[str, Callable[[str], str]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("cmd_")}

    # ---------------------------------------------------------------- dispatch
    def execute(self, line: str) -> str:
        line = line.strip()
        if not line or line.startswith("#"):
            return ""
        m = re.match(r"([A-Za-z-]+)(.*)$", line)
        if not m:
            raise DebugError(f'Undefined command: "{line}".  Try "help".')
        word, arg = m.group(1), m.group(2)
        return self.commands[self.resolve(word)](arg.strip() if not arg.startswith("/") else arg)

    def resolve(self, word: str) -> str:
        """The command a word names: exact, alias, or unique prefix."""
        word = word.lower()
        if word in self.commands:
            return word
        if word in ALIASES:
            return ALIASES[word]
        hits = [c for c in self.commands if c.startswith(word)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise DebugError(f'Ambiguous command "{word}": {", ".join(sorted(hits))}.')
        raise DebugError(f'Undefined command: "{word}".  Try "help".')

    # ---------------------------------------------------------------- context
    def context_program(self) -> Program | None:
        f = self.selected()
        return f.program if f is not None else self.t.program_at()

    def evaluator(self) -> Evaluator:
        return Evaluator(self.t, self.context_program() or self.programs.kernel,
                         self._local if self.frame_no == 0 else None)

    def frame_locals(self) -> list[tuple[Local, Value | None]]:
        """Frame #0's variables in scope with their values (None: optimized out)."""
        if self._locals is not None:
            return self._locals
        self._locals = []
        f = self.frames()[0] if self.frames() else None
        if f is None or f.program is None or f.pc is None:
            return self._locals
        prog = f.program
        found = prog.scopes.at(prog.linked(f.pc))
        if found is None:
            return self._locals
        h = self.t.hart
        cfa = self._cfa(prog, f.pc)
        space = self.t.space()
        for loc in found[1]:
            place = evaluate(loc.ops, h.x, cfa, space.read_u64) if loc.ops else None
            value: Value | None = None
            if place is not None and place.kind == "addr":
                value = Value(loc.type, place.value, space=space, program=prog)
            elif place is not None and (place.kind == "value" or place.value < 32):
                raw = h.x(place.value) if place.kind == "reg" else place.value
                if loc.type.kind in ("base", "enum", "pointer"):
                    value = Value(loc.type, raw=raw, space=space, program=prog)
            self._locals.append((loc, value))
        return self._locals

    def _cfa(self, prog: Program, pc: int) -> int:
        """The frame's CFA: s0 once the prologue has set it, before that sp plus what
        the prologue has allocated so far."""
        from harness.report import _sp_allocation, in_prologue

        h = self.t.hart
        if not in_prologue(h, prog.elf, pc):
            return h.x(8)
        hit = prog.function(pc)
        pos = pc - hit[1] if hit else pc
        while pos < pc:
            got = h.fetch(pos)
            if got is None:
                break
            size = _sp_allocation(*got)
            if size is not None:
                return h.x(2) + size
            pos += got[1]
        return h.x(2)

    def _local(self, name: str) -> Value | None:
        for loc, value in self.frame_locals():
            if loc.name == name:
                if value is None:
                    raise DebugError(f"{name} is <optimized out> here.")
                return value
        return None

    def frames(self) -> list[Frame]:
        if self._frames is None:
            self._frames = backtrace(self.t)
        return self._frames

    def selected(self) -> Frame | None:
        fr = self.frames()
        return fr[self.frame_no] if 0 <= self.frame_no < len(fr) else None

    def _stopped(self, stop: Stop) -> None:
        self.last_stop = stop
        self.frame_no = 0
        self._frames = None
        self._locals = None
        self.x_next = None
        f = self.selected() if stop.result is None else None
        if f is not None and f.program is not None and f.pc is not None:
            row = f.program.row(f.pc)
            if row is not None:
                self.list_pos = ListPos(f.program, row.file, max(1, row.line - 5))

    # ---------------------------------------------------------------- describing places
    def source_line(self, prog: Program, file: str, line: int) -> str | None:
        path = prog.lines.source_path(file)
        if path is None:
            return None
        if path not in self._sources:
            self._sources[path] = path.read_text(errors="replace").splitlines()
        lines = self._sources[path]
        return lines[line - 1] if 0 < line <= len(lines) else None

    def frame_line(self, f: Frame, with_pc: bool | None = None) -> str:
        """"#1  0x800033f6 in syscall () at kernel_c/syscall.c:187"."""
        if f.pc is None:
            return f"#{f.level:<2} ?? (return address not saved: a leaf, or stopped in a prologue)"
        prog = f.program
        at_start = (f.exact and prog is not None
                    and prog.lines.is_stmt_start(prog.linked(f.pc)))
        show_pc = (not at_start) if with_pc is None else with_pc
        head = f"{f.pc:#x} in " if show_pc else ""
        where = f.where()
        out = f"#{f.level:<2} {head}{f.function()} ()" + (f" at {where}" if where else "")
        if f.trap:
            out += "  <- interrupted here (trap)"
        if f.entry is not None:
            out += f"  [user: pid {f.entry.pid} ({f.entry.name})]"
        return out

    def location_text(self, f: Frame, header: bool) -> str:
        """What a stop shows: the function line (if header) and the source line."""
        prog = f.program
        out = []
        row = prog.row(f.pc) if prog is not None and f.pc is not None else None
        if header or row is None:
            out.append(self.frame_line(f, with_pc=False if row is not None else None)[4:])
        if row is not None:
            text = self.source_line(prog, row.file, row.line)  # type: ignore[arg-type]
            at_start = prog.lines.is_stmt_start(prog.linked(f.pc))  # type: ignore[union-attr,arg-type]
            lead = "" if at_start or header else f"{f.pc:#x}\t"
            out.append(f"{lead}{row.line}\t{text if text is not None else '(source not found)'}")
        return "\n".join(out)

    def describe_stop(self, stop: Stop, before: tuple[str, int] | None = None) -> str:
        """gdb's report of a stop; `before` is (function, sp) before a step, to tell
        whether the function changed."""
        self._stopped(stop)
        if stop.result is not None:
            return self._describe_end(stop)
        f = self.selected()
        assert f is not None
        lines = []
        if stop.message and stop.kind != "interrupted":
            lines.append(stop.message)
        if stop.kind == "breakpoint" and isinstance(stop.point, Breakpoint):
            kind = "Temporary breakpoint" if stop.point.temporary else "Breakpoint"
            lines.append(f"\n{kind} {stop.point.number}, "
                         f"{self.frame_line(f, with_pc=prog_row(f) is None)[4:]}"
                         f"  [{self.t.context()}]")
            src = self.location_text(f, header=False).split("\t", 1)
            lines.append(src[1] if len(src) > 1 and src[0].startswith("0x") else "\t".join(src))
        elif stop.kind == "watchpoint" and isinstance(stop.point, Watchpoint):
            wp, hit = stop.point, stop.hit
            assert hit is not None
            lines.append(f"\nHardware watchpoint {wp.number}: {wp.spec}\n")
            lines.append(f"Old value = {self._watch_value(wp, hit.old)}")
            lines.append(f"New value = {self._watch_value(wp, hit.new)}")
            lines.append(f"[{self.t.context()}, the store at {hit.pc:#x}]")
            lines.append(self.location_text(f, header=True))
        elif stop.kind == "interrupted":
            lines.append(f"\nProgram stopped ({stop.message or 'interrupted'}).  "
                         f"[{self.t.context()}]")
            lines.append(self.location_text(f, header=True))
        else:
            changed = before is None or before[0] != f.function()
            lines.append(self.location_text(f, header=changed))
        return "\n".join(lines).lstrip("\n") if stop.kind == "step" else "\n".join(lines)

    def _watch_value(self, wp: Watchpoint, data: bytes) -> str:
        t = getattr(wp, "ctype", None)
        if isinstance(t, CType) and t.size == len(data):
            return _bytes(self.evaluator(), t, data, Value(t), None)
        return "0x" + data[::-1].hex()

    def _describe_end(self, stop: Stop) -> str:
        r = stop.result
        assert r is not None
        if stop.kind == "exited":
            return f"[The guest powered off with status {r.status}]"
        if stop.kind in ("panic", "fault"):
            from harness.report import format_report

            return format_report(self.t.m, r)
        return f"[{describe_end(r)}]"

    # ---------------------------------------------------------------- breakpoints
    def _location_spec(self, arg: str) -> tuple[str, str | None]:
        m = re.match(r"(.*?)\s+if\s+(.+)$", arg)
        return (m.group(1).strip(), m.group(2).strip()) if m else (arg.strip(), None)

    def _resolve(self, spec: str):  # -> list[Location]
        prog = self.context_program()
        cur_file = self.list_pos.file if self.list_pos else None
        if not spec:
            f = self.selected()
            if f is None or f.pc is None:
                raise DebugError("No default breakpoint location now.")
            spec = f"*{f.pc:#x}"
        return self.programs.resolve(spec, prog, cur_file, lambda e: self.evaluator().integer(e))

    def _break(self, arg: str, temporary: bool) -> str:
        spec, cond = self._location_spec(arg)
        locs = self._resolve(spec)
        if cond:
            self.evaluator().evaluate(cond)  # a syntax error now, not at the first hit
        bp = self.t.bps.add(locs, spec, temporary=temporary, condition=cond)
        kind = "Temporary breakpoint" if temporary else "Breakpoint"
        if len(locs) == 1:
            return f"{kind} {bp.number} at {locs[0].describe()}."
        return (f"{kind} {bp.number} at {spec}: {len(locs)} locations\n"
                + "\n".join(f"  {bp.number}.{i + 1}  {loc.describe()}"
                            for i, loc in enumerate(locs)))

    def cmd_break(self, arg: str) -> str:
        """break LOCATION [if COND]: stop when code at LOCATION is about to run.
        LOCATION: FUNC, PROG:FUNC, FILE:LINE, PROG:FILE:LINE, LINE, *ADDR.
        A user-program location fires only in processes running that program."""
        return self._break(arg, temporary=False)

    def cmd_tbreak(self, arg: str) -> str:
        """tbreak LOCATION [if COND]: a breakpoint deleted when it is first hit."""
        return self._break(arg, temporary=True)

    def cmd_watch(self, arg: str) -> str:
        """watch EXPR [if COND]: stop after a store changes EXPR (a variable, a[i], s.f,
        *ADDR for 8 bytes, or *(TYPE *)ADDR)."""
        spec, cond = self._location_spec(arg)
        if not spec:
            raise DebugError("Argument required (expression to compute).")
        ev = self.evaluator()
        inner = ev.evaluate(spec[1:]) if spec.startswith("*") else None
        space = None
        if inner is not None and inner.type is None:
            addr, size, t, prog = ev.to_int(inner), 8, None, None  # *ADDR: 8 bytes
        else:
            v = ev.evaluate(spec)
            if v.addr is None:
                raise DebugError(f"Cannot watch constant value `{spec}'.")
            addr, t, prog, space = v.addr, v.type, v.program, v.space
            size = t.size if t is not None and t.size else 8
        pa = self.t.physical(addr, space)
        if prog is None:
            prog = (self.programs.kernel if addr >= KERNBASE or self.t.priv != PRIV_U
                    else self.t.program_at())
        wp = self.t.bps.add_watch(addr, size, spec, prog, pa, cond)
        wp.ctype = t  # type: ignore[attr-defined]
        proc = self.t.current_proc()
        where = "" if prog is None or not prog.user else (
            f" in pid {proc.pid} ({proc.name})" if proc and proc.name == prog.name
            else f" in {prog.name}")
        return f"Hardware watchpoint {wp.number}: {spec} ({size} bytes at {addr:#x}{where})"

    def _numbers(self, arg: str) -> list[int]:
        try:
            return [int(x) for x in arg.replace(",", " ").split()]
        except ValueError:
            raise DebugError(f"Arguments must be breakpoint numbers: {arg}") from None

    def cmd_delete(self, arg: str) -> str:
        """delete [N...]: delete breakpoints/watchpoints N (all without N)."""
        nums = self._numbers(arg)
        points = [self.t.bps.get(n) for n in nums] if nums else self.t.bps.listed()
        for p in points:
            self.t.bps.remove(p)
        return ""

    def cmd_disable(self, arg: str) -> str:
        """disable [N...]: keep breakpoints but do not stop at them."""
        for p in [self.t.bps.get(n) for n in self._numbers(arg)] or self.t.bps.listed():
            p.enabled = False
        return ""

    def cmd_enable(self, arg: str) -> str:
        """enable [N...]: stop at disabled breakpoints again."""
        for p in [self.t.bps.get(n) for n in self._numbers(arg)] or self.t.bps.listed():
            p.enabled = True
        return ""

    def cmd_condition(self, arg: str) -> str:
        """condition N [COND]: stop at breakpoint N only when COND is true (none: always)."""
        parts = arg.split(None, 1)
        if not parts:
            raise DebugError("Argument required (breakpoint number).")
        p = self.t.bps.get(self._numbers(parts[0])[0])
        cond = parts[1].strip() if len(parts) > 1 else None
        if cond:
            self.evaluator().evaluate(cond)
        p.condition = cond
        return "" if cond else f"Breakpoint {p.number} now unconditional."

    def info_breakpoints(self, arg: str) -> str:
        points = self.t.bps.listed()
        if not points:
            return "No breakpoints or watchpoints."
        out = ["Num     Type            Disp Enb Address            What"]
        for p in points:
            disp = "del " if p.temporary else "keep"
            enb = "y" if p.enabled else "n"
            if isinstance(p, Watchpoint):
                out.append(f"{p.number:<7} {'hw watchpoint':<15} {disp} {enb}   "
                           f"{p.addr:<#18x} {p.spec}")
            else:
                first = p.locations[0] if len(p.locations) == 1 else None
                addr = f"{first.addr:<#18x}" if first else f"{'<MULTIPLE>':<18}"
                what = first.describe().split(": ", 1)[-1] if first else p.spec
                if first and first.program is not None and first.program.user:
                    what = f"{first.program.name}: {what}"
                out.append(f"{p.number:<7} {'breakpoint':<15} {disp} {enb}   {addr} {what}")
                if not first:
                    out += [f"{p.number}.{i + 1:<5} {'':<15} {'':4} {enb}   {loc.addr:<#18x} "
                            f"{loc.describe()}" for i, loc in enumerate(p.locations)]
            if p.condition:
                out.append(f"\tstop only if {p.condition}")
            if p.hits:
                out.append(f"\tbreakpoint already hit {p.hits} time{'s' if p.hits > 1 else ''}")
        return "\n".join(out)

    info_watchpoints = info_breakpoints

    # ---------------------------------------------------------------- running
    def _count(self, arg: str) -> int:
        if not arg:
            return 1
        n = self.evaluator().integer(arg)
        if n < 1:
            raise DebugError("the count must be at least 1")
        return n

    def cmd_continue(self, arg: str) -> str:
        """continue: run until a breakpoint, a watchpoint, Ctrl-C or the end."""
        if arg:
            raise DebugError("continue takes no argument here (use `condition` or `ignore`)")
        return self.describe_stop(self.t.resume())

    def cmd_run(self, arg: str) -> str:
        """run: the machine is already booted and stopped; run is continue."""
        return self.cmd_continue(arg)

    def _steps(self, arg: str, one: Callable[[], Stop]) -> str:
        before = self._before()
        stop = Stop("step", self.t.pc)
        for _ in range(self._count(arg)):
            stop = one()
            if stop.kind != "step":
                break
        return self.describe_stop(stop, before)

    def _before(self) -> tuple[str, int]:
        f = self.frames()[0] if self.t.alive else None
        return (f.function() if f else "", self.t.sp)

    def cmd_stepi(self, arg: str) -> str:
        """stepi [N]: execute N instructions (interrupts masked while stepping)."""
        self.t.check_alive()
        out = self._steps(arg, self.t.stepi)
        return out + "\n" + self._current_insn() if self.t.alive else out

    def cmd_nexti(self, arg: str) -> str:
        """nexti [N]: like stepi, but run over calls (and system calls from user code)."""
        self.t.check_alive()
        out = self._steps(arg, lambda: stepping.nexti(self.t))
        return out + "\n" + self._current_insn() if self.t.alive else out

    def _current_insn(self) -> str:
        prog = self.t.program_at()
        ins = disassemble(self.t.hart.fetch, self.t.pc, 1, self._symbolizer(prog))
        return ins[0].line(self._sym(prog, self.t.pc), marker=True) if ins else ""

    def cmd_step(self, arg: str) -> str:
        """step [N]: run to the next source line, entering functions that have line info."""
        return self._steps(arg, lambda: stepping.step_line(self.t, over=False))

    def cmd_next(self, arg: str) -> str:
        """next [N]: run to the next source line of this function, over calls."""
        return self._steps(arg, lambda: stepping.step_line(self.t, over=True))

    def cmd_finish(self, arg: str) -> str:
        """finish: run until the selected function returns; print the value in a0."""
        before = self._before()
        head = f"Run till exit from {self.frame_line(self.frames()[0])}"
        prog = self.t.program_at()
        stop, name = stepping.finish(self.t)
        out = head + "\n" + self.describe_stop(stop, before)
        rtype = prog.dwarf.return_type(name) if prog is not None else None
        if stop.kind == "step" and (rtype is None or rtype.kind != "void"):
            v = self.t.hart.x(10)
            if rtype is not None and rtype.kind in ("base", "enum", "pointer") and rtype.size:
                data = (v & ((1 << (8 * rtype.size)) - 1)).to_bytes(rtype.size, "little")
                text = _bytes(self.evaluator(), rtype, data, Value(rtype, program=prog), None)
            else:
                text = str(v - (1 << 64) if v >> 63 else v)
            self.history.append(text)
            out += f"\nValue returned is ${len(self.history)} = {text}"
        return out

    def cmd_until(self, arg: str) -> str:
        """until LOCATION (or advance LOCATION): run until LOCATION is reached."""
        if not arg:
            return self.cmd_next("")
        bp = self.t.bps.add(self._resolve(arg), arg, temporary=True)
        bp.internal = True
        self.t.bps.points.pop(bp.number, None)
        self.t.bps.internal.append(bp)
        try:
            stop = self.t.resume()
        finally:
            if bp in self.t.bps.internal:
                self.t.bps.remove(bp)
        if stop.point is bp:
            stop = Stop("step", stop.pc)
        return self.describe_stop(stop, ("", 0))

    cmd_advance = cmd_until

    def cmd_input(self, arg: str) -> str:
        """input TEXT: type TEXT on the guest console (\\n, \\r, \\x03 escapes; a newline
        is added unless TEXT ends with \\c)."""
        text = arg[1:-1] if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'" else arg
        raw = text.encode().decode("unicode_escape").encode("latin-1")
        if raw.endswith(b"\\c"):
            raw = raw[:-2]
        else:
            raw += b"\n"
        self.send_input(raw)
        return ""

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
            fetch = (space.fetch if space is not None else self._fetch_any)
            insns = disassemble(fetch, addr, count, self._symbolizer(prog))
            if not insns:
                raise DebugError(f"Cannot access memory at address {addr:#x}")
            self.x_next = insns[-1].addr + insns[-1].size
            return "\n".join(i.line(self._sym(prog, i.addr), i.addr == self.t.pc) for i in insns)
        if fmt == "s":
            out = []
            for _ in range(count):
                raw = bytearray()
                while len(raw) < 4096:
                    b = self.t.read(addr + len(raw), 1, space)
                    if b == b"\0":
                        break
                    raw += b
                from harness.debug.dwarf import c_string

                out.append(f"{addr:#x}{self._sym_tag(prog, addr)}:\t{c_string(bytes(raw))}")
                addr += len(raw) + 1
            self.x_next = addr
            return "\n".join(out)
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

    def _fetch_any(self, addr: int) -> tuple[int, int] | None:
        try:
            lo = self.t.read(addr, 2)
        except DebugError:
            return None
        half = int.from_bytes(lo, "little")
        if half & 3 != 3:
            return half, 2
        try:
            return half | int.from_bytes(self.t.read(addr + 2, 2), "little") << 16, 4
        except DebugError:
            return None

    def _sym(self, prog: Program | None, addr: int) -> str:
        return self.programs.kernel.describe(addr) or (
            prog.describe(addr) if prog is not None and prog.user else "")

    def _sym_tag(self, prog: Program | None, addr: int) -> str:
        s = self._sym(prog, addr)
        return f" <{s}>" if s else ""

    def _symbolizer(self, prog: Program | None) -> Callable[[int], str]:
        return lambda a: self._sym(prog, a)

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

    # ---------------------------------------------------------------- frames
    def cmd_backtrace(self, arg: str) -> str:
        """backtrace [N] | backtrace pid PID: frames from the PC outwards, across a trap
        from user space into the user program's own frames; with pid, where a process
        that is not running stopped (from the registers swtch saved)."""
        m = re.fullmatch(r"pid\s+(\S+)", arg)
        if m:
            procs = self.t.procs
            p = procs.by_pid(self.evaluator().integer(m.group(1))) if procs else None
            if p is None:
                raise DebugError(f"No process with pid {m.group(1)}.")
            if procs is not None and p.addr == procs.current_addr():
                frames = self.frames()
            else:
                frames = process_backtrace(self.t, p)
            n = len(frames)
        else:
            frames = self.frames()
            n = self._count(arg) if arg else len(frames)
        out = []
        for f in frames[:n]:
            if f.entry is not None:
                out.append(f"--- trap from user space: pid {f.entry.pid} ({f.entry.name}) ---")
            out.append(self.frame_line(f, with_pc=f.level > 0 or None))
        if n < len(frames):
            out.append("(More stack frames follow...)")
        return "\n".join(out)

    def cmd_frame(self, arg: str) -> str:
        """frame [N]: select frame N (for list, print's context, info frame)."""
        if arg:
            n = self.evaluator().integer(arg)
            if not 0 <= n < len(self.frames()):
                raise DebugError(f"No frame at level {arg}.")
            self.frame_no = n
        f = self.selected()
        if f is None:
            raise DebugError("No stack.")
        if f.program is not None and f.pc is not None:
            row = f.program.row(f.lookup_pc or f.pc)
            if row is not None:
                self.list_pos = ListPos(f.program, row.file, max(1, row.line - 5))
        return self.frame_line(f) + ("\n" + self.location_text(f, False)
                                     if f.program and f.pc and f.program.row(f.pc) else "")

    def cmd_up(self, arg: str) -> str:
        """up [N]: select the caller's frame."""
        return self.cmd_frame(str(min(self.frame_no + self._count(arg), len(self.frames()) - 1)))

    def cmd_down(self, arg: str) -> str:
        """down [N]: select the callee's frame."""
        return self.cmd_frame(str(max(self.frame_no - self._count(arg), 0)))

    # ---------------------------------------------------------------- source
    def cmd_list(self, arg: str) -> str:
        """list [LOCATION | FILE:LINE | FIRST,LAST]: source lines (again: the next ones)."""
        if arg:
            if "," in arg:
                a, b = arg.split(",", 1)
                pos = self._list_target(a.strip())
                last = int(b.strip()) if b.strip().isdigit() else pos.line + LIST_LINES - 1
                self.list_pos = pos
                return self._list(pos, last - pos.line + 1)
            pos = self._list_target(arg)
            pos.line = max(1, pos.line - 5)
            self.list_pos = pos
        if self.list_pos is None:
            raise DebugError("No symbol table is loaded.  Use the \"list FILE:LINE\" command.")
        return self._list(self.list_pos, LIST_LINES)

    def _list_target(self, spec: str) -> ListPos:
        prog = self.context_program() or self.programs.kernel
        m = re.fullmatch(r"(?:([\w-]+):)?([^:]+\.[chSs]):(\d+)", spec)
        if m:
            p = self.programs.get(m.group(1)) if m.group(1) else None
            for cand in ([p] if p else [prog, self.programs.kernel, *self.programs.users()]):
                files = cand.lines.match_file(m.group(2)) if cand else []
                if files:
                    return ListPos(cand, files[0], int(m.group(3)))
            raise DebugError(f"No source file named {m.group(2)}.")
        if spec.isdigit():
            if self.list_pos is None:
                raise DebugError("No default source file; use FILE:LINE.")
            return ListPos(self.list_pos.program, self.list_pos.file, int(spec))
        locs = self.programs.resolve(spec, prog, None, self.evaluator().integer)
        loc = locs[0]
        p = loc.program or prog
        hit = p.function(loc.addr) if loc.line is None else None
        row = p.row(hit[0].addr if hit else loc.addr)  # a function: from its first line
        if row is None:
            raise DebugError(f"No line number information available for {spec}.")
        return ListPos(p, row.file, row.line)

    def _list(self, pos: ListPos, n: int) -> str:
        path = pos.program.lines.source_path(pos.file)
        if path is None:
            raise DebugError(f"{pos.file}: source file not found.")
        if path not in self._sources:
            self._sources[path] = path.read_text(errors="replace").splitlines()
        lines = self._sources[path]
        if pos.line > len(lines):
            raise DebugError(f'Line number {pos.line} out of range; "{pos.file}" has '
                             f"{len(lines)} lines.")
        end = min(len(lines), pos.line + n - 1)
        out = [f"{i}\t{lines[i - 1]}" for i in range(pos.line, end + 1)]
        pos.line = end + 1
        return "\n".join(out)

    # ---------------------------------------------------------------- info
    def cmd_info(self, arg: str) -> str:
        """info SUBCOMMAND: breakpoints, registers [REG...], all-registers, proc [PID],
        frame, locals, args, symbol ADDR, line [LOCATION], mem [PID], programs, source."""
        parts = arg.split(None, 1)
        if not parts:
            return "info " + ", ".join(INFO_SUBCOMMANDS)
        word = parts[0].lower()
        sub = {"b": "breakpoints", "br": "breakpoints", "break": "breakpoints",
               "r": "registers", "reg": "registers", "wat": "watchpoints"}.get(word)
        if sub is None:
            hits = [s for s in INFO_SUBCOMMANDS if s.startswith(word)]
            if len(hits) != 1:
                raise DebugError(f'Undefined info command: "{word}".  Try "help info".')
            sub = hits[0]
        return getattr(self, "info_" + sub.replace("-", "_"))(parts[1] if len(parts) > 1 else "")

    def info_registers(self, arg: str, every: bool = False) -> str:
        h = self.t.hart
        prog = self.t.program_at()
        if arg:
            names = [a.lstrip("$") for a in arg.split()]
        else:
            names = [*ABI_NAMES, "pc", "priv", "sstatus", "sie", "sip", "stvec", "sepc",
                     "scause", "stval", "satp", "sscratch"]
            if every:
                names += ["scounteren", "mstatus", "mie", "mip", "medeleg", "mideleg", "misa"]
        out = []
        for name in names:
            if name in REGISTERS or name in CSR_REGS or name == "priv":
                v = (h.get(REGISTERS[name]) if name in REGISTERS else
                     h.priv if name == "priv" else h.csr(CSR_REGS[name]))
            else:
                raise DebugError(f"Invalid register `{name}'")
            out.append(f"{name:<14} {v:<#18x} {self._natural(name, v, prog)}".rstrip())
        return "\n".join(out)

    def info_all_registers(self, arg: str) -> str:
        return self.info_registers(arg, every=True)

    def _natural(self, name: str, v: int, prog: Program | None) -> str:
        if name == "priv":
            return {0: "U (user)", 1: "S (supervisor)", 3: "M (machine)"}.get(v, "?")
        if name == "sstatus":
            bits = " ".join(f"{n}={(v >> b) & 1}" for n, b in SSTATUS_BITS if n != "SPP")
            fs = ("off", "initial", "clean", "dirty")[(v >> 13) & 3]
            return f"{bits} SPP={'S' if v >> 8 & 1 else 'U'} FS={fs}"
        if name in ("sie", "sip"):
            bits = SIE_BITS if name == "sie" else SIP_BITS
            return " ".join(n for n, b in bits if v >> b & 1) or "-"
        if name == "scause":
            return cause_name(v) if v else "-"
        if name == "satp":
            root = satp_root(v)
            if root is None:
                return "bare (paging off)"
            return f"Sv39, root {root:#x} ({self.t.space().name if v == self.t.satp() else '?'})"
        if name in ("pc", "ra", "stvec", "sepc", "mepc", "mtvec") or name.startswith("x"):
            tag = self._sym_tag(prog, v & ~3 if name == "stvec" else v)
            return f"{v:#x}{tag}" if tag else (str(v) if name.startswith("x") else "")
        if name in ("sp", "gp", "tp", "s0", "fp"):
            return f"{v:#x}"
        if name in REGISTERS:
            tag = self._sym_tag(prog, v)
            return f"{v:#x}{tag}" if tag else str(v - (1 << 64) if v >> 63 else v)
        return ""

    def info_proc(self, arg: str) -> str:
        procs = self.t.procs
        if procs is None:
            raise DebugError("The kernel has no debug info for its process table.")
        cur = procs.current_addr()
        if arg:
            p = procs.by_pid(self.evaluator().integer(arg))
            if p is None:
                raise DebugError(f"No process with pid {arg}.")
            return self._proc_detail(p, p.addr == cur)
        out = ["  PID  PPID  STATE     KILLED  SZ        NAME              WAIT CHANNEL"]
        for p in procs.all():
            mark = "*" if p.addr == cur else " "
            chan = f"{p.chan:#x}{self._sym_tag(None, p.chan)}" if p.chan else ""
            out.append(f"{mark}{p.pid:>4}  {p.ppid:>4}  {p.state:<9} {p.killed:<7} {p.sz:<9} "
                       f"{p.name:<17} {chan}".rstrip())
        return "\n".join(out)

    def _proc_detail(self, p, on_cpu: bool) -> str:  # noqa: ANN001
        lines = [f"process {p.pid} ({p.name}), slot {p.slot} at {p.addr:#x}"
                 f"{' - on the CPU' if on_cpu else ''}",
                 f"  state {p.state}, parent {p.ppid}, killed {p.killed}, xstate {p.xstate}",
                 f"  memory {p.sz} bytes, page table {p.pagetable:#x}, trap frame {p.trapframe:#x}",
                 f"  kernel stack {p.kstack:#x}"]
        if p.chan:
            lines.append(f"  sleeping on {p.chan:#x}{self._sym_tag(None, p.chan)}")
        return "\n".join(lines)

    def info_locals(self, arg: str, args: bool = False) -> str:
        if self.frame_no != 0:
            raise DebugError("Locals are only known for frame #0 (outer frames' registers "
                             "are not saved where the debugger can find them).")
        ev = self.evaluator()
        out = []
        for loc, value in self.frame_locals():
            if loc.arg != args:
                continue
            try:
                text = format_value(ev, value) if value is not None else "<optimized out>"
            except DebugError as e:
                text = f"<{e}>"
            out.append(f"{loc.name} = {text}")
        return "\n".join(out) or ("No arguments." if args else "No locals.")

    def info_args(self, arg: str) -> str:
        return self.info_locals(arg, args=True)

    def info_frame(self, arg: str) -> str:
        f = self.selected()
        if f is None:
            raise DebugError("No stack.")
        lines = [f"Stack level {f.level}, frame at pc {f.pc:#x}" if f.pc is not None
                 else f"Stack level {f.level}",
                 f" {f.function()} ({f.where() or 'no line info'}); address space: {f.space.name}"]
        if f.entry is not None:
            lines.append(f" first user frame of pid {f.entry.pid} ({f.entry.name}) "
                         "(registers from its trap frame)")
        if f.trap:
            lines.append(" interrupted by a trap (pc = sepc from kernelvec's frame record)")
        return "\n".join(lines)

    def info_symbol(self, arg: str) -> str:
        if not arg:
            raise DebugError("Argument required (address).")
        addr = self.evaluator().integer(arg)
        prog = self.context_program()
        for p in [self.programs.kernel] + ([prog] if prog is not None and prog.user else []):
            hit = p.function(addr)
            if hit is not None:
                sym, off = hit
                return f"{sym.name}{f' + {off}' if off else ''} in {p.name}"
        return f"No symbol matches {arg}."

    def info_line(self, arg: str) -> str:
        if arg:
            locs = self._resolve(arg)
            loc = locs[0]
            prog, addr = loc.program or self.context_program(), loc.addr
        else:
            f = self.selected()
            if f is None or f.pc is None:
                raise DebugError("No line number information available.")
            prog, addr = f.program, f.pc
        row = prog.row(addr) if prog is not None else None
        if row is None:
            return f"No line number information available for address {addr:#x}."
        return (f'Line {row.line} of "{row.file}" is at address {addr:#x}'
                f"{self._sym_tag(prog, addr)}.")

    def info_mem(self, arg: str) -> str:
        """Mappings of the current page table (or of process PID's)."""
        if arg:
            p = self.t.procs.by_pid(self.evaluator().integer(arg)) if self.t.procs else None
            if p is None:
                raise DebugError(f"No process with pid {arg}.")
            space = self.t.proc_space(p)
        else:
            space = self.t.space()
        if space.root is None:
            return f"{space.name}: paging is off (virtual = physical)"
        runs: list[list[int]] = []  # [va, pa, size, flags]
        for va, pa, size, flags in space.mappings():
            if runs and runs[-1][0] + runs[-1][2] == va and runs[-1][1] + runs[-1][2] == pa \
                    and runs[-1][3] == flags:
                runs[-1][2] += size
            else:
                runs.append([va, pa, size, flags])
        out = [f"page table of {space.name} (root {space.root:#x}):",
               "  virtual            physical           size       perm"]
        for va, pa, size, flags in runs:
            out.append(f"  {va:<#18x} {pa:<#18x} {size:<#10x} {flags_text(flags)}")
        return "\n".join(out)

    def info_programs(self, arg: str) -> str:
        out = [f"kernel  {self.programs.kernel.path}"]
        for name in self.programs.user_names():
            p = self.programs.user(name)
            out.append(f"{name:<7} {p.path if p else '?'}")
        return "\n".join(out)

    def info_source(self, arg: str) -> str:
        if self.list_pos is None:
            return "No current source file."
        p = self.list_pos
        return (f"Current source file is {p.file} ({p.program.name})\n"
                f"Located in {p.program.lines.source_path(p.file)}")

    # ---------------------------------------------------------------- misc
    def cmd_help(self, arg: str) -> str:
        """help [COMMAND]: what a command does."""
        if arg:
            name = self.resolve(arg.split()[0])
            doc = self.commands[name].__doc__ or ""
            return "\n".join(line.strip() for line in doc.strip().splitlines())
        out = ["Commands (abbreviations work: b c s n si ni bt p x l i r; `help CMD` for more):"]
        seen = set()
        for name in sorted(self.commands):
            fn = self.commands[name]
            if fn.__func__ in seen:  # type: ignore[attr-defined]
                continue
            seen.add(fn.__func__)  # type: ignore[attr-defined]
            doc = " ".join(line.strip() for line in (fn.__doc__ or name).strip().splitlines())
            synopsis, _, rest = doc.partition(": ")
            out.append(f"  {synopsis:<34} {rest.split('. ')[0].rstrip('.')}".rstrip())
        return "\n".join(out)

    def cmd_quit(self, arg: str) -> str:
        """quit: leave the debugger (the machine stops)."""
        self.quit_requested = True
        return ""

    # ---------------------------------------------------------------- completion
    def completions(self, text: str, line: str) -> list[str]:
        """Candidates for the word `text` being typed at the end of `line`."""
        words = line.split()
        first = len(words) == 0 or (len(words) == 1 and not line.endswith(" "))
        if first:
            names = sorted(set(self.commands) | set(ALIASES))
            return [n for n in names if n.startswith(text)]
        cmd = self.resolve(words[0]) if words else ""
        if cmd == "info" and (len(words) == 1 or (len(words) == 2 and not line.endswith(" "))):
            return [s for s in INFO_SUBCOMMANDS if s.startswith(text)]
        if text.startswith("$"):
            regs = sorted(set(REGISTERS) | set(CSR_REGS) | {"priv", "pid", "prog"})
            return ["$" + r for r in regs if ("$" + r).startswith(text)]
        return self._symbol_completions(text, cmd)

    def _symbol_completions(self, text: str, cmd: str) -> list[str]:
        out: list[str] = []
        if ":" in text:
            pname, _, rest = text.partition(":")
            p = self.programs.get(pname)
            if p is not None:
                out += [f"{pname}:{s}" for s in p.symbol_names if s.startswith(rest)]
                out += [f"{pname}:{f.rsplit('/', 1)[-1]}:" for f in p.lines.files
                        if f.rsplit("/", 1)[-1].startswith(rest)]
            return sorted(set(out))[:500]
        k = self.programs.kernel
        out += [s for s in k.symbol_names if s.startswith(text)]
        out += [n + ":" for n in self.programs.user_names() if n.startswith(text)]
        if cmd in ("break", "tbreak", "list", "until", "advance"):
            out += [f.rsplit("/", 1)[-1] + ":" for f in k.lines.files
                    if f.rsplit("/", 1)[-1].startswith(text)]
        return sorted(set(out))[:500]


def prog_row(f: Frame):  # noqa: ANN201 - Row | None
    """The line-table row of a frame's pc, None without line info."""
    if f.program is None or f.pc is None:
        return None
    return f.program.row(f.pc)
