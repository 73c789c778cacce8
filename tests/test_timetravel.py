"""Going back in time: reverse-continue to a watchpoint, reverse-step/next/finish,
reverse then forward again to the same state, the real gdb-multiarch's reverse
commands, `--record`/`--replay` from the command line, and the replay hint after a
panic. Every machine here is deterministic (a seeded schedule on 4 harts)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import made
import pytest

from harness.debug import DebugError
from harness.debug.commands import Interpreter
from harness.debug.target import Target
from harness.det.mode import ram_hash
from harness.det.schedule import ScheduleSpec
from harness.guest.programs import Programs
from harness.machine.board import Machine
from harness.machine.config import MachineConfig

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
USER = ROOT / "build" / "user"
GDB = shutil.which("gdb-multiarch")
CMD = "echo hi; echo ho; ls | wc"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


@pytest.fixture(scope="module")
def programs() -> Programs:
    return Programs(KERNEL, USER)


@pytest.fixture
def debugger(programs: Programs) -> Iterator[Callable[..., Interpreter]]:
    made_: list[Machine] = []

    def make(cmd: str = CMD, schedule: str | None = "random:5") -> Interpreter:
        cfg = MachineConfig(kernel=KERNEL, fs=FS, cpus=4, cmd=cmd, timeout=300,
                            output=lambda b: None,
                            schedule=ScheduleSpec.parse(schedule) if schedule else None,
                            time_travel=schedule is not None)
        m = Machine(cfg)
        made_.append(m)
        return Interpreter(Target(m, programs))

    yield make
    for m in made_:
        m.close()


def _where(i: Interpreter) -> tuple:
    """Every hart's registers and pc, the RAM, and the instruction counts."""
    m = i.t.m
    regs = tuple(tuple(c.hart.gprs()) + (c.hart.get(0),) for c in m.cpus)
    return m.det.counter.total, tuple(m.det.counter.counts()), regs, ram_hash(m.ram.view)


def test_reverse_continue_finds_each_earlier_store(debugger) -> None:
    """From the end of a run, `watch` + `reverse-continue` stops at each earlier store
    to the kernel variable, newest first, at its file:line in the kernel."""
    i = debugger()
    assert "powered off" in i.execute("continue")
    end = i.execute("when")
    i.execute("watch nextpid")
    values = []
    for _ in range(3):
        out = i.execute("reverse-continue")
        m = re.search(r"Hardware watchpoint 1: nextpid\n\nOld value = (\d+)\nNew value = "
                      r"(\d+)\n\[hart \d, S-mode, pid \d+ \(sh\), the store at 0x8000[0-9a-f]+\]"
                      r"\n(allocpid|allocproc) \(\) at kernel_c/proc\.c:(\d+)", out)
        assert m, out
        old, new = int(m.group(1)), int(m.group(2))
        assert new == old + 1
        values.append(new)
        assert "allocproc" in i.execute("bt") and "fork" in i.execute("bt")
    assert values == sorted(values, reverse=True) and len(set(values)) == 3
    i.execute("delete")
    assert "powered off" in i.execute("continue")  # forward again: the same end
    assert i.execute("when").split(";")[0] == end.split(";")[0]


def test_reverse_then_forward_is_the_same_run(debugger) -> None:
    """Stopped at a breakpoint twice: going back to the first stop restores every
    register and byte of RAM, and going forward again reaches the second stop exactly."""
    i = debugger()
    i.execute("break sys_write")
    assert "Breakpoint 1" in i.execute("continue")
    first = _where(i)
    assert "Breakpoint 1" in i.execute("continue")
    second = _where(i)
    assert second[0] > first[0]
    assert "Breakpoint 1" in i.execute("reverse-continue")
    assert _where(i) == first
    assert "Breakpoint 1" in i.execute("continue")
    assert _where(i) == second
    n = second[0] - 1000
    i.execute(f"goto {n}")
    assert i.execute("when").startswith(f"Instruction {n} ")
    i.execute(f"goto {second[0]}")
    assert _where(i) == second


def test_reverse_step_next_stepi_finish(debugger) -> None:
    """By source line and by instruction, backwards, as gdb walks them."""
    i = debugger()
    i.execute("break allocproc")
    i.execute("continue")
    assert "acquire(&p->lock)" in i.execute("next")
    line128 = i.execute("next")
    assert "p->state == UNUSED" in line128
    at128 = i.execute("when")
    assert "acquire(&p->lock)" in i.execute("reverse-next")  # over the call again
    i.execute("next")
    assert i.execute("when").split(";")[0] == at128.split(";")[0]
    pc = i.t.pc
    out = i.execute("reverse-stepi")
    assert "=>" in out and i.t.pc != pc
    i.execute("stepi")
    assert i.execute("when").split(";")[0] == at128.split(";")[0] and i.t.pc == pc
    out = i.execute("reverse-finish")
    assert out.startswith("Run back to call of #0") and "allocproc()" in out, out
    assert "kernel_c/proc.c" in out


