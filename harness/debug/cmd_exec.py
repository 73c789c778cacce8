"""Commands that run the guest: continue, step, next, stepi, nexti, finish, until, and
input (typing on the guest console)."""

from __future__ import annotations

from collections.abc import Callable

from harness.debug import DebugError, stepping
from harness.debug.cmdbase import CommandBase
from harness.debug.expr import Value
from harness.debug.target import Stop
from harness.debug.values import _bytes


class ExecCommands(CommandBase):
    """continue, run, step, next, stepi, nexti, finish, until/advance, input."""

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
