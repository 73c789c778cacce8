"""Reverse execution for the debugger: reverse-stepi/-nexti/-step/-next/-finish/-continue
and goto, over the time travel of a deterministic machine (harness/machine/timetravel.py).

Going back is going to an earlier instruction count (`TimeTravel.goto`): restore a
checkpoint, run forward. What "earlier" means comes from here:

- reverse-stepi: hart h's count minus one; the other harts are where the schedule had
  them then.
- reverse-continue: the last stop of an enabled breakpoint or watchpoint before now, on
  any hart (`TimeTravel.last_hit` re-runs the past with them armed; `Target.settle`
  notes each stop and lets the run go on past it). With none, the start of history.
- reverse-step / reverse-next / reverse-finish: the hart's recent instructions
  (`TimeTravel.recent`: pc, sp, privilege before each), read backwards with the
  line table, as gdb reads them forwards: a line is left when the PC is in another
  statement of the same frame (reverse-next: callees, with a lower sp, and traps, in
  another mode, are passed over; reverse-step enters a callee that has line info at its
  last line); reverse-finish stops at the call instruction in the caller.

Breakpoint hit counts and temporary breakpoints are not touched by the searches: the
past is re-run, not lived again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unicorn import riscv_const as R

from harness.cpu.registers import REG_PC
from harness.debug import DebugError
from harness.debug.breakpoints import Breakpoint
from harness.debug.target import Stop, Target
from harness.guest.backtrace import backtrace

REG_SP = R.UC_RISCV_REG_SP
TRACE = (4096, 65536, 1 << 20)  # instructions of history read for a line step, in turn


@dataclass(frozen=True)
class Past:
    """One instruction of a hart's recent history, before it ran."""

    count: int   # the hart's instruction count before it
    pc: int
    sp: int
    satp: int
    priv: int


def travel_of(t: Target) -> Any:
    tt = t.m.travel
    if tt is None:
        raise DebugError("Reverse execution needs a recorded history: start the debugger "
                         "deterministic (harness debug --schedule rr, or --replay FILE).")
    return tt


def _frozen_points(t: Target) -> dict[int, int]:
    return {id(p): p.hits for p in [*t.bps.points.values(), *t.bps.internal]}


def _thaw(t: Target, hits: dict[int, int]) -> None:
    for p in [*t.bps.points.values(), *t.bps.internal]:
        if id(p) in hits:
            p.hits = hits[id(p)]


def _landed(t: Target, res: Any, hart: int) -> Stop:
    from harness.machine.config import REACHED, Exit

    t.bps.disarm()
    t.bps.take_hit()
    if res is not None and (res.exit != Exit.PAUSE or res.message != REACHED):
        return t._stop(res)
    t.select_hart(hart)
    return Stop("step", t.pc)


def reverse_stepi(t: Target) -> Stop:
    """One instruction back on the selected hart."""
    tt = travel_of(t)
    h = t.m.cur
    if t.m.det.counter.count(h) == 0:
        return Stop("history", t.pc, message="No more reverse-execution history.")
    return _landed(t, tt.back(h), h)


def reverse_nexti(t: Target) -> Stop:
    """One instruction back in this frame: a callee that returned here, or a trap taken
    here, is gone back over to the instruction before it."""
    sp0, satp0, priv0 = t.sp, 0, t.priv
    stop = reverse_stepi(t)
    if stop.kind != "step" or (t.sp >= sp0 and t.priv == priv0):
        return stop
    for n in TRACE:
        past = _history(t, n)
        for p in reversed(past):
            if p.sp >= sp0 and p.satp == satp0 and p.priv == priv0:
                return _go(t, p)
        if len(past) < n:
            break
    return stop


def goto(t: Target, total: int) -> Stop:
    """To machine instruction `total`, back or ahead, without stopping on the way (as
    rr's seek: breakpoints and watchpoints are for continue and reverse-continue)."""
    tt = travel_of(t)
    if total < 0:
        raise DebugError("an instruction count is >= 0")
    return _landed(t, tt.goto(total), t.m.cur)


def reverse_continue(t: Target) -> Stop:
    """Back to the last breakpoint or watchpoint stop before now (any hart)."""
    tt = travel_of(t)
    here, h = tt.now, t.m.cur
    hits = _frozen_points(t)
    try:
        found = tt.last_hit()
    finally:
        _thaw(t, hits)
        t.bps.disarm()
    if found is None:
        tt.goto(0)
        t.select_hart(h)
        return Stop("history", t.pc, message="No more reverse-execution history.")
    total, stop = found
    if total >= here:  # (a point at the very place we started from)
        tt.goto(here)
        t.select_hart(h)
        return Stop("history", t.pc, message="No more reverse-execution history.")
    tt.goto(total)
    t.bps.take_hit()
    t.bps.disarm()
    t.select_hart(stop.hit.hart)
    stop.pc = t.pc
    if isinstance(stop.point, Breakpoint) and stop.point.temporary:
        t.bps.remove(stop.point)
    return stop