def test_reverse_needs_a_deterministic_machine(debugger) -> None:
    i = debugger(schedule=None)
    for cmd in ("reverse-stepi", "reverse-continue", "goto 5"):
        with pytest.raises(DebugError, match="--schedule rr"):
            i.execute(cmd)
    with pytest.raises(DebugError, match="deterministic"):
        i.execute("when")


def _harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_record_and_replay_from_the_command_line(tmp_path: Path) -> None:
    rec = tmp_path / "run.nrec"
    r = _harness("run", "--schedule", "random:9", "--cpus", "4", "-c", CMD,
                 "--record", str(rec))
    assert r.returncode == 0, r.stderr
    line = re.search(r"deterministic run \(random:9\): (\d+) instructions, console (\w+), "
                     r"RAM (\w+)", r.stderr)
    assert line, r.stderr
    assert f"harness run --replay {rec}" in r.stderr
    for _ in range(2):
        p = _harness("run", "--replay", str(rec))
        assert p.returncode == 0, p.stderr
        assert p.stdout == r.stdout
        assert line.group(0) in p.stderr
        assert "replay identical to the recording" in p.stderr
    bad = _harness("run", "--replay", str(rec), "-c", "ls")
    assert bad.returncode == 2 and "drop -c" in bad.stderr.replace("--command", "-c")
    (tmp_path / "junk.nrec").write_text("junk")
    junk = _harness("run", "--replay", str(tmp_path / "junk.nrec"))
    assert junk.returncode == 1 and "Traceback" not in junk.stderr


def test_a_panic_says_how_to_be_there_again() -> None:
    """The hint after a panic is a command that works: the debugger replays the run to
    the instruction before the panic."""
    stub = made.stub("panic")
    r = _harness("run", "--kernel", str(stub), "--schedule", "rr", "-c", "plain")
    assert r.returncode == 101
    m = re.search(r"to be there again: harness debug (.*)$", r.stderr, re.M)
    assert m, r.stderr
    import shlex

    args = shlex.split(m.group(1))
    d = _harness("debug", *args, "--ex", "stepi", "--batch")
    assert "panic.c:15" in d.stdout, d.stdout + d.stderr
    assert "kernel panic" in d.stdout


def _line_of(file: str, text: str) -> int:
    """The line of the kernel's source that holds text (so the test follows edits)."""
    lines = (ROOT / file).read_text().splitlines()
    return next(i for i, x in enumerate(lines, 1) if text in x)


@pytest.mark.skipif(GDB is None, reason="needs gdb-multiarch")
def test_gdb_multiarch_goes_back() -> None:
    """The real gdb: reverse-continue to a watchpoint, reverse-stepi, stepi, and
    reverse-finish, on whichever thread (hart) stored."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_debug_gdb import _gdb_session

    steps = [("connect", "target remote :{port}"),
             ("brk", "break sys_exit"),
             ("cont", "continue"),
             ("watch", "watch nextpid"),
             ("rc", "reverse-continue"),
             ("p", "print nextpid"),
             ("rsi", "reverse-stepi"),
             ("pc", "info registers pc"),
             ("si", "stepi"),
             ("pc2", "info registers pc"),
             ("rf", "reverse-finish"),
             ("bt", "bt 1"),
             ("kill", "kill")]
    s, gdb, rc, out, err = _gdb_session(["--schedule", "random:5", "--cpus", "4", "-c", CMD],
                                        steps)
    assert "hit Breakpoint 1, sys_exit" in s["cont"]
    m = re.search(r"hit Hardware watchpoint 2: nextpid\n\nOld value = (\d+)\nNew value = (\d+)",
                  s["rc"])
    assert m and int(m.group(2)) == int(m.group(1)) - 1, s["rc"]  # (gdb: seen backwards)
    line = _line_of("kernel_c/proc.c", "pid = nextpid++;")
    assert f"kernel_c/proc.c:{line}" in s["rc"]
    assert s["p"] == f"$1 = {m.group(2)}"
    pc1 = int(s["pc"].split()[1], 16)
    pc2 = int(s["pc2"].split()[1], 16)
    assert pc2 > pc1 and pc2 - pc1 in (2, 4)
    assert "allocproc () at kernel_c/proc.c" in s["rf"] and "allocpid()" in s["rf"]
