"""`--schedule`, `--record` and `--replay` of `harness run` and `harness debug`: a
deterministic machine set up from the options, and what is said when its run ends.

- `--schedule SPEC` (rr, random:SEED, pct:SEED[:DEPTH]; harness/det/schedule.py) makes the
  machine deterministic: the same options give the same run, instruction for instruction.
- `--record FILE` writes the journal of such a run (the schedule is rr unless given);
  `--replay FILE` runs it again from the journal, with the recorded options, and checks
  that it ended the same (instructions, console bytes, RAM hash). A replay loads no model:
  the AI device's results come from the journal.
- Every deterministic run ends with one line: its instruction count and the hashes of its
  console output and final RAM (two runs agree when these do); a panic or fault adds the
  command that replays the run to the instruction where it stopped.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from harness.det.journal import JournalError
from harness.det.mode import ram_hash
from harness.det.schedule import ScheduleSpec
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig, RunResult
from harness.run.recording import Replay, check_replay, finish_recording, new_recording


@dataclass
class DetRun:
    """The deterministic options of one command, applied to its MachineConfig."""

    schedule: str | None = None
    record: Path | None = None
    replay: Path | None = None
    command: str = "run"          # the harness subcommand, for the replay hint
    replayer: Replay | None = None
    race: str | None = None       # "all" (--race), "locks" (--race-locks) or None

    @property
    def on(self) -> bool:
        return (self.schedule is not None or self.record is not None or self.replay is not None
                or self.race is not None)

    def check(self, **conflicts: Any) -> None:
        """--replay fixes the machine: options that would change it are refused."""
        if self.replay is None:
            return
        if self.schedule is not None or self.record is not None:
            raise click.UsageError("--replay takes the schedule from the recording: give no "
                                   "--schedule or --record with it")
        given = [f"--{k.replace('_', '-')}" for k, v in conflicts.items() if v]
        if given:
            raise click.UsageError(f"--replay takes the machine from the recording: drop "
                                   f"{', '.join(given)}")

    def model(self, model: str | None) -> tuple[Any, str | None]:
        """(what to give the AI device, the model's name for its guest files): a
        replay's own (its name, or a stand-in for a model that was handed over loaded;
        nothing is loaded either way), else `model`."""
        if self.replay is None:
            return model, model
        try:
            self.replayer = Replay.open(self.replay)
        except JournalError as e:
            raise click.ClickException(str(e)) from None
        return self.replayer.ai_model(), self.replayer.model

    def configure(self, config: MachineConfig, model: str | None) -> None:
        """Set config's schedule and journal, once its disk is final (a recording holds
        the disk's hash; a replay checks it)."""
        if self.replayer is not None:
            try:
                self.replayer.configure(config)
            except JournalError as e:
                raise click.ClickException(str(e)) from None
            return
        if not self.on:
            return
        default = "random:1" if self.race is not None else "rr"
        try:
            config.schedule = ScheduleSpec.parse(self.schedule or default)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--schedule") from None
        config.clock = "icount"
        if self.record is not None:
            config.journal = new_recording(config, model)

    def attach_race(self, machine: Machine, stop: bool) -> Callable[[], None]:
        """The race detectors on machine (harness/race/attach.py); each finding printed
        as it is found, and with `stop` (the debugger) the machine paused at it. Returns
        what ends them (their summary printed)."""
        from harness.guest.programs import Program
        from harness.race.attach import attach
        from harness.run.race_seeds import render_with

        kernel = Program("kernel", machine.config.kernel, user=False)

        def report(f: Any) -> None:
            click.echo("\r\n" + render_with(f, kernel).replace("\n", "\r\n") + "\r", err=True)
            if stop:
                machine.pause(f"race detector: {f.kind}", before=f.kind != "data race")

        d = attach(machine, kernel, data=self.race == "all", on_report=report)

        def detach() -> None:
            d.close()
            click.echo(d.summary(), err=True)

        return detach

    def end(self, machine: Machine, result: RunResult) -> None:
        """The end of a deterministic run: its summary line; the recording written; a
        replay checked against it; the replay hint after a panic or fault."""
        det = machine.det
        if det is None:
            return
        line = (f"[harness] deterministic run ({det.spec}): {det.counter.total} "
                f"instructions, console {machine.console_hash.hexdigest()[:16]}, "
                f"RAM {ram_hash(machine.ram.view)[:16]}")
        click.echo(line, err=True)
        if self.record is not None and result.exit != Exit.RESET:
            size = finish_recording(machine, result, self.record)
            click.echo(f"[harness] recorded {size / 1024:.1f} KiB to {self.record}; run it "
                       f"again: harness {self.command} --replay {shlex.quote(str(self.record))}",
                       err=True)
        if self.replayer is not None:
            diffs = check_replay(machine, result)
            if diffs:
                click.echo("[harness] the replay DIVERGED from the recording: "
                           + "; ".join(diffs), err=True)
            else:
                click.echo("[harness] replay identical to the recording (instructions, "
                           "console, RAM)", err=True)
        if result.exit in (Exit.PANIC, Exit.FAULT, Exit.HANG):
            hint = self.replay_hint(machine, result)
            if hint:
                click.echo(f"[harness] to be there again: {hint}", err=True)

    def replay_hint(self, machine: Machine, result: RunResult) -> str:
        """The command that replays this run up to where it stopped, in the debugger."""
        det = machine.det
        if det is None:
            return ""
        from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

        at = det.counter.total
        cfg = machine.config
        files = "".join(f" --{name} {shlex.quote(str(path))}" for name, path, default in
                        (("kernel", cfg.kernel, DEFAULT_KERNEL), ("fs", cfg.fs, DEFAULT_FS))
                        if Path(path).resolve() != Path(default).resolve())
        src = self.record or self.replay
        if src is not None:
            return (f"harness debug --replay {shlex.quote(str(src))}{files} "
                    f"--ex 'goto {at - 1}' --ex bt")
        if not cfg.cmd:
            return "(an interactive run: add --record FILE to replay it)"
        mem = f" --mem {cfg.ram_size >> 20}M" if cfg.ram_size != 128 << 20 else ""
        return (f"harness debug --schedule {det.spec} --cpus {len(machine.cpus)}{mem}{files} "
                f"-c {shlex.quote(cfg.cmd)} --ex 'goto {at - 1}' --ex bt")
