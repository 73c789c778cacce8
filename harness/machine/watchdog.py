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

The hang report adds the process table (harness/guest/process_table.py) to the usual
panic report.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from harness.cpu.clock import NEVER
from harness.cpu.registers import PRIV_U, REG_PRIV, Hart

CHECK_S = 1.0   # look at least this often (a run is stopped for it)


class Watched(Protocol):
    """What HangWatch reads of its machine (harness/machine/board.py's Machine)."""

    hart: Hart
    traps: Any     # .counts: synchronous traps delivered, by cause
    uart: Any      # .tx_count: bytes sent to the console
    clint: Any     # .mtimecmp: the armed timer deadline (NEVER: none)
    devices: dict[str, Any]  # each with .busy() and .name
    config: Any    # .cmd: "" for the interactive shell
    idle: bool


class HangWatch:
    """Tracks guest progress for one machine (emulation thread only)."""

    def __init__(self, machine: Watched, timeout_s: float) -> None:
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
