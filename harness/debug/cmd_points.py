"""Breakpoint and watchpoint commands: break, tbreak, watch, delete, disable, enable,
condition, info breakpoints (harness/debug/breakpoints.py does the hooks)."""

from __future__ import annotations

import difflib
import re

from harness.cpu.registers import PRIV_U
from harness.debug import DebugError
from harness.debug.breakpoints import Watchpoint
from harness.debug.cmdbase import KERNBASE, CommandBase
from harness.guest.programs import Program

MAX_SUGGESTIONS = 5  # names offered for a function that does not exist


def _is_function(prog: Program, name: str) -> bool:
    """A sized symbol in prog's code (not data, not an assembly label)."""
    sym = prog.symbol(name)
    return sym is not None and sym.size > 0 and prog.has_code(prog.runtime(sym.addr))


class PointCommands(CommandBase):
    """break, tbreak, watch, delete, disable, enable, condition, info breakpoints."""

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
        try:
            return self.programs.resolve(spec, prog, cur_file,
                                         lambda e: self.evaluator().integer(e))
        except DebugError as e:
            hint = self._nearest_functions(spec) if "not defined" in str(e) else ""
            if not hint:
                raise
            raise DebugError(f"{e} {hint}") from None

    def _nearest_functions(self, spec: str) -> str:
        """"Did you mean: sys_ai_submitx?" for a FUNC or PROG:FUNC that names no function:
        the functions whose names start with it (what gdb's completion would list), then the
        closest spellings; "" if none is near."""
        m = re.fullmatch(r"(?:([A-Za-z_][\w.-]*):)?([A-Za-z_]\w*)", spec)
        if m is None:
            return ""
        progs = ([self.programs.get(m.group(1))] if m.group(1)
                 else [self.programs.kernel, *self.programs.users()])
        names = sorted({n for p in progs if p is not None for n in p.symbol_names
                        if _is_function(p, n)})
        want = m.group(2)
        starts = sorted((n for n in names if n.startswith(want)), key=len)
        near = difflib.get_close_matches(want, names, n=MAX_SUGGESTIONS, cutoff=0.75)
        picks = list(dict.fromkeys(starts + near))[:MAX_SUGGESTIONS]
        if not picks:
            return ""
        return f"Did you mean{' one of' if len(picks) > 1 else ''}: {', '.join(picks)}?"

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
