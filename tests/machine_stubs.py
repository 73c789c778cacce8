"""Run the bare-metal test stubs of tests/guest_stubs/ (built by make: tests/made.py), shared by
test_machine*.py; `Captured` is the base of every test boot."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.machine.board import Machine
from harness.machine.config import MachineConfig, RunResult
from harness.run.launch import Launch


class Captured:
    """A machine whose console output is captured (harness/run/launch.py's Launch); the base
    of every test boot.

    Subclasses pass their MachineConfig to `__init__`. `run(during)` runs the machine to
    its end while `during(self.target())` runs on a host thread.
    """

    join_timeout = 5.0

    def __init__(self, config: MachineConfig) -> None:
        self.launch = Launch(config)
        self.machine: Machine = self.launch.machine

    @property
    def text(self) -> str:
        return self.launch.text

    def target(self) -> object:
        """What `during` is given."""
        return self

    def run(self, during: Callable[[Any], None] | None = None) -> RunResult:
        """Run to the end; `during(self.target())` runs on a host thread meanwhile."""
        side = (lambda m: during(self.target())) if during else None
        run = self.launch.run(side, join_timeout=self.join_timeout)
        assert run.result is not None
        return run.result

    def wait_for(self, needle: str, timeout: float = 60.0) -> None:
        """Block (helper thread) until needle has appeared in the output."""
        end = time.monotonic() + timeout
        while needle not in self.text:
            if time.monotonic() > end:
                raise AssertionError(f"no {needle!r} in the output:\n{self.text[-2000:]}")
            time.sleep(0.01)


class Run(Captured):
    """A machine running a stub; `during` is given the Machine."""

    def __init__(self, elf: Path, **kw: object) -> None:
        kw.setdefault("timeout", 20.0)
        super().__init__(MachineConfig(kernel=elf, **kw))  # type: ignore[arg-type]

    def target(self) -> object:
        return self.machine
