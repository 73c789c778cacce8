"""The debugger: `harness debug` (a gdb-like prompt) and the GDB remote stub (`--gdb PORT`).

What it reads of the guest (memory, programs, DWARF, processes, backtraces) is in
harness/guest/. One file per concept:

    breakpoints.py  breakpoints and watchpoints: range-restricted Unicorn hooks
    target.py       run control: resume, one instruction, run to an address; stop reasons
    stepping.py     step/next by source line, nexti, finish
    disasm.py       capstone disassembly with resolved, symbolised branch targets
    expr.py         the expression language of print, x, break ... if
    values.py       gdb's notation for values
    commands.py     the command interpreter: dispatch, help, completion
    cmdbase.py      what the commands share (selected frame, locals, stop reports)
    cmd_points.py   break tbreak watch delete disable enable condition
    cmd_exec.py     continue step next stepi nexti finish until input
    cmd_data.py     print set x disassemble
    cmd_info.py     backtrace frame up down list info ...
    repl.py         the prompt: readline history and tab completion
    rsp.py          GDB remote serial protocol framing (transport)
    gdbregs.py      the register map and target.xml (data)
    gdbserver.py    the GDB stub: packet dispatch table, one method per packet
"""

from __future__ import annotations

from harness.guest import GuestError

# A debugger command cannot do what was asked (unknown symbol, unmapped address, no line
# info, ...); the message is meant for the user. The same class as the guest readers'
# error, so what they raise reaches the prompt as it is.
DebugError = GuestError
