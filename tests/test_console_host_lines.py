"""harness/run/terminal.py: host messages never cut a guest line in two."""

from __future__ import annotations

import os
import time

from harness.run.terminal import HOLD_S, Console


def _console() -> tuple[Console, int]:
    r, w = os.pipe()            # guest output and host messages share one pipe, as on a tty
    os.set_blocking(r, False)
    return Console(lambda d: None, lambda why: None, stdin_fd=r, stdout_fd=w, stderr_fd=w), r


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


def test_a_message_waits_for_the_guests_newline() -> None:
    c, r = _console()
    c.write(b"dev   uart16550 0x10000000 i")
    c.host_line("[ai] model smol ready")
    c.write(b"rq 10\nboot ")
    c.write(b"22 ms\n")
    assert _read(r) == b"dev   uart16550 0x10000000 irq 10\n[ai] model smol ready\nboot 22 ms\n"


def test_at_a_line_start_a_message_goes_out_at_once() -> None:
    c, r = _console()
    c.write(b"$ ls\n")
    c.host_line("[ai] x")
    assert _read(r) == b"$ ls\n[ai] x\n"


def test_a_guest_that_never_ends_its_line_is_cut_after_hold_s() -> None:
    c, r = _console()
    c.write(b"$ ")
    c.host_line("[ai] late")
    assert _read(r) == b"$ "
    time.sleep(HOLD_S + 0.3)
    assert _read(r) == b"\n[ai] late\n"
    c.write(b"ls\n")                # the guest's line continues on the next one
    assert _read(r) == b"ls\n"


def test_the_end_of_a_run_prints_what_is_held() -> None:
    c, r = _console()
    c.write(b"partial")
    c.host_line("[ai] bye")
    c.flush_held()
    assert _read(r) == b"partial\n[ai] bye\n"
