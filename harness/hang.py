"""Hang detection: a guest that makes no progress for N seconds is stopped and reported.

Progress is anything a user would see move (checked between runs, and at least every
CHECK_S seconds, so a kernel spinning with interrupts off is stopped to look at it):

- a synchronous trap delivered (every system call, every user page fault);
- a byte on the console;
- the hart found in user mode when a run ends (a user program computing).

Time does not count while the guest waits legitimately: it is idle (`wfi`) and something
will wake it: a timer deadline is armed (some process is in `sleep(n)`; the kernel
disarms the timer when nobody sleeps), a device has work in flight (`Device.busy()`:
the AI device computing a request or loading a model, which may take minutes), or the
console may still bring input (the interactive shell: `MachineConfig.cmd` is empty).
So a deadlocked kernel (everything asleep, nothing pending: a lost wakeup) is found
after N seconds, and so is a kernel loop that never returns to user mode, while a
`sleep 600` or a slow device are not hangs.

`format_hang_report` adds the process table to the usual panic report: every process
with its state, what it sleeps on (the wait channel, symbolised) and its kernel
backtrace from the context saved by its last `swtch`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from harness.clock import NEVER
from harness.hart import PRIV_U, REG_PRIV

if TYPE_CHECKING:
    from harness.machine import Machine

CHECK_S = 1.0   # look at least this often (a run is stopped for it)


class HangWatch:
    """Tracks guest progress for one machine (emulation thread only)."""

    def __init__(self, machine: Machine, timeout_s: float) -> None:
        self.m = machine
        self.timeout_ns = int(timeout_s * 1e9)
        self.interval_ns = int(min(CHECK_S, timeout_s / 4) * 1e9)
        self._key: tuple[int, int] = (-1, -1)
        self._user = False
        self.last_progress = time.monotonic_ns()
        self.next_check = self.last_progress + self.interval_ns
        self.checks = 0
        self.waiting_s = 0.0  # idle time spent legitimately waiting (not counted)

    def restart(self) -> None:
        """A run (re)starts: time spent paused in a debugger is not a hang."""
        now = time.monotonic_ns()
        self.last_progress = now
        self.next_check = now + self.interval_ns

    def after_run(self) -> None:
        """Sample the privilege at the end of a run (cheap: one register read)."""
        if self.m.hart.get(REG_PRIV) == PRIV_U:
            self._user = True

    def _progress_key(self) -> tuple[int, int]:
        m = self.m
        return sum(m.traps.counts.values()), m.uart.tx_count

    def legit_wait(self) -> str:
        """Why an idle guest is waiting legitimately, or "" if nothing can wake it."""
        m = self.m
        if not m.idle:
            return ""
        if m.clint.mtimecmp < NEVER:
            return "timer armed"
        busy = [d.name for d in m.devices.values() if d.busy()]
        if busy:
            return f"{', '.join(busy)} busy"
        if not m.config.cmd:
            return "waiting for console input"
        return ""

    def check(self, now: int) -> str:
        """Called by the run loop when now >= next_check: "" or why the guest hangs."""
        self.checks += 1
        self.next_check = now + self.interval_ns
        key = self._progress_key()
        if key != self._key or self._user:
            self._key, self._user = key, False
            self.last_progress = now
            return ""
        if self.legit_wait():
            self.waiting_s += (now - self.last_progress) / 1e9
            self.last_progress = now
            return ""
        if now - self.last_progress < self.timeout_ns:
            return ""
        secs = self.timeout_ns / 1e9
        if self.m.idle:
            return (f"no progress for {secs:g} s: every process sleeps and nothing will "
                    "wake the guest (idle in wfi, no timer armed, no device busy, no "
                    "console input possible): a lost wakeup or a deadlock")
        return (f"no progress for {secs:g} s: the kernel runs without returning to user "
                "mode, making a system call or printing (a loop in the kernel?)")


def format_processes(m: Machine) -> str:
    """The process table with wait channels and kernel backtraces, read through the
    kernel's DWARF (harness/debug/procs.py); a line saying why if it cannot be read."""
    try:
        from harness.debug.procs import ProcTable
        from harness.debug.programs import Program
        from harness.debug.vmem import AddressSpace, Phys

        kernel = Program("kernel", m.config.kernel, user=False)
        phys = Phys(m)
        table = ProcTable(kernel, phys)
        kpt_sym = kernel.dwarf.variable("kernel_pagetable")
        root = phys.u64(kpt_sym.addr) if kpt_sym is not None else None
        space = AddressSpace(phys, root, "kernel") if root else None
        ctx = table.ptype.field("context")
        procs = table.all()
        current = table.current_addr()
    except Exception as exc:  # the report must never fail the harness
        return f"process table: cannot be read ({exc})"
    elf = m.kernel
    out = [f"process table ({len(procs)} processes):",
           "  pid  ppid  state      killed  name             waits on / kernel backtrace"]
    for p in procs:
        chan = ""
        if p.state == "sleeping" and p.chan:
            chan = elf.symbolize(p.chan) or f"{p.chan:#x}"
        mark = "  <- on the CPU" if p.addr == current else ""
        out.append(f"  {p.pid:<4} {p.ppid:<5} {p.state:<10} {p.killed:<7} {p.name:<16} "
                   f"{chan}{mark}".rstrip())
        if space is not None and ctx is not None and p.state in ("sleeping", "runnable") \
                and p.addr != current:
            frames = _saved_backtrace(space, phys, p.addr + ctx.offset, elf)
            if frames:
                out.append("        " + " <- ".join(frames))
    return "\n".join(out)


def _saved_backtrace(space, phys, ctx_addr: int, elf, limit: int = 12) -> list[str]:  # noqa: ANN001
    """Return addresses from a struct context saved by swtch: ra, then the s0 chain."""
    ra, s0 = phys.u64(ctx_addr), phys.u64(ctx_addr + 16)
    frames = []
    pc, fp = ra, s0
    for _ in range(limit):
        if not pc:
            break
        name = elf.symbolize(pc - 1) if pc else ""
        frames.append(name.split("+")[0] if name else f"{pc:#x}")
        if not fp:
            break
        raw = space.vread(fp - 16, 16)
        if raw is None:
            break
        fp, pc = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
    return frames
