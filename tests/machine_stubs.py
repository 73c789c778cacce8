"""Build and run the bare-metal test stubs of tests/guest_stubs/ (shared by test_machine*.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.launch import Launch
from harness.machine import Machine, MachineConfig, RunResult

ROOT = Path(__file__).resolve().parent.parent
STUBS = Path(__file__).resolve().parent / "guest_stubs"
CC = shutil.which("riscv64-unknown-elf-gcc") or shutil.which("riscv64-linux-gnu-gcc")
CFLAGS = ["-march=rv64imac_zicsr_zifencei", "-mabi=lp64", "-mcmodel=medany", "-mno-relax",
          "-O2", "-g", "-Wall", "-Werror", "-ffreestanding", "-fno-builtin", "-nostdlib",
          "-nostartfiles", "-fno-pie", "-no-pie", "-fno-omit-frame-pointer",
          "-fno-stack-protector", "-fno-common", "-I", str(STUBS), "-I", str(ROOT / "kernel_c")]


def build(name: str, outdir: Path) -> Path:
    """Compile guest_stubs/<name>.c (+ start.S, stub.c) into outdir/<name>.elf."""
    assert CC, "riscv64-unknown-elf-gcc is not installed (make setup)"
    out = outdir / f"{name}.elf"
    srcs = [STUBS / "start.S", STUBS / "stub.c", STUBS / f"{name}.c"]
    subprocess.run([CC, *CFLAGS, "-T", str(STUBS / "link.ld"), "-o", str(out),
                    *map(str, srcs)], check=True, capture_output=True, text=True)
    return out


class Captured:
    """A machine whose console output is captured (harness/launch.py's Launch); the base
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
