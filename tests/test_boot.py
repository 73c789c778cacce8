"""Our kernel booted end to end by `python -m harness run` (build/kernel/kernel.elf and
build/fs.img from `make build`): scripted runs, an interactive session on a pty, exit
codes, the panic report and the options of `harness run`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


def harness(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, **kw)


def test_scripted_run_prints_and_exits_with_the_last_status() -> None:
    r = harness("-q", "-c", "echo hi | wc")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("1 1 3\n")
    r = harness("-q", "-c", "echo one; grep zzz words.txt")
    assert r.returncode == 1
    assert "one\n" in r.stdout


def test_banner_names_ram_devices_and_kernel() -> None:
    r = harness("--mem", "64M", "-c", "echo x")
    assert r.returncode == 0
    banner = r.stderr.splitlines()[0]
    for word in ("64 MiB RAM", "uart16550", "plic", "clint", "virtio-blk", "kernel.elf"):
        assert word in banner
    assert "64 MiB" in r.stdout  # the kernel sees the RAM size from bootinfo


def test_icount_clock_boots() -> None:
    r = harness("-q", "--clock", "icount", "-c", "echo deterministic")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (0, "deterministic")


def test_timeout_exits_124() -> None:
    r = harness("-q", "--timeout", "1", "-c", "sleep 1000")
    assert r.returncode == 124
    assert "timed out after 1 s" in r.stderr


def test_kernel_panic_prints_the_report_and_exits_101() -> None:
    from made import stub as made_stub

    stub = made_stub("panic")     # main -> f1 -> f2 -> panic()
    r = harness("-q", "--kernel", str(stub), "-c", "plain")
    assert r.returncode == 101
    err = r.stderr
    assert "=== kernel panic: panic: stub test" in err
    assert "hart 0 in S-mode" in err and "instruction at pc:" in err
    trace = err.split("backtrace (frame pointers):")[1]
    assert "panic+" in trace and "f2+" in trace


@pytest.mark.parametrize("size", [1 << 20, 512])
def test_disk_without_a_file_system_is_refused_at_mount(tmp_path: Path, size: int) -> None:
    blank = tmp_path / "blank.img"
    blank.write_bytes(bytes(size))  # no file system (or not even a superblock)
    r = harness("-q", "--no-fs-check", "--fs", str(blank), "-c", "echo never")
    assert r.returncode == 1, r.stderr
    assert "fsinit: refusing the disk" in r.stdout and "never" not in r.stdout
    assert "panic" not in r.stdout + r.stderr


def test_panic_backtrace_crosses_the_trap_into_the_interrupted_function() -> None:
    """An illegal instruction written over sys_uptime in the running kernel: the report's
    backtrace goes panic <- kerneltrap <- kernelvec <- sys_uptime <- syscall <- usertrap."""
    import threading

    from harness.machine.board import Machine
    from harness.machine.config import Exit, MachineConfig
    from harness.run.fault_report import format_report

    out = bytearray()
    ready = threading.Event()

    def sink(data: bytes) -> None:
        out.extend(data)
        if b"ready" in out:
            ready.set()

    m = Machine(MachineConfig(kernel=KERNEL, fs=FS, cmd="echo ready; sleep 1; uptime",
                              output=sink, timeout=30))

    def corrupt() -> None:
        ready.wait(20)
        m.post(lambda: m.ram.write(m.kernel.symbol("sys_uptime"), bytes(4)))

    threading.Thread(target=corrupt, daemon=True).start()
    try:
        res = m.run()
        assert res.exit == Exit.PANIC, res.message
        assert "illegal instruction" in res.message
        trace = format_report(m, res).split("backtrace (frame pointers):")[1].strip()
    finally:
        m.close()
    names = [line.split()[2].split("+")[0] for line in trace.splitlines()]
    assert names == ["poweroff", "panic", "kerneltrap", "kernelvec", "sys_uptime", "syscall",
                     "usertrap"], trace
    assert "sys_uptime  sysproc.c:" in trace and "trapped here (sepc)" in trace


def test_persist_writes_the_disk_image(tmp_path: Path) -> None:
    img = tmp_path / "fs.img"
    shutil.copy(FS, img)
    assert harness("-q", "--fs", str(img), "-c", "echo kept > note").returncode == 0
    assert harness("-q", "--fs", str(img), "-c", "cat note").returncode != 0  # not persisted
    assert harness("-q", "--persist", "--fs", str(img), "-c", "echo kept > note").returncode == 0
    r = harness("-q", "--fs", str(img), "-c", "cat note")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (0, "kept")


def test_bad_options_are_clear_errors(tmp_path: Path) -> None:
    r = harness("--kernel", str(tmp_path / "nope.elf"), "-c", "echo")
    assert r.returncode != 0 and "kernel not found" in r.stderr
    r = harness("--mem", "12Q", "-c", "echo")
    assert r.returncode != 0 and "not a size" in r.stderr
    (tmp_path / "junk.elf").write_bytes(b"junk")
    r = harness("--kernel", str(tmp_path / "junk.elf"), "-c", "echo")
    assert r.returncode != 0 and "cannot read ELF" in r.stderr


def test_sigterm_stops_cleanly() -> None:
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "-c", "sleep 1000"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    p.stderr.readline()  # the banner: the machine is up
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130
    assert "received SIGTERM" in err


def test_piped_stdin_reaches_the_shell() -> None:
    r = harness("-q", input="echo piped\nhalt\n")
    assert r.returncode == 0
    assert "piped" in r.stdout


pexpect = pytest.importorskip("pexpect")


def _harness_pid(shell_pid: int) -> int:
    import psutil

    for _ in range(100):
        kids = psutil.Process(shell_pid).children()
        if kids:
            return kids[0].pid
        time.sleep(0.05)
    raise AssertionError("the harness process did not start")


def test_interactive_session_on_a_terminal() -> None:
    # `stty -a` after the harness exits shows whether the terminal was restored
    child = pexpect.spawn("/bin/sh", ["-c", f"{sys.executable} -m harness run -q; "
                                            "echo EXIT=$?; stty -a"],
                          cwd=str(ROOT), timeout=30, encoding="utf-8")
    try:
        child.expect(r"\$ ")
        child.send("echo hello there\r")  # Enter on a raw terminal is \r
        child.expect("hello there\r\n")
        child.expect(r"\$ ")
        child.send("ls | grep words\r")
        child.expect("words.txt")
        child.expect(r"\$ ")
        child.send("\x01h")
        child.expect(r"Ctrl-A X: quit")
        child.send("\x01x")
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "0"
        child.expect(pexpect.EOF)
        stty = child.before
        assert " icanon" in stty and " echo" in stty and "-icanon" not in stty
    finally:
        child.close(force=True)


def test_sigterm_restores_the_terminal() -> None:
    child = pexpect.spawn("/bin/sh", ["-c", f"{sys.executable} -m harness run -q; "
                                            "echo EXIT=$?; stty -a"],
                          cwd=str(ROOT), timeout=30, encoding="utf-8")
    try:
        child.expect(r"\$ ")
        os.kill(_harness_pid(child.pid), signal.SIGTERM)
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "130"
        child.expect(pexpect.EOF)
        assert " icanon" in child.before and "-icanon" not in child.before
    finally:
        child.close(force=True)
