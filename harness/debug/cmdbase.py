"""What every command of `harness debug` shares: the target, the selected frame and its
locals, how a stop and a place are described, symbol helpers. The commands themselves
are grouped by concept in cmd_points.py, cmd_exec.py, cmd_data.py and cmd_info.py, and
commands.py joins them into the Interpreter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.debug import DebugError
from harness.debug.breakpoints import Breakpoint, Watchpoint
from harness.debug.disasm import disassemble
from harness.debug.expr import Evaluator, Value
from harness.debug.target import Stop, Target, describe_end
from harness.debug.values import _bytes
from harness.guest.backtrace import Frame, backtrace, in_prologue, sp_allocation
from harness.guest.dwarf import CType
from harness.guest.locals import Local, evaluate
from harness.guest.programs import Program
from harness.machine.config import ML

LIST_LINES = 10
KERNBASE = ML["KERNBASE"]
SIZES = {"b": 1, "h": 2, "w": 4, "g": 8}
PER_LINE = {1: 8, 2: 8, 4: 4, 8: 2}
ALIASES = {"b": "break", "br": "break", "tb": "tbreak", "d": "delete", "c": "continue",
           "cont": "continue", "r": "run", "s": "step", "n": "next", "si": "stepi",
           "ni": "nexti", "fin": "finish", "p": "print", "bt": "backtrace",
           "where": "backtrace", "l": "list", "i": "info", "f": "frame", "q": "quit",
           "disas": "disassemble", "h": "help", "u": "until", "inspect": "print",
           "rsi": "reverse-stepi", "rni": "reverse-nexti", "rs": "reverse-step",
           "rn": "reverse-next", "rc": "reverse-continue"}
INFO_SUBCOMMANDS = ("breakpoints", "watchpoints", "registers", "all-registers", "proc",
                    "frame", "symbol", "line", "mem", "programs", "source", "locals", "args",
                    "cpus", "locks")
SSTATUS_BITS = (("SIE", 1), ("SPIE", 5), ("UBE", 6), ("SPP", 8), ("SUM", 18), ("MXR", 19))
SIE_BITS = (("SSIE", 1), ("STIE", 5), ("SEIE", 9))
SIP_BITS = (("SSIP", 1), ("STIP", 5), ("SEIP", 9))


@dataclass
class ListPos:
    program: Program
    file: str
    line: int  # next line `list` prints


class CommandBase:
    """State and helpers of the interpreter (see commands.py)."""

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
            name[4:].replace("_", "-"): getattr(self, name)
            for name in dir(self) if name.startswith("cmd_")}

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
        h = self.t.hart
        if not in_prologue(h, prog.elf, pc):
            return h.x(8)
        hit = prog.function(pc)
        pos = pc - hit[1] if hit else pc
        while pos < pc:
            got = h.fetch(pos)
            if got is None:
                break
            size = sp_allocation(*got)
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
            self._frames = backtrace(self.t, self.t.hart)
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
            from harness.run.fault_report import format_report

            return format_report(self.t.m, r)
        return f"[{describe_end(r)}]"

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

    # ---------------------------------------------------------------- running
    def _before(self) -> tuple[str, int]:
        f = self.frames()[0] if self.t.alive else None
        return (f.function() if f else "", self.t.sp)

    def _current_insn(self) -> str:
        prog = self.t.program_at()
        ins = disassemble(self.t.hart.fetch, self.t.pc, 1, self._symbolizer(prog))
        return ins[0].line(self._sym(prog, self.t.pc), marker=True) if ins else ""

    def _count(self, arg: str) -> int:
        if not arg:
            return 1
        n = self.evaluator().integer(arg)
        if n < 1:
            raise DebugError("the count must be at least 1")
        return n


def prog_row(f: Frame):  # noqa: ANN201 - Row | None
    """The line-table row of a frame's pc, None without line info."""
    if f.program is None or f.pc is None:
        return None
    return f.program.row(f.pc)
