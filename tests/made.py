"""The tests' guest programs, as `make build` made them (the compiler flags live only in the
makefiles: user_c/user.mk for tests/kernel_progs/, tests/guest_stubs/stubs.mk for the
bare-metal stubs).

`kernel_prog(name)` is build/tests/_<name> (a user program), `stub(name)` build/stubs/<name>.elf.
The first call of a test session runs `make testprogs` once, so a test never runs a program
older than its source; without a cross compiler the test is skipped and says so.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
# the top Makefile's choice of cross compiler (tests that probe the compiler itself use it)
CC = shutil.which("riscv64-unknown-elf-gcc") or shutil.which("riscv64-linux-gnu-gcc")


@functools.cache
def _make() -> tuple[int, str]:
    """(status, output) of the session's one `make testprogs` (-1: no cross compiler)."""
    if CC is None:
        return -1, "no riscv64 cross compiler (make setup)"
    r = subprocess.run(["make", "-s", "testprogs"], cwd=ROOT, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def _made(path: Path) -> Path:
    status, output = _make()
    if status < 0:
        pytest.skip(output)
    if status != 0 or not path.is_file():
        pytest.fail(f"`make testprogs` did not build {path.relative_to(ROOT)} (run make build):"
                    f"\n{output}", pytrace=False)
    return path


def kernel_prog(name: str) -> Path:
    """tests/kernel_progs/<name>.c, built as a user program."""
    return _made(BUILD / "tests" / f"_{name}")


def stub(name: str) -> Path:
    """tests/guest_stubs/<name>.c with start.S and stub.c, a bare-metal ELF."""
    return _made(BUILD / "stubs" / f"{name}.elf")
