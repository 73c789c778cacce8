"""Commands that go back in time: reverse-stepi, reverse-nexti, reverse-step,
reverse-next, reverse-finish, reverse-continue, when, goto (harness/debug/reverse.py
does the work; the machine must be deterministic, with time travel)."""

from __future__ import annotations

from collections.abc import Callable

from harness.debug import DebugError, reverse
from harness.debug.cmdbase import CommandBase
from harness.debug.target import Stop


class ReverseCommands(CommandBase):
    """reverse-* commands, when and goto."""

    def _back(self, arg: str, one: Callable[[], Stop]) -> str:
        reverse.travel_of(self.t)
        before = self._before()
        stop = Stop("step", self.t.pc)
        for _ in range(self._count(arg)):
            stop = one()
            if stop.kind != "step":
                break
        return self.describe_stop(stop, before)

    def cmd_reverse_stepi(self, arg: str) -> str:
        """reverse-stepi [N] (rsi): go back N instructions of the selected hart (the
        other harts go back to where the schedule had them)."""
        out = self._back(arg, lambda: reverse.reverse_stepi(self.t))
        return out + "\n" + self._current_insn() if self.t.alive else out

    def cmd_reverse_nexti(self, arg: str) -> str:
        """reverse-nexti [N] (rni): like reverse-stepi, but back over calls."""
        out = self._back(arg, lambda: reverse.reverse_nexti(self.t))
        return out + "\n" + self._current_insn() if self.t.alive else out

    def cmd_reverse_step(self, arg: str) -> str:
        """reverse-step [N] (rs): back to the start of the previous source line,
        entering a function that returned into this line."""
        return self._back(arg, lambda: reverse.reverse_line(self.t, over=False))

    def cmd_reverse_next(self, arg: str) -> str:
        """reverse-next [N] (rn): back to the start of the previous line of this
        function, over calls."""
        return self._back(arg, lambda: reverse.reverse_line(self.t, over=True))

    def cmd_reverse_finish(self, arg: str) -> str:
        """reverse-finish: back to where the selected function was called."""
        reverse.travel_of(self.t)
        before = self._before()
        head = f"Run back to call of {self.frame_line(self.frames()[0])}"
        stop, _ = reverse.reverse_finish(self.t)
        return head + "\n" + self.describe_stop(stop, before)

    def cmd_reverse_continue(self, arg: str) -> str:
        """reverse-continue (rc): run backwards to the last breakpoint or watchpoint
        stop before now, on any hart (or to the start of history)."""
        if arg:
            raise DebugError("reverse-continue takes no argument")
        reverse.travel_of(self.t)
        return self.describe_stop(reverse.reverse_continue(self.t))

    def cmd_when(self, arg: str) -> str:
        """when: the current instruction count (the machine's, and each hart's), the
        position `goto` takes."""
        m = self.t.m
        if m.det is None:
            raise DebugError("instruction counts need a deterministic machine "
                             "(harness debug --schedule rr)")
        counts = m.det.counter.counts()
        harts = ", ".join(f"hart {i}: {n}" for i, n in enumerate(counts[:len(m.cpus)]))
        tt = m.travel
        span = (f"; history 0..{tt.frontier}, {len(tt.cps.points)} checkpoints"
                if tt is not None else "")
        return f"Instruction {m.det.counter.total} ({harts}){span}"

    def cmd_goto(self, arg: str) -> str:
        """goto N: go to machine instruction count N (back, or ahead), as `when` shows."""
        try:
            total = int(arg.replace("_", ""), 0)
        except ValueError:
            raise DebugError("usage: goto N (an instruction count, as `when` shows)") from None
        reverse.travel_of(self.t)
        return self.describe_stop(reverse.goto(self.t, total), None)
