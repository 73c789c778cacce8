"""`harness run` on the terminal: the machine of the command's options booted with the
console attached (harness/run/launch.py's console_boot), the AI device and the model's guest
files added, the monitor and the race detectors attached, and the trace written at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from harness.machine.board import Machine
from harness.machine.config import MachineConfig, RunResult
from harness.run.det_options import DetRun
from harness.run.launch import add_ai_device
from harness.run.terminal_boot import HOST_LOG, console_boot

if TYPE_CHECKING:
    from harness.devices.ai_faults import FaultPlan
    from harness.engines.remote import RemoteEngine


@dataclass
class ConsoleRun:
    """What `harness run` boots on the terminal (the options, checked)."""

    config: MachineConfig
    det: DetRun
    model: str | None = None           # the AI device's model, if any
    plan: FaultPlan | None = None      # --ai-fault
    engine: RemoteEngine | None = None  # --engine
    quiet: bool = False
    trace: Path | None = None          # --trace FILE
    # what else to attach before each boot (the monitor of `harness run --monitor`):
    # machine -> what to call when the boot ends
    attach: Callable[[Machine], Callable[[], None]] | None = None
    serve: Callable[[Machine], RunResult] | None = None  # --gdb: the machine served
    interactive: bool = True


def boot_on_console(r: ConsoleRun) -> int:
    """Boot r on the terminal to the end; the process exit code."""
    config, det = r.config, r.det
    ai_model, model = det.model(r.model)
    if det.replayer is not None:  # the recorded machine (before its devices are added)
        config.cmd = det.replayer.journal.header.get("cmd", "")
    created: list[Any] = []
    console = bytearray()  # with --trace: llmrun's own stamps (tokenize, shown) are in it
    if model is not None:
        add_ai_device(config, ai_model, log=None if r.quiet else HOST_LOG, plan=r.plan,
                      allow_load=(model,), created=created, engine=r.engine)
        add_model_files(config, model, r.quiet, remote=r.engine is not None)
    det.configure(config, model)
    try:
        return console_boot(config, interactive=r.interactive, quiet=r.quiet, serve=r.serve,
                            attach=_attach(r), tee=None if r.trace is None else console.extend,
                            on_end=det.end if det.on else None)
    finally:
        for dev in created:
            if dev.injector is not None and not r.quiet:
                click.echo(dev.injector.summary(dev.requests), err=True)
        if r.trace is not None:
            _write_trace(r.trace, created, console)


def _attach(r: ConsoleRun) -> Callable[[Machine], Callable[[], None]] | None:
    """console_boot's `attach`: r.attach (the monitor), then the race detectors."""
    attach = r.attach
    if r.det.race is None:
        return attach
    det = r.det

    def both(machine: Machine) -> Callable[[], None]:
        end_race = det.attach_race(machine, stop=False)
        end_other = attach(machine) if attach is not None else None

        def detach() -> None:
            if end_other is not None:
                end_other()
            end_race()

        return detach

    return both


def _write_trace(path: Path, created: list[Any], console: bytearray) -> None:
    """--trace FILE: every boot's AI device events, with llmrun's stamps from the console."""
    from harness.run import trace as ai_trace

    boots = [(f"boot {i + 1}", list(d.trace)) for i, d in enumerate(created)]
    if boots:  # the stamps name their requests; reqids count from 1 each boot
        boots[-1][1].extend(ai_trace.console_stages(console.decode(errors="replace")))
    n = ai_trace.write_trace(path, boots)
    click.echo(f"[harness] wrote {n} trace events to {path}", err=True)


def add_model_files(config: MachineConfig, model: str, quiet: bool, *,
                      remote: bool = False) -> None:
    """The model's guest files, under /AI/SMOL or /AI/QWEN: the guest tokenizer's
    vocabulary (VOCAB.TOK, harness/guest/bpe_host.py) and, for course assets, their
    PMT.BIN / EXP.BIN, where the lab's aitest reads its reference prompt and answer (the
    weights stay on the host, in the AI device). In memory only: not with --persist.
    `remote`: `model` is a served name; its tokenizer is found as the remote backend finds
    it (harness/engines/remote.py)."""
    if remote:
        from harness.engines.remote import tokenizer_spec

        model = tokenizer_spec(model) or model
    from harness.guest.bpe_host import vocab_files
    from pyllm.errors import PyllmError
    from pyllm.loaders.course_assets import reference_files
    from pyllm.registry import resolve

    files: dict[str, bytes] = {}
    try:
        files.update(reference_files(resolve(model)[1]))
    except PyllmError:
        pass  # not course assets, or reported by the device when it loads them
    try:
        files.update({k.removeprefix("AI/"): v for k, v in vocab_files(model).items()})
    except PyllmError as exc:  # no tokenizer: the guest's tok cannot run, all else can
        if not quiet:
            click.echo(f"[harness] no guest tokenizer vocabulary: {exc}", err=True)
    if not files:
        return
    if config.persist:
        if not quiet:
            click.echo(f"[harness] --persist: {', '.join(sorted(files))} are not copied "
                       "into the guest's /AI", err=True)
        return
    from harness.disk.fsbuild import with_files
    from harness.disk.fslayout import FsError

    try:
        image = with_files(Path(config.fs).read_bytes(),
                           {f"AI/{name}": data for name, data in files.items()}, grow=True)
    except (OSError, FsError) as exc:
        raise click.ClickException(f"cannot add the model's files to "
                                   f"{config.fs}: {exc}") from None
    config.disk_data = bytearray(image)
    if not quiet:
        click.echo(f"[harness] /AI: {', '.join(sorted(files))} from the model", err=True)
