"""step, next, finish, nexti: source-level stepping built on one-instruction steps and
internal breakpoints.

- `step`/`next` step instructions until the PC reaches the start of a statement (an
  is_stmt line-table row) of another line. `next` runs over calls: at a call it runs to
  the return address with a breakpoint that fires only on the same stack (sp equal to
  the caller's) and address space, so recursion, other processes running the same
  kernel code, and preemption in between do not stop it early. A system call from user
  code (`ecall`) is likewise run over, to the instruction after it in the same process.
  `step` enters functions that have line info (stopping after their prologue) and runs
  over those that do not.
- Leaving the function (its `ret`) lands in the middle of the caller's line; stepping
  goes on to the caller's next statement, as gdb does.
- `finish` runs to the return address in frame #1, with sp >= the current sp.
"""

from __future__ import annotations

from harness.cpu.registers import PRIV_U
from harness.debug import DebugError
from harness.debug.disasm import is_call
from harness.debug.target import Stop, Target
from harness.guest.backtrace import backtrace
from harness.guest.elf import Symbol
from harness.guest.programs import Location, Program

MAX_STEPS = 200_000  # instructions one step/next may take before giving up
ECALL = 0x0000_0073


def _same_stack(t: Target, sp: int, satp: int, priv: int):  # -> Callable[[], bool]
    return lambda: t.sp == sp and t.satp() == satp and t.priv == priv


def run_over_call(t: Target, prog: Program | None, ret: int) -> Stop:
    """The instruction at pc is a call (or an ecall): run until it returns to ret."""
    loc = Location(prog, ret)
    return t.run_to(loc, _same_stack(t, t.sp, t.satp(), t.priv))


def nexti(t: Target) -> Stop:
    got = t.hart.fetch(t.pc)
    if got is not None and (is_call(*got) or (got == (ECALL, 4) and t.priv == PRIV_U)):
        return run_over_call(t, t.program_at(), t.pc + got[1])
    return t.stepi()


def finish(t: Target) -> tuple[Stop, str]:
    """Run until the current function returns; (stop, the function's name)."""
    t.check_alive()
    frames = backtrace(t, t.hart)
    if len(frames) < 2 or frames[1].pc is None:
        raise DebugError('"finish" not meaningful in the outermost frame.')
    name = frames[0].function()
    caller = frames[1]
    sp, satp, priv = t.sp, t.satp(), t.priv
    # the caller's frame is above ours: it runs with sp >= ours (deeper recursion of
    # the same function returns with a smaller sp and does not stop us)
    if caller.entry is not None:
        raise DebugError('"finish" cannot return from the kernel into user space; use '
                         "`break` at the user address and continue")
    stop = t.run_to(Location(caller.program, caller.pc),
                    lambda: t.sp >= sp and t.satp() == satp and t.priv == priv)
    return stop, name


def step_line(t: Target, over: bool) -> Stop:
    """One source line (step: into functions with line info; next: over calls)."""
    t.check_alive()
    prog = t.program_at()
    row = prog.row(t.pc) if prog is not None else None
    if prog is None or row is None:
        fn = prog.describe(t.pc) if prog is not None else ""
        raise DebugError(f"No line number information for {fn or hex(t.pc)}: use stepi, "
                         "nexti or finish")
    start_fn = prog.function(t.pc)
    start_line = (row.file, row.line)
    for _ in range(MAX_STEPS):
        got = t.hart.fetch(t.pc)
        call = got is not None and is_call(*got)
        if over and got is not None and (call or (got == (ECALL, 4) and t.priv == PRIV_U)):
            stop = run_over_call(t, prog, t.pc + got[1])
        else:
            priv = t.priv
            stop = t.stepi()
            if stop.kind == "step" and t.priv != priv:
                continue  # a trap or a return from one: keep going to a statement
        if stop.kind != "step":
            return stop
        cur = t.program_at()
        if cur is None:
            continue
        fn = cur.function(t.pc)
        if fn is not None and fn[1] == 0 and (cur is not prog or start_fn is None
                                              or fn[0] != start_fn[0]):
            # a call (or a tail jump) entered another function
            if not over and cur.row(t.pc) is not None:
                return _through_prologue(t, cur, fn[0])
            ret = t.hart.x(1)
            if call or cur.has_code(ret):
                stop = t.run_to(Location(cur, ret), _same_stack(t, t.sp, t.satp(), t.priv))
                if stop.kind != "step":
                    return stop
            continue
        r = cur.row(t.pc)
        if r is None or not cur.lines.is_stmt_start(cur.linked(t.pc)):
            continue
        left = cur is not prog or (fn is not None and start_fn is not None
                                   and fn[0] != start_fn[0])
        if left or (r.file, r.line) != start_line:
            return Stop("step", t.pc)
    return Stop("step", t.pc, message=f"stopped after {MAX_STEPS} instructions without "
                "reaching another line")


def _through_prologue(t: Target, prog: Program, sym: Symbol) -> Stop:
    """Step into: from a function's entry to its first statement after the prologue."""
    body = prog.after_prologue(sym) if sym.size else sym.addr
    while t.pc < body:
        hit = prog.function(t.pc)
        if hit is None or hit[0] != sym:
            break
        stop = t.stepi()
        if stop.kind != "step":
            return stop
    return Stop("step", t.pc)
