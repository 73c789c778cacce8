"""The debugger: `harness debug` (a gdb-like prompt) and the GDB remote stub (`--gdb PORT`).

One file per concept:

    vmem.py         guest memory: physical RAM and Sv39 address spaces walked in Python
    lines.py        DWARF line tables (address <-> file:line, statement starts)
    dwarf.py        DWARF types and global variables (print, info proc)
    locals.py       frame #0's locals and arguments from DWARF location lists
    programs.py     the kernel and user-program ELFs; location specs (func, file:line, *addr)
    procs.py        the kernel's process table, read from guest memory
    breakpoints.py  breakpoints and watchpoints: range-restricted Unicorn hooks
    target.py       run control: resume, one instruction, run to an address; stop reasons
    stepping.py     step/next by source line, nexti, finish
    frames.py       backtraces across the user/kernel boundary
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


class DebugError(Exception):
    """A debugger command cannot do what was asked (unknown symbol, unmapped address,
    no line info, ...); the message is meant for the user."""
