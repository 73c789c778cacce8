"""`--record FILE` and `--replay FILE`: a deterministic run written down and run again.

A recording is a journal (harness/det/journal.py) with a header that says how to build the
same machine (the options, the schedule, the model's name, hashes of the kernel and of
the disk image as the guest saw it) and an end record that says where the run ended
(instructions per hart, the console's and the RAM's hashes, the exit). `replay_config`
rebuilds the machine from the header; `check_replay` compares a replay's end with the
recorded one and names what differs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.det.journal import Journal, JournalError, file_hash
from harness.det.mode import ram_hash
from harness.det.schedule import ScheduleSpec
from harness.machine.board import Machine
from harness.machine.config import MachineConfig, RunResult


def disk_hash(config: MachineConfig) -> str:
    """The disk the guest will see: the in-memory image when there is one, else the file."""
    if config.disk_data is not None:
        return hashlib.blake2b(bytes(config.disk_data), digest_size=16).hexdigest()
    return file_hash(config.fs)


def new_recording(config: MachineConfig, model: str | None) -> Journal:
    """An empty journal whose header describes `config` (deterministic: schedule set)."""
    assert config.schedule is not None
    return Journal(header={
        "schedule": str(config.schedule), "cpus": config.cpus, "mem": config.ram_size,
        "cmd": config.cmd, "model": model, "kernel": str(config.kernel),
        "kernel_hash": file_hash(config.kernel), "fs": str(config.fs),
        "disk_hash": disk_hash(config),
    })


def end_record(machine: Machine, result: RunResult) -> dict[str, Any]:
    """Where a deterministic run ended (the recording's last line)."""
    det = machine.det
    assert det is not None
    return {"total": det.counter.total, "counts": det.counter.counts(),
            "time": machine.clock.insns, "exit": result.exit.value, "status": result.status,
            "console": machine.console_hash.hexdigest(), "ram": ram_hash(machine.ram.view)}


def finish_recording(machine: Machine, result: RunResult, path: Path) -> int:
    """Write the recording of a finished run; its size in bytes."""
    assert machine.det is not None
    j = machine.det.journal
    j.end = end_record(machine, result)
    return j.write(path)


@dataclass
class ReplayModel:
    """A loaded model's stand-in in a replay: the device sees a ready model named `spec`
    (harness/det/mode.py's load_model serves the recording instead of calling it)."""

    spec: str

    def close(self) -> None:
        pass


@dataclass
class Replay:
    """A recording opened for replay, and the options it fixes."""

    journal: Journal
    path: Path

    @classmethod
    def open(cls, path: Path) -> Replay:
        return cls(Journal.read(path), path)

    @property
    def model(self) -> str | None:
        return self.journal.header.get("model")

    def ai_model(self) -> str | ReplayModel | None:
        """What to give the AI device (harness/run/launch.py add_ai_device): the model's name
        if the recorded device loaded it itself, a stand-in if it was handed a loaded
        model; either way nothing is loaded (the journal serves it)."""
        first = next((r for r in self.journal.loads if r.n == 0), None)
        if first is not None and first.ready:
            return ReplayModel(first.spec)
        return self.model

    def configure(self, config: MachineConfig) -> None:
        """Set what the recording fixes on `config` (kernel and disk stay the caller's;
        checked against the recorded hashes)."""
        h = self.journal.header
        try:
            config.schedule = ScheduleSpec.parse(h["schedule"])
            config.cpus, config.ram_size, config.cmd = int(h["cpus"]), int(h["mem"]), h["cmd"]
        except (KeyError, ValueError, TypeError) as exc:
            raise JournalError(f"{self.path}: the header is damaged ({exc})") from None
        config.journal = self.journal
        config.clock = "icount"
        if file_hash(config.kernel) != h.get("kernel_hash"):
            raise JournalError(f"{self.path} was recorded with another kernel than "
                               f"{config.kernel} (recorded: {h.get('kernel')}); a replay "
                               "needs the same kernel build")
        if disk_hash(config) != h.get("disk_hash"):
            raise JournalError(f"{self.path} was recorded with another disk than this "
                               f"one ({config.fs}; recorded: {h.get('fs')})")


def check_replay(machine: Machine, result: RunResult) -> list[str]:
    """What a replay's end does not share with the recording's (empty: identical)."""
    det = machine.det
    assert det is not None and det.journal.replaying
    want = det.journal.end
    if want is None:
        return ["the recording has no end record (the recorder did not finish)"]
    got = end_record(machine, result)
    names = {"total": "instructions", "counts": "instructions per hart", "exit": "exit",
             "status": "exit status", "console": "console output", "ram": "final RAM",
             "time": "guest time"}
    return [f"{names[k]}: recorded {want.get(k)}, replayed {got[k]}"
            for k in names if want.get(k) != got[k]]
