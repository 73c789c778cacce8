"""Launching a machine: configuration -> machine with devices -> run -> result.

Every command (`run`, `debug`, `bench*`, `fuzz`, `stress`), the host API
(harness/run/hostapi.py) and the test helpers boot through here:

    config = MachineConfig(kernel=..., fs=..., cmd="echo hi")
    add_ai_device(config, "smol")          # the AI device (with a FaultPlan: the faulty one)
    run = launch(config)                   # boot, run to the end, console captured
    run.output, run.exit, run.status       # GuestRun
    report(run.machine, run.result)        # the panic/fault/hang report ("" if it powered off)
    exit_code(run.result)                  # the process exit status `harness run` gives

A boot on the terminal (`harness run`: raw mode, reboots, signals, the report on stderr)
is harness/run/terminal_boot.py.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

from harness.abi import bootinfo
from harness.devices.ai_protocol import TraceEvent
from harness.devices.virtio_ai import VirtioAi, device_entry
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig, RunResult

if TYPE_CHECKING:
    from harness.devices.ai_faults import FaultPlan
    from harness.engines.base import AiBackend
    from harness.engines.remote import RemoteEngine

ROOT = Path(__file__).resolve().parents[2]
DEMO_QUESTION = "Tell me the capital of France."  # harness run --demo
DEMO_TEXT = "The capital of France is"  # --demo --raw: continued as raw text


class ExitCode(IntEnum):
    """Process exit codes besides the guest's own status (0-255)."""

    PANIC = 101        # the kernel panicked (POWER_FAIL)
    FAULT = 102        # the machine stopped the guest (unknown MMIO, unmapped memory, ...)
    HANG = 103         # no guest progress for --hang-timeout seconds (harness/machine/watchdog.py)
    TIMEOUT = 124      # --timeout passed (like coreutils timeout)
    INTERRUPTED = 130  # a signal, or the run was stopped other than by Ctrl-A X


def exit_code(result: RunResult) -> int:
    """The exit status of a run: the guest's when it powered off, else an ExitCode (0 for
    the user's own Ctrl-A X)."""
    if result.exit == Exit.POWEROFF:
        return result.status & 0xFF
    if result.exit == Exit.QUIT:
        return 0 if result.message == "Ctrl-A X" else ExitCode.INTERRUPTED
    return {Exit.TIMEOUT: ExitCode.TIMEOUT, Exit.HANG: ExitCode.HANG,
            Exit.PANIC: ExitCode.PANIC}.get(result.exit, ExitCode.FAULT)


# ---------------------------------------------------------------- devices
def add_ai_device(config: MachineConfig, model: str | AiBackend, *,
                  log: Callable[[str], None] | None = None, plan: FaultPlan | None = None,
                  allow_load: tuple[str, ...] = (),
                  created: list[VirtioAi] | None = None,
                  engine: RemoteEngine | None = None) -> None:
    """Plug the AI device (harness/devices/virtio_ai.py) in at VIRTIO1 serving `model`
    (a name it loads, or a ready backend such as a LoadedModel); names are loaded in
    process, or with `engine` (--engine URL) asked of that server (harness/engines/).
    With a FaultPlan, faults are injected in front of the backend
    (harness/devices/ai_faults.py). The device built is appended to `created`;
    `allow_load`: the names it may load (see device_entry)."""
    injector = None
    if plan is not None:
        from harness.devices.ai_faults import FaultInjector

        injector = functools.partial(FaultInjector, plan)  # a new one per device built

    entry = device_entry(model, log=log, allow_load=allow_load, created=created,
                         loader=engine.loader if engine is not None else None,
                         injector=injector)
    config.extra_devices.append(entry)
    config.flags |= bootinfo.F_AIDEV


def ai_device(machine: Machine) -> VirtioAi | None:
    """The machine's AI device, if it has one."""
    return next((d for d in machine.devices.values() if isinstance(d, VirtioAi)), None)


# ---------------------------------------------------------------- captured runs
class Capture:
    """A console sink that keeps every byte (thread-safe) and passes it on to `echo`."""

    def __init__(self, echo: Callable[[bytes], None] | None = None) -> None:
        self.echo = echo
        self._out = bytearray()
        self._lock = threading.Lock()

    def __call__(self, data: bytes) -> None:
        with self._lock:
            self._out += data
        if self.echo is not None:
            self.echo(data)

    @property
    def text(self) -> str:
        """Everything so far, as the guest sent it."""
        with self._lock:
            return self._out.decode(errors="replace")


@dataclass
class GuestRun:
    """What one boot produced."""

    output: str                 # console text ("\\r\\n" folded to "\\n")
    exit: Exit
    status: int                 # guest exit status (POWEROFF) or failure code
    message: str                # the harness's reason for FAULT/PANIC/TIMEOUT/QUIT
    wall_s: float
    trace: list[TraceEvent] = field(default_factory=list)
    device: VirtioAi | None = None
    machine: Machine | None = None  # closed; still readable for a panic/fault report
    result: RunResult | None = None

    @property
    def ok(self) -> bool:
        return self.exit == Exit.POWEROFF and self.status == 0


class Launch:
    """One boot: the machine built from `config`, its console captured (and passed to
    `echo`). `run` runs it to the end."""

    def __init__(self, config: MachineConfig, *,
                 echo: Callable[[bytes], None] | None = None) -> None:
        self.console = Capture(echo)
        config.output = self.console
        self.t0 = time.perf_counter()
        self.machine = Machine(config)

    @property
    def text(self) -> str:
        return self.console.text

    def run(self, during: Callable[[Machine], None] | None = None, *,
            join_timeout: float = 10.0,
            before_close: Callable[[Machine], None] | None = None) -> GuestRun:
        """Run to the end; `during(machine)` runs on a host thread meanwhile (joined for
        at most join_timeout s); `before_close(machine)` runs before the devices close."""
        m = self.machine
        side = threading.Thread(target=during, args=(m,), daemon=True) if during else None
        try:
            if side is not None:
                side.start()
            result = m.run()
        finally:
            if side is not None:
                side.join(timeout=join_timeout)
            if before_close is not None:
                before_close(m)
            m.close()
        dev = ai_device(m)
        return GuestRun(self.text.replace("\r\n", "\n"), result.exit, result.status,
                        result.message, time.perf_counter() - self.t0,
                        list(dev.trace) if dev else [], dev, m, result)


def launch(config: MachineConfig, *, echo: Callable[[bytes], None] | None = None,
           during: Callable[[Machine], None] | None = None,
           before_close: Callable[[Machine], None] | None = None) -> GuestRun:
    """Boot `config`, run it to the end with the console captured: see Launch."""
    return Launch(config, echo=echo).run(during, before_close=before_close)


# ---------------------------------------------------------------- reports
def report(machine: Machine, result: RunResult) -> str:
    """The report of a run that did not power off (harness/run/fault_report.py; for a hang also
    the process table, harness/machine/watchdog.py); "" if it powered off."""
    if result.exit == Exit.POWEROFF:
        return ""
    from harness.run.fault_report import format_report

    text = format_report(machine, result)
    if result.exit == Exit.HANG:
        text += "\n" + processes(machine)
    return text


def processes(machine: Machine) -> str:
    """The process table of a machine's guest (harness/guest/process_table.py)."""
    from harness.guest.process_table import format_processes
    from harness.machine.guest_view import machine_guest

    try:
        guest = machine_guest(machine)
    except Exception as exc:  # the report must never fail the harness
        return f"process table: cannot be read ({exc})"
    return format_processes(guest)
