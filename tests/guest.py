"""Run shell commands inside the guest, for the user-program tests.

`run_guest(cmds)` boots the machine with `python -m harness run -c` and returns what the
commands printed on the console and the machine's exit status. The commands are wrapped as
`echo BEGIN; (cmds); echo END $?`, so the result holds exactly the commands' output (boot
messages before BEGIN are cut off) and their exit status, whatever else the harness prints.
`run_raw` gives the plain process result, for testing status propagation itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS_IMG = ROOT / "build" / "fs.img"
BEGIN = "=====guest-begin====="
END = "=====guest-end"


@dataclass
class GuestResult:
    """What one scripted guest run produced."""

    output: str  # console output of the commands only, "\r\n" folded to "\n"
    status: int  # exit status of the commands (from `echo END $?`)
    raw: subprocess.CompletedProcess[str]  # the harness process itself


def _build_missing() -> str | None:
    """Why the guest cannot run here, or None."""
    for path in (KERNEL, FS_IMG):
        if not path.exists():
            return f"{path.relative_to(ROOT)} is not built (run make build)"
    return None


# harts of every guest boot that does not ask for its own --cpus; conftest.py runs the
# modules of SMP_MODULES once with each of SMP_CPUS
CPUS = 1
SMP_CPUS = (1, 4)
SMP_MODULES = {"test_shell", "test_userland", "test_kernel", "test_ai_kernel",
               "test_ai_user", "test_reliability_console"}


def run_raw(cmds: str, timeout: float = 120.0, *extra: str) -> subprocess.CompletedProcess[str]:
    """Boot the guest with `harness run -c cmds`; return the finished process."""
    why = _build_missing()
    if why:
        pytest.skip(why)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cpus = () if "--cpus" in extra else ("--cpus", str(CPUS))
    args = [sys.executable, "-m", "harness", "run", "--timeout", str(int(timeout)), *cpus,
            *extra, "-c", cmds]
    # a little slack over the guest timeout, so the harness reports a hang itself
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, errors="replace",
        timeout=timeout + 60, stdin=subprocess.DEVNULL,
    )


def run_guest(cmds: str, timeout: float = 120.0, *extra: str) -> GuestResult:
    """Run cmds in the guest's shell; return their output and exit status (extra: more
    `harness run` options)."""
    proc = run_raw(f"echo {BEGIN}; ({cmds}); echo {END} $?", timeout, *extra)
    out = proc.stdout.replace("\r\n", "\n")
    start = out.find(BEGIN + "\n")
    m = re.search(re.escape(END) + r" (-?\d+)\n", out)
    if start < 0 or m is None:
        raise AssertionError(
            f"guest run did not finish (harness status {proc.returncode})\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return GuestResult(out[start + len(BEGIN) + 1 : m.start()], int(m.group(1)), proc)