# ---------------------------------------------------------------- by source line
def _history(t: Target, n: int) -> list[Past]:
    tt = travel_of(t)
    h = t.m.cur
    c = t.m.cpus[h]
    counter = t.m.det.counter
    hart = c.hart

    def sample() -> Past:  # (registers only: reading a CSR here would cost the hart
        return Past(counter.count(h) - 1, hart.get(REG_PC),  # its LR/SC reservation)
                    hart.get(REG_SP), 0, hart.priv)

    return [p for _, p in tt.recent(h, n, sample)]


def _go(t: Target, past: Past) -> Stop:
    tt = travel_of(t)
    h = t.m.cur
    return _landed(t, tt.goto(0, hart=h, count=past.count), h)


def _line(t: Target) -> tuple[Any, Any, Any] | None:
    """(program, function symbol, (file, line)) of the selected hart's pc."""
    prog = t.program_at()
    info = _line_in(prog, t.pc) if prog is not None else None
    return None if info is None else (prog, *info)


def reverse_line(t: Target, over: bool) -> Stop:
    """reverse-step (over=False) / reverse-next (over=True): back to the start of the
    previous source line this frame executed."""
    travel_of(t)
    here = _line(t)
    if here is None:
        raise DebugError(f"No line number information for {t.pc:#x}: use reverse-stepi")
    sp0, satp0, priv0 = t.sp, 0, t.priv
    for n in TRACE:
        past = _history(t, n)
        target = _previous_line(t, past, here, sp0, satp0, priv0, over)
        if target is not None:
            return _go(t, target)
        if len(past) < n:  # the whole history was read
            break
    if not past:
        return Stop("history", t.pc, message="No more reverse-execution history.")
    return _go(t, past[0])


def _previous_line(t: Target, past: list[Past], here: tuple, sp0: int, satp0: int,
                   priv0: int, over: bool) -> Past | None:
    """Where reverse-step/next lands in `past` (oldest first), or None if not in it.
    An instruction is in this frame when it is in this function at this sp, in a caller
    when its sp is higher, in a callee otherwise (a leaf callee may keep our sp: the
    function tells them apart)."""
    prog, fn0, line0 = here

    def mine(p: Past) -> bool:
        return p.priv == priv0 and p.satp == satp0

    j = len(past) - 1
    # 1: back over the rest of the current line, callees (step: those without lines)
    # and traps
    while j >= 0:
        p = past[j]
        info = _line_in(prog, p.pc) if mine(p) else None
        if info is None:
            j -= 1
            continue
        callee = p.sp < sp0 or (p.sp == sp0 and info[0] != fn0)
        if (callee and over) or (info == (fn0, line0) and p.sp == sp0):
            j -= 1
            continue
        break
    if j < 0:
        return None
    # 2: the previous line: back to its first statement start in this run of it
    fn1, line1 = _line_in(prog, past[j].pc)
    sp1 = past[j].sp
    best = past[j] if prog.lines.is_stmt_start(prog.linked(past[j].pc)) else None
    earliest = past[j]  # (without a statement start in the run: its first instruction)
    k = j - 1
    while k >= 0:
        p = past[k]
        info = _line_in(prog, p.pc) if mine(p) else None
        if info is None or p.sp < sp1 or (p.sp == sp1 and info[0] != fn1):
            k -= 1  # a trap, or a callee of that line
            continue
        if info != (fn1, line1):
            return best or earliest
        earliest = p
        if prog.lines.is_stmt_start(prog.linked(p.pc)):
            best = p
        k -= 1
    return None  # its start lies before what was read


def _line_in(prog: Any, pc: int) -> tuple[Any, Any] | None:
    if not prog.has_code(pc):
        return None
    row, fn = prog.row(pc), prog.function(pc)
    if row is None or fn is None:
        return None
    return fn[0], (row.file, row.line)


def reverse_finish(t: Target) -> tuple[Stop, str]:
    """Back to the call of the selected function, in its caller."""
    travel_of(t)
    frames = backtrace(t, t.hart)
    if len(frames) < 2 or frames[1].pc is None:
        raise DebugError('"reverse-finish" not meaningful in the outermost frame.')
    name = frames[0].function()
    ret = frames[1].pc
    sp0, satp0, priv0 = t.sp, 0, t.priv
    for n in TRACE:
        past = _history(t, n)
        for p in reversed(past):
            if (p.pc in (ret - 4, ret - 2) and p.satp == satp0 and p.priv == priv0
                    and p.sp >= sp0):
                return _go(t, p), name
        if len(past) < n:
            break
    raise DebugError(f"the call of {name} is not in the recorded history")
