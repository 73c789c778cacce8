"""The process table as a hang report shows it: every process with its state, what it
sleeps on (the wait channel symbolised, or for the AI service in words with who will wake
it: harness/guest/channels.py) and its kernel backtrace from the context saved by its last
`swtch`.
"""

from __future__ import annotations

from harness.guest.spaces import Guest


def format_processes(g: Guest) -> str:
    """The process table with wait channels and kernel backtraces, read through the
    kernel's DWARF (harness/guest/procs.py); a line saying why if it cannot be read."""
    from harness.guest.aiservice import channel_words
    from harness.guest.backtrace import process_backtrace

    try:
        if g.procs is None:
            raise ValueError(g.procs_error)
        table = g.procs
        paged = g.kernel_space().root is not None  # else no saved context can be followed
        procs = table.all()
        current = table.current_addr()
    except Exception as exc:  # the report must never fail the harness
        return f"process table: cannot be read ({exc})"
    kernel = g.programs.kernel
    words = channel_words(g)
    out = [f"process table ({len(procs)} processes):",
           "  pid  ppid  state      killed  name             waits on / kernel backtrace"]
    for p in procs:
        chan = ""
        if p.state == "sleeping" and p.chan:
            chan = words(p.chan)
        mark = "  <- on the CPU" if p.addr == current else ""
        out.append(f"  {p.pid:<4} {p.ppid:<5} {p.state:<10} {p.killed:<7} {p.name:<16} "
                   f"{chan}{mark}".rstrip())
        if paged and p.state in ("sleeping", "runnable") and p.addr != current:
            names = [f.function() if f.function() != "??" else f"{f.pc:#x}"
                     for f in process_backtrace(g, p) if f.program is kernel and f.pc]
            if names:
                out.append("        " + " <- ".join(names))
    return "\n".join(out)
