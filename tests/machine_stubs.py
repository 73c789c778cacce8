"""Build and run the bare-metal test stubs of tests/guest_stubs/ (shared by test_machine*.py)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

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


class Run:
    """A machine running a stub, with its console output captured."""

    def __init__(self, elf: Path, **kw: object) -> None:
        self.out = bytearray()
        self.lock = threading.Lock()
        kw.setdefault("timeout", 20.0)
        self.machine = Machine(MachineConfig(kernel=elf, output=self._sink, **kw))  # type: ignore[arg-type]

    def _sink(self, data: bytes) -> None:
        with self.lock:
            self.out += data

    @property
    def text(self) -> str:
        with self.lock:
            return self.out.decode(errors="replace")

    def run(self, during: Callable[[Machine], None] | None = None) -> RunResult:
        """Run to the end; `during(machine)` runs on a host thread meanwhile."""
        t = threading.Thread(target=during, args=(self.machine,), daemon=True) if during else None
        if t:
            t.start()
        try:
            return self.machine.run()
        finally:
            if t:
                t.join(timeout=5)
            self.machine.close()
