"""`harness debug` as a user meets it: the prompt on a terminal (tab completion, repeat
on Enter, history across sessions, Ctrl-C stopping a running guest) and the scripted
`--ex ... --batch` form."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


def debug(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "debug", "--clock", "icount",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_batch_commands_and_exit_status() -> None:
    r = debug("-c", "echo hi", "--batch", "--ex", "break sys_fork", "--ex", "continue",
              "--ex", "bt", "--ex", "delete", "--ex", "continue")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "(debug) break sys_fork\nBreakpoint 1 at 0x" in out
    assert "Breakpoint 1, sys_fork () at kernel_c/sysproc.c:" in out
    assert "--- trap from user space: pid 1 (init) ---" in out
    assert out.rstrip().endswith("hi\n[The guest powered off with status 0]")
    r = debug("-c", "echo hi", "--batch", "--ex", "break nosuch")
    assert r.returncode == 1
    assert 'Function "nosuch" not defined.' in r.stdout


def test_bad_options_are_clear_errors(tmp_path: Path) -> None:
    r = debug("--model", "nosuch-model", "--batch")
    assert r.returncode == 1 and "nosuch-model" in r.stderr
    r = debug("--kernel", str(tmp_path / "none.elf"), "--batch")
    assert r.returncode == 1 and "kernel not found" in r.stderr


def test_script_file(tmp_path: Path) -> None:
    script = tmp_path / "cmds"
    script.write_text("break sys_exec\ncontinue\nprint $prog\ninfo proc\n")
    r = debug("-c", "echo hi", "-x", str(script), "--batch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert '$1 = "sh"' in r.stdout or '$1 = "init"' in r.stdout
    assert "  PID  PPID  STATE" in r.stdout


pexpect = pytest.importorskip("pexpect")


def test_prompt_on_a_terminal(tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path))
    # the host clock: with icount, an idle guest's sleep would end at once; one hart: the
    # stop lines below name no hart
    child = pexpect.spawn(sys.executable, ["-m", "harness", "debug", "--cpus", "1",
                                           "--clock", "host", "-c", "echo hi; sleep 100"],
                          cwd=str(ROOT), env=env, timeout=60, encoding="utf-8")
    try:
        child.expect(r"before its first instruction")
        child.expect_exact("(debug) ")
        child.send("break sys_fo\t")  # Tab completes the symbol
        child.expect_exact("sys_fork")
        child.send("\r")
        child.expect(r"Breakpoint 1 at 0x[0-9a-f]+ <sys_fork\+0x[0-9a-f]+>: file "
                     r"kernel_c/sysproc.c, line \d+\.")
        child.expect_exact("(debug) ")
        child.send("cont\r")
        child.expect(r"Breakpoint 1, sys_fork \(\) at kernel_c/sysproc.c:\d+  "
                     r"\[S-mode, pid 1 \(init\)\]")
        child.expect_exact("(debug) ")
        child.send("info re\t")  # info subcommands complete too
        child.expect_exact("registers")
        child.send(" priv\r")
        child.expect(r"priv\s+0x1\s+S \(supervisor\)")
        child.expect_exact("(debug) ")
        child.send("stepi\r")
        child.expect(r"=> 0x8[0-9a-f]+ <sys_fork\+0x[0-9a-f]+>:")
        child.expect_exact("(debug) ")
        child.send("\r")  # Enter repeats stepi
        child.expect(r"=> 0x8[0-9a-f]+ <")
        child.expect_exact("(debug) ")
        child.send("delete\r")
        child.expect_exact("(debug) ")
        child.send("continue\r")  # the guest now sleeps for 100 s: Ctrl-C stops it
        child.expect_exact("hi")
        child.send("\x03")
        child.expect(r"Program stopped \(Ctrl-C\)\.  \[S-mode, ")
        child.expect_exact("(debug) ")
        child.send("info proc\r")
        child.expect(r"sleeping\s+0\s+\d+\s+sleep\s+0x[0-9a-f]+ <ticks>\r\n")  # its channel
        child.expect_exact("(debug) ")
        child.send("quit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    history = (tmp_path / ".harness_debug_history").read_text().splitlines()
    assert history[:3] == ["break sys_fork", "cont", "info registers priv"]
    assert history[-1] == "quit"
