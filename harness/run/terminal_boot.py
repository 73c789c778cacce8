"""A boot on the terminal (`harness run`): the console attached to the terminal (raw mode)
or to stdout, POWER_RESET reboots, SIGTERM/SIGHUP end the run cleanly, the report is
printed on stderr and the exit status returned (`console_boot`). The devices' host messages
go through the running boot's console (`HOST_LOG`) so they never cut a guest line in two.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

import click

from harness.guest.elf import ElfLoadError
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig, RunResult
from harness.run.launch import exit_code, processes
from harness.run.terminal import Console


def new_machine(config: MachineConfig) -> Machine:
    """The machine of a command: a kernel that cannot be loaded or a bad size is one
    line and exit status 1."""
    try:
        return Machine(config)
    except (ElfLoadError, ValueError) as e:
        raise click.ClickException(str(e)) from None


class _HostLog:
    """Where the devices' host messages go: the running boot's console, which keeps them
    from cutting a guest line in two, else straight to stderr."""

    def __init__(self) -> None:
        self.console: Console | None = None

    def __call__(self, msg: str) -> None:
        if self.console is not None:
            self.console.host_line(msg)
        else:
            click.echo(msg, err=True)


HOST_LOG = _HostLog()


def console_boot(config: MachineConfig, *, interactive: bool, quiet: bool,
                 serve: Callable[[Machine], RunResult] | None = None,
                 attach: Callable[[Machine], Callable[[], None]] | None = None,
                 tee: Callable[[bytes], None] | None = None,
                 on_end: Callable[[Machine, RunResult], None] | None = None) -> int:
    """Run the machine on the terminal (rebooting on POWER_RESET) and return the process
    exit code; with `serve` the machine is run by it instead (`harness run --gdb`: served
    to gdb, harness/debug/gdbserver.py). `attach(machine)` runs before each boot and returns
    what to call when it ends (the `--monitor` of harness run); `tee` also gets the
    guest's console output (the `--trace` of harness run reads llmrun's stamps in it);
    `on_end(machine, result)` runs after the end is reported (a deterministic run's
    summary, harness/run/det_options.py)."""
    while True:
        t0 = time.perf_counter()
        holder: list[Machine] = []  # the console exists before the machine it feeds
        console = _console(holder)
        config.output = console.write if tee is None else _both(console.write, tee)
        HOST_LOG.console = console
        machine = new_machine(config)
        holder.append(machine)
        detach = attach(machine) if attach is not None else None
        if not quiet:
            ready_ms = (time.perf_counter() - t0) * 1e3
            click.echo(f"{machine.banner()} (ready in {ready_ms:.0f} ms)", err=True)
        try:
            if interactive:
                with console:
                    result = _run_machine(machine, serve)
            else:
                with _quit_on_signals(machine):
                    result = _run_machine(machine, serve)
        finally:
            if detach is not None:
                detach()
            machine.close()
            console.flush_held()
            HOST_LOG.console = None
        if result.exit != Exit.RESET:
            code = finish(machine, result, quiet)
            if on_end is not None:
                on_end(machine, result)
            return code
        if not quiet:
            click.echo("\r\n[harness] the guest asked for a reset: rebooting", err=True)
        config.disk_data = machine.disk.disk


def _both(a: Callable[[bytes], None], b: Callable[[bytes], None]) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        a(data)
        b(data)

    return write


def _console(holder: list[Machine]) -> Console:
    return Console(lambda data: holder[0].send_input(data),
                   lambda why: holder[0].request_quit(why))


def _run_machine(machine: Machine,
                 serve: Callable[[Machine], RunResult] | None) -> RunResult:
    return machine.run() if serve is None else serve(machine)


def finish(machine: Machine, result: RunResult, quiet: bool) -> int:
    """Say on stderr how the run ended (the report for a panic, fault or hang); the
    process exit code."""
    code = exit_code(result)
    if result.exit == Exit.POWEROFF:
        return code
    if result.exit == Exit.QUIT:
        if not quiet:
            click.echo(f"\r\n[harness] {result.message}", err=True)
        return code
    sys.stdout.flush()
    click.echo("", err=True)
    if result.exit == Exit.TIMEOUT:
        click.echo(f"[harness] {result.message}; the guest was at "
                   f"{result.pc or 0:#x} {machine.kernel.symbolize(result.pc or 0)}", err=True)
        return code
    from harness.run.fault_report import format_report

    click.echo(format_report(machine, result), err=True)
    if result.exit == Exit.HANG:
        click.echo(processes(machine), err=True)
    return code


class _quit_on_signals:
    """SIGTERM/SIGHUP end the run cleanly (the machine stops, output is flushed)."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.old: dict[int, object] = {}

    def __enter__(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.old[sig] = signal.signal(
                sig, lambda n, f: self.machine.request_quit(f"received {signal.Signals(n).name}"))

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
