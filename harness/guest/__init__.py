"""Reading the guest: what the harness knows about the kernel and processes in a machine.

Used by the fault report (harness/run/fault_report.py), the hang report
(harness/guest/process_table.py) and the debugger (harness/debug/). It depends only on the hart
(register access, passed in as a parameter, so each hart of a machine can be read), RAM, the ELF
reader and the C headers, never on the machine or the debugger. One file per concept:

    elf.py         ELF images: loadable segments, symbols, source lines
    memory.py      physical RAM and Sv39 address spaces, walked in Python
    lines.py       DWARF line tables (address <-> file:line, statement starts)
    dwarf.py       DWARF types and global variables
    datanames.py   an address as the variable or member it belongs to (`kmem.freelist`)
    locals.py      a frame's locals and arguments from DWARF location lists
    programs.py    the kernel and user-program ELFs; location specs (func, file:line, *addr)
    procs.py       the kernel's process table, read from guest memory
    spaces.py      one guest: its programs, processes and address spaces (which one an
                   address is read in)
    backtrace.py   the frame-pointer walk and its Frame: kernel, trap frame records, the
                   user frames below a trap, and a sleeping process's saved context
    process_table.py  the process table with wait channels and backtraces (hang reports)
    aiservice.py   the kernel's AI service (slots, queue, workers) read from RAM
    channels.py    a wait channel of the AI service in words, and who will wake it
    bpe_host.py    the guest's tokenizer (user_c/bpe.c) on the host: its vocabulary file,
                   the same C compiled for the host, and the comparison with the model's
"""

from __future__ import annotations


class GuestError(Exception):
    """The guest cannot be read as asked (unknown symbol, unmapped address, no debug
    info, ...); the message is meant for the user."""
