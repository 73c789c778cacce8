"""Hang detection (harness/machine/watchdog.py, `harness run --hang-timeout`).

A guest that makes no progress (no trap, no console byte, no user code) for the timeout is
stopped with Exit.HANG, unless it waits legitimately (idle with a timer armed, a device
busy, or console input possible). The stubs in tests/guest_stubs/hang.c make each case
happen on purpose; the CLI cases boot the real kernel.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import made
import pytest
from machine_stubs import Run
from made import CC

from harness.machine.config import Exit

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
needs_cc = pytest.mark.skipif(CC is None, reason="needs riscv64-unknown-elf-gcc")


@pytest.fixture(scope="module")
def stub() -> Path:
    return made.stub("hang")


def _run(elf: Path, cmd: str, hang: float = 1.0, timeout: float = 30.0):  # -> (RunResult, Run, s)
    r = Run(elf, cmd=cmd, timeout=timeout, hang_timeout=hang)
    t0 = time.monotonic()
    res = r.run()
    return res, r, time.monotonic() - t0


@needs_cc
def test_a_kernel_loop_is_a_hang(stub: Path) -> None:
    res, r, took = _run(stub, "spin")
    assert res.exit == Exit.HANG, res
    assert "without returning to user mode" in res.message
    assert 1.0 <= took < 10
    assert "spinning" in r.text


@needs_cc
def test_idle_with_nothing_to_wake_it_is_a_hang(stub: Path) -> None:
    res, _, took = _run(stub, "wfi")
    assert res.exit == Exit.HANG, res
    assert "lost wakeup" in res.message
    assert took < 10


@needs_cc
def test_waiting_for_an_armed_timer_is_not_a_hang(stub: Path) -> None:
    res, r, _ = _run(stub, "timer", hang=0.5)
    assert (res.exit, res.status) == (Exit.POWEROFF, 0), res
    assert "woken" in r.text
    assert r.machine.hang is not None and r.machine.hang.waiting_s > 1.0


@needs_cc
def test_console_output_is_progress(stub: Path) -> None:
    res, r, _ = _run(stub, "talk", hang=0.4)
    assert (res.exit, res.status) == (Exit.POWEROFF, 0), res
    assert r.text.count(".") > 20


def _harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    if not KERNEL.exists():
        pytest.skip("the kernel is not built (make build)")
    return subprocess.run([sys.executable, "-m", "harness", "run", "-q", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_cli_reports_a_deadlock_with_the_process_table() -> None:
    # `cat` with -c has no input and never will: every process sleeps, nothing is armed
    r = _harness("--hang-timeout", "1.5", "--timeout", "60", "-c", "cat")
    assert r.returncode == 103, r.stderr
    err = r.stderr
    assert "=== hang: no progress for 1.5 s" in err
    assert "backtrace (frame pointers):" in err
    assert "process table" in err
    cat = next(line for line in err.splitlines() if " cat " in line)
    assert "sleeping" in cat and "cons" in cat           # its wait channel, symbolised
    assert "consoleread" in err                           # its kernel backtrace
    assert "Traceback" not in err


def test_cli_a_long_sleep_is_not_a_hang() -> None:
    r = _harness("--hang-timeout", "1", "--timeout", "60", "-c", "sleep 3; echo slept")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("slept\n")
