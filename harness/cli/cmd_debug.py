"""`harness debug`: boot the machine stopped at its first instruction under a gdb-like
debugger, or serve it to gdb-multiarch (`--gdb PORT`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.cli.options import (
    check_model,
    cpus_option,
    det_options,
    engine_options,
    need_file,
    ram_size,
    remote_engine,
)
from harness.engines.remote import RemoteEngine
from harness.guest.programs import Programs
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig
from harness.run.det_options import DetRun
from harness.run.launch import ROOT, add_ai_device
from harness.run.terminal_boot import HOST_LOG, new_machine

DEFAULT_USER = ROOT / "build" / "user"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--command", "cmd", metavar="CMDS",
              help="Shell commands for the guest (as `harness run -c`); default: the "
                   "interactive shell.")
@click.option("--ex", "ex", multiple=True, metavar="DEBUGCMD",
              help="Run this debugger command first (repeatable), e.g. --ex 'break sys_fork'.")
@click.option("-x", "--script", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Run the debugger commands in FILE first (one per line).")
@click.option("--batch", is_flag=True,
              help="Exit after the --ex/-x commands instead of prompting (exit status 1 "
                   "if any of them failed).")
@click.option("--gdb", "gdb_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve the GDB remote protocol on 127.0.0.1:PORT instead of the prompt "
                   "(0: a free port, printed). Connect with gdb-multiarch "
                   "build/kernel/kernel.elf -ex 'target remote :PORT'.")
@click.option("--model", "-m", metavar="MODEL",
              help="Plug in the AI device serving this model (smol, qwen, a path), as "
                   "`harness run --model`.")
@click.option("--mem", "ram", default="128M", show_default=True, callback=ram_size,
              metavar="SIZE", help="Guest RAM, 16M..2G.")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default="build/kernel/kernel.elf",
              help="Kernel ELF (symbols and line tables come from it).")
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default="build/fs.img", help="File-system disk image.")
@click.option("--user-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_USER, show_default="build/user",
              help="Where the user programs' ELFs (_NAME) are, for user symbols.")
@click.option("--clock", type=click.Choice(["host", "icount"]), default="host",
              show_default=True,
              help="Guest time: host (real time) or icount (instruction count: the same "
                   "run every time, and time stands still at the prompt).")
@cpus_option
@engine_options
@det_options
def debug(cmd: str | None, ex: tuple[str, ...], script: Path | None, batch: bool,
          gdb_port: int | None, model: str | None, ram: int, kernel: Path, fs: Path,
          user_dir: Path, clock: str, cpus: int = 1, engine_url: str | None = None,
          engine_timeout: float | None = None, schedule: str | None = None,
          record: Path | None = None, replay: Path | None = None, race: bool = False,
          race_locks: bool = False) -> None:
    """Debug the kernel and user programs: a gdb-like prompt on the stopped machine.

    \b
    The machine starts stopped at the kernel's first instruction. Then, e.g.:
      break sys_fork           (or sh:runcmd, proc.c:270, *0x80001000)
      continue                 Ctrl-C stops the guest again
      bt                       kernel frames, then the user frames below the trap
      next / step / finish     by source line;  stepi / nexti by instruction
      info registers           privilege mode and the S-mode CSRs
      x/8xg $sp   print proc[1]   info proc   info mem   watch nextpid   list
    `help` lists every command; Tab completes commands and symbols.

    \b
    harness debug -c "echo hi" --ex "break sys_fork" --ex continue --ex bt --batch
    harness debug --gdb 1234    then: gdb-multiarch build/kernel/kernel.elf
                                      -ex 'target remote :1234'

    \b
    Going back in time (deterministic machine: --schedule, --record or --replay):
      reverse-stepi / reverse-step / reverse-next / reverse-finish / reverse-continue
      when (the instruction count)   goto N
    harness debug --schedule rr -c usertests --ex 'watch kmem.freelist' ...
    harness debug --replay run.nrec --ex 'goto 1234567' --ex bt
    (gdb-multiarch: reverse-stepi, reverse-continue, reverse-finish through --gdb)
    """
    need_file("kernel", kernel, "build it with `make build`")
    need_file("disk image", fs, "build it with `make build`")
    from harness.debug import DebugError
    from harness.guest.programs import Programs
    from harness.machine.config import MachineConfig
    from harness.run.det_options import DetRun

    det = DetRun(schedule, record, replay, "debug",
                 race="all" if race else "locks" if race_locks else None)
    det.check(command=cmd is not None, model=model is not None)
    config = MachineConfig(kernel=kernel, fs=fs, ram_size=ram, clock=clock, cmd=cmd or "",
                           cpus=cpus)
    _add_model(config, det, model, remote_engine(engine_url, engine_timeout, model))
    try:
        programs = Programs(kernel, user_dir)
    except DebugError as e:
        raise click.ClickException(str(e)) from None
    commands = list(script.read_text().splitlines()) if script else []
    sys.exit(_session(new_machine(config), programs, det, commands + list(ex), batch,
                      gdb_port))


def _add_model(config: MachineConfig, det: DetRun, model: str | None,
               engine: RemoteEngine | None) -> None:
    """The AI device (--model), the recording's machine (--replay), time travel."""
    ai_model, model = det.model(model)
    if det.replayer is not None:
        config.cmd = det.replayer.journal.header.get("cmd", "")
    if model is not None:
        if engine is None and det.replayer is None:
            check_model(model)
        add_ai_device(config, ai_model, log=HOST_LOG, allow_load=(model,), engine=engine)
    det.configure(config, model)
    config.time_travel = det.on


def _session(machine: Machine, programs: Programs, det: DetRun, commands: list[str],
             batch: bool, gdb_port: int | None) -> int:
    """The debugger on `machine` (or the GDB stub with --gdb); the exit status."""
    from harness.debug.commands import Interpreter
    from harness.debug.target import Target

    end_race = det.attach_race(machine, stop=True) if det.race is not None else None
    try:
        target = Target(machine, programs)
        interp = Interpreter(target)
        if gdb_port is not None:
            return _serve_gdb(target, interp, gdb_port)
        code = _prompt(interp, commands, batch, machine.banner())
        if det.on and machine.result is not None:
            det.end(machine, machine.result)
        return code
    finally:
        if end_race is not None:
            end_race()
        machine.close()


def _prompt(interp, commands: list[str], batch: bool, banner: str) -> int:  # noqa: ANN001
    from harness.debug.repl import Repl

    t = interp.t
    entry = t.programs.kernel.describe(t.pc)
    if not batch:
        click.echo(f"{banner}\nThe machine is stopped at {t.pc:#x} <{entry}> before its "
                   "first instruction. `continue` boots it; `help` lists commands.", err=True)
    repl = Repl(interp)
    if batch:
        for line in commands:
            repl.run_command(line, echo=True)
            if interp.quit_requested:
                break
        return 1 if repl.errors else 0
    repl.loop(commands)
    return 0


def _serve_gdb(target, interp, port: int) -> int:  # noqa: ANN001
    from harness.debug.gdbserver import serve
    from harness.run.terminal_boot import finish

    def announce(actual: int) -> None:
        click.echo(f"[harness] GDB stub listening on 127.0.0.1:{actual}; connect with:\n"
                   f"  gdb-multiarch {target.programs.kernel.path} -ex 'target remote "
                   f":{actual}'", err=True)

    result = serve(target, port, announce, monitor=interp.execute)
    return finish(target.m, result, quiet=False)
