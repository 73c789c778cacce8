"""Run the bare-metal test stubs of tests/guest_stubs/ (built by make: tests/made.py), shared by
test_machine*.py; `Captured` is the base of every test boot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.machine import Machine, MachineConfig, RunResult


class Captured:
    """A Machine whose console output is captured; the base of every test boot.

    Subclasses build `self.machine` with `output=self._sink`. `run(during)` runs the
    machine to its end while `during(self.target())` runs on a host thread.
    """

    join_timeout = 5.0
    machine: Machine

    def __init__(self) -> None:
        self._out = bytearray()
        self._lock = threading.Lock()

    def _sink(self, data: bytes) -> None:
        with self._lock:
            self._out += data

    @property
    def text(self) -> str:
        with self._lock:
            return self._out.decode(errors="replace")

    def target(self) -> object:
        """What `during` is given."""
        return self

    def run(self, during: Callable[[Any], None] | None = None) -> RunResult:
        """Run to the end; `during(self.target())` runs on a host thread meanwhile."""
        t = threading.Thread(target=during, args=(self.target(),), daemon=True) if during else None
        if t:
            t.start()
        try:
            return self.machine.run()
        finally:
            if t:
                t.join(timeout=self.join_timeout)
            self.machine.close()

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
        super().__init__()
        kw.setdefault("timeout", 20.0)
        self.machine = Machine(MachineConfig(kernel=elf, output=self._sink, **kw))  # type: ignore[arg-type]

    def target(self) -> object:
        return self.machine
