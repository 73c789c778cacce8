"""`harness debug` on our kernel, driven through its command interpreter exactly as the
prompt drives it: breakpoints in the kernel and in user programs, stepping by line,
backtraces across the user/kernel boundary, registers, memory, watchpoints, errors.

Runs use the instruction-count clock, so every boot executes the same instructions."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.cpu.registers import STIP
from harness.debug import DebugError
from harness.debug.commands import Interpreter
from harness.debug.target import Target
from harness.guest.programs import Programs
from harness.machine.config import MachineConfig
from harness.run.launch import Launch

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
USER = ROOT / "build" / "user"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


@pytest.fixture(scope="module")
def programs() -> Programs:
    return Programs(KERNEL, USER)  # symbols, line tables and types: loaded once


class Session:
    """A booted-but-stopped machine under the interpreter, console output captured."""

    def __init__(self, programs: Programs, cmd: str) -> None:
        self.launch = Launch(MachineConfig(kernel=KERNEL, fs=FS, cmd=cmd, clock="icount",
                                           timeout=120))
        self.machine = self.launch.machine
        self.target = Target(self.machine, programs)
        self.dbg = Interpreter(self.target)

    def __call__(self, line: str) -> str:
        return self.dbg.execute(line)

    @property
    def console(self) -> str:
        return self.launch.text.replace("\r\n", "\n")


@pytest.fixture
def session(programs: Programs) -> Iterator[Callable[[str], Session]]:
    made: list[Session] = []

    def make(cmd: str) -> Session:
        s = Session(programs, cmd)
        made.append(s)
        return s

    yield make
    for s in made:
        s.machine.close()


def line_of(path: str, text: str) -> int:
    """The line of a source file that contains text (tests never hard-code lines)."""
    for i, line in enumerate((ROOT / path).read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} is not in {path}")


def frames(bt: str) -> list[str]:
    """Function names of a backtrace, in order."""
    return re.findall(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(\)", bt, re.M)


# ---------------------------------------------------------------- the scenario

def test_break_at_sys_fork_step_inspect_and_run_to_completion(session) -> None:
    s = session("sysbench fork 2")
    assert s("break sys_fork if $prog == \"sysbench\"").startswith(
        "Breakpoint 1 at 0x")
    stop = s("continue")
    assert re.search(r"Breakpoint 1, sys_fork \(\) at kernel_c/sysproc.c:\d+  "
                     r"\[S-mode, pid \d+ \(sysbench\)\]", stop), stop
    assert "return fork();" in stop

    # kernel frames, then the user frames of the process that trapped
    bt = s("bt")
    names = frames(bt)
    assert names[:3] == ["sys_fork", "syscall", "usertrap"], bt
    assert names[3:] == ["fork", "bench_fork", "main", "_start"], bt
    assert re.search(r"--- trap from user space: pid \d+ \(sysbench\) ---", bt)
    assert "fork () at build/user/usys.S:" in bt
    assert f"bench_fork () at user_c/sysbench.c:{line_of('user_c/sysbench.c', '= fork();')}" in bt

    # step into fork() and go line by line inside the kernel
    out = s("step")
    assert out.startswith("fork () at kernel_c/proc.c:"), out
    assert s("bt 2").splitlines()[1].split()[3:5] == ["sys_fork", "()"]
    seen = set()
    for _ in range(4):
        out = s("next")
        line = int(out.splitlines()[-1].split("\t")[0].split()[-1])
        seen.add(line)
        assert s("info line").startswith(f'Line {line} of "kernel_c/proc.c"')
    assert len(seen) >= 3  # moved through several lines of fork()

    # registers: privilege mode and the CSRs, a GPR by name
    regs = s("info registers")
    assert re.search(r"^priv\s+0x1\s+S \(supervisor\)$", regs, re.M), regs
    # the last trap: the ecall, or an interrupt the kernel took since (next runs calls
    # with interrupts on)
    assert re.search(r"^scause\s+0x[0-9a-f]+\s+(environment call from U-mode|supervisor "
                     r"(timer|external) interrupt)$", regs, re.M), regs
    assert re.search(r"^satp\s+0x8[0-9a-f]{15}\s+Sv39, root 0x[0-9a-f]+ \(the kernel\)$",
                     regs, re.M), regs
    assert re.search(r"^stvec\s+0x[0-9a-f]+\s+0x[0-9a-f]+ <kernelvec>$", regs, re.M), regs
    sp = int(s("info registers sp").split()[1], 16)
    assert sp == s.target.hart.x(2)

    # memory: a kernel global by symbol, the stack, the process table
    nextpid = s.target.programs.kernel.dwarf.variable("nextpid")
    raw = int.from_bytes(s.machine.ram.read(nextpid.addr, 4), "little")
    assert s("print nextpid") == f"$1 = {raw}"
    assert s("x/1dw &nextpid") == f"{nextpid.addr:#x} <nextpid>:\t{raw}"
    word = int.from_bytes(s.target.read(sp, 8), "little")
    assert s("x/1xg $sp") == f"{sp:#x}:\t0x{word:016x}"
    assert s("print cpus[0].proc->name") == '$2 = "sysbench"'
    # locals of frame #0, from DWARF location lists (registers at -O2)
    loc = s("info locals")
    assert re.search(r"^p = \(struct proc \*\) 0x[0-9a-f]+ <proc\+0x[0-9a-f]+>$", loc, re.M), loc
    assert s("print p->name") == '$3 = "sysbench"'
    s.dbg.history.pop()

    # finish returns to sys_fork with fork()'s int result: the child's pid
    out = s("finish")
    assert out.startswith("Run till exit from #0  ")
    m = re.search(r"Value returned is \$3 = (\d+)$", out)
    assert m and "sys_fork () at kernel_c/sysproc.c" in out, out
    child = int(m.group(1))
    procs = s("info proc")
    assert re.search(rf"^\s+{child}\s+\d+\s+runnable\s+0\s+\d+\s+sysbench\s*$", procs, re.M), procs

    # delete the breakpoint, run to the end: the program's own output and status
    s("delete")
    assert s("continue") == "[The guest powered off with status 0]"
    assert re.search(r"^fork: n=2 us=\d+ per_fork_us=", s.console, re.M)


# ---------------------------------------------------------------- breakpoints

def test_user_breakpoint_fires_only_in_its_program(session) -> None:
    """Every program starts at _start = 0; a breakpoint on echo's _start must not stop
    init, sh or anything else that runs the same address."""
    s = session("echo one; echo two")
    out = s("break echo:*0")
    assert re.fullmatch(r"Breakpoint 1 at 0x0 in echo <_start>: file user_c/ulib.c, line \d+\.",
                        out), out
    calls: list[int] = []
    table = s.target.bps
    real = table._on_code

    def spy(uc, addr, size, data):  # every Python call of the breakpoint hook
        calls.append(addr)
        real(uc, addr, size, data)

    table._on_code = spy
    s.target.bps.remove(s.target.bps.get(1))
    s("break echo:*0")
    stop = s("continue")
    assert "Breakpoint 2, _start () at user_c/ulib.c" in stop
    assert "[U-mode, pid" in stop and "(echo)]" in stop
    assert s("print $prog") == '$1 = "echo"'
    assert s("print $priv") == "$2 = 0"
    before = len(calls)
    assert s("continue").startswith("\nBreakpoint 2, _start ()")  # the second echo
    assert s("info breakpoints").endswith("breakpoint already hit 2 times")
    assert s("continue") == "[The guest powered off with status 0]"
    assert s.console.endswith("one\ntwo\n")
    # the hook ran only at its address: init and sh (which start at 0 too) were let
    # through in Python, nothing else ever called it
    assert set(calls) == {0}
    assert len(calls) > before >= 3


def test_breakpoint_by_file_line_tbreak_and_address(session) -> None:
    s = session("echo hi")
    line = line_of("kernel_c/sysproc.c", "return fork();")
    out = s(f"tbreak kernel_c/sysproc.c:{line}")
    m = re.fullmatch(r"Temporary breakpoint 1 at (0x[0-9a-f]+) <sys_fork(\+0x[0-9a-f]+)?>: "
                     rf"file kernel_c/sysproc.c, line {line}\.", out)
    assert m, out
    assert "Temporary breakpoint 1, sys_fork ()" in s("continue")
    assert s("info breakpoints") == "No breakpoints or watchpoints."
    addr = s.target.programs.kernel.symbol("exit").addr
    assert s(f"break *{addr:#x}") == (f"Breakpoint 2 at {addr:#x} <exit>: file "
                                      f"kernel_c/proc.c, line "
                                      f"{s.target.programs.kernel.row(addr).line}.")
    stop = s("continue")
    assert "Breakpoint 2, exit () at kernel_c/proc.c" in stop
    assert frames(s("bt"))[0] == "exit"
    s("disable 2")
    assert "\t" in s("info breakpoints") and " n   " in s("info breakpoints")
    assert s("continue") == "[The guest powered off with status 0]"


def test_until_and_multi_location_breakpoints(session) -> None:
    s = session("echo hi")
    line = line_of("user_c/ulib.c", "while((*d++ = *src++) != 0)")  # in strcpy
    out = s(f"break ulib.c:{line}")  # ulib is linked into every user program
    assert re.match(rf"Breakpoint 1 at ulib.c:{line}: \d+ locations", out), out
    assert "1.1  0x" in out and " in cat <" in out
    s("delete 1")
    assert "sys_exec () at kernel_c/sysfile.c" in s("until sys_exec")
    assert s("info breakpoints") == "No breakpoints or watchpoints."


# ---------------------------------------------------------------- stepping

def test_stepi_nexti_and_masked_interrupts(session) -> None:
    s = session("echo hi")
    s("break echo:main")
    assert "Breakpoint 1, main () at user_c/echo.c" in s("continue")
    h = s.target.hart
    pc = h.pc
    # the timer expires while we sit at the prompt (STIP pending): stepping must still
    # execute the next user instruction, not enter the trap vector
    clint = s.machine.clint
    clint.cmp[s.machine.cur] = s.machine.clock.mtime()  # the stopped hart's deadline
    clint.tick()
    assert h.pending_enabled() & STIP
    out = s("stepi")
    assert h.priv == 0 and h.pc != pc and h.pc < 0x1000, out
    assert "=> " + hex(h.pc) in out
    # nexti runs over a call: find one and stop on it
    for _ in range(200):
        got = h.fetch(h.pc)
        if got and got[1] == 4 and got[0] & 0x7F in (0x6F, 0x67) and (got[0] >> 7) & 31 == 1:
            break
        s("stepi")
    else:
        pytest.fail("no call found in echo's main")
    call_pc, sp = h.pc, h.x(2)
    s("nexti")  # the pending interrupt is taken now, and the call runs to its return
    assert h.pc == call_pc + 4 and h.x(2) == sp and h.priv == 0
    assert not h.pending_enabled() & STIP
    s("delete")
    assert s("continue") == "[The guest powered off with status 0]"


def test_arguments_and_locals_of_a_user_program(session) -> None:
    s = session("echo hello world")
    s("break echo:main")
    s("continue")
    args = s("info args")
    assert re.fullmatch(r"argc = 3\nargv = 0x[0-9a-f]+", args), args
    assert re.fullmatch(r'\$1 = 0x[0-9a-f]+ "hello"', s("print argv[1]"))
    assert re.fullmatch(r'\$2 = 0x[0-9a-f]+ "world"', s("print argv[2]"))
    assert s("print argc * 2") == "$3 = 6"
    locs = s("info locals")
    assert "newline = 1" in locs and "len = 0" in locs
    s("next")
    s("next")
    assert re.search(r"^len = \d+$", s("info locals"), re.M)
    s("up")
    with pytest.raises(DebugError, match="only known for frame #0"):
        s("info locals")


def test_next_and_nexti_run_over_system_calls_in_user_code(session) -> None:
    s = session("sysbench fork 2")
    line = line_of("user_c/sysbench.c", 'printf("fork: n=')
    out = s(f"break sysbench:sysbench.c:{line}")
    assert re.fullmatch(r"Breakpoint 1 at 0x[0-9a-f]+ in sysbench <\w+\+0x[0-9a-f]+>: "
                        rf"file user_c/sysbench.c, line {line}\.", out), out
    assert f'{line}\t  printf("fork: n=%lu' in s("continue")
    assert "fork: n=" not in s.console
    out = s("next")  # printf and its write system calls run; we stay in sysbench
    assert re.fullmatch(r"\d+\t.*", out), out  # (the next line: putfix, inlined at -O2)
    assert s.target.program_at().row(s.target.pc).file == "user_c/sysbench.c"
    assert re.search(r"fork: n=2 us=\d+ per_fork_us=$", s.console), s.console
    assert s.target.priv == 0 and s("print $prog") == '$1 = "sysbench"'
    # the same by instruction: the usys stub's ecall is run over by nexti
    s2 = session("echo again")
    s2("break echo:write")
    assert "Breakpoint 1, write () at build/user/usys.S:" in s2("continue")
    h = s2.target.hart
    while h.fetch(h.pc) != (0x73, 4):
        s2("stepi")
    ecall = h.pc
    s2("nexti")
    assert (h.pc, h.priv) == (ecall + 4, 0) and s2.console.endswith("again\n")
    assert h.x(10) == len("again\n")  # write's result in a0


# ---------------------------------------------------------------- data

def test_watchpoint_on_a_kernel_variable(session) -> None:
    s = session("echo hi")
    out = s("watch nextpid")
    assert re.fullmatch(r"Hardware watchpoint 1: nextpid \(4 bytes at 0x[0-9a-f]+\)", out)
    stop = s("continue")
    m = re.search(r"Hardware watchpoint 1: nextpid\n\nOld value = (\d+)\nNew value = (\d+)\n"
                  r"\[S-mode, (?:pid \d+ \(\w+\)|no process), the store at (0x[0-9a-f]+)\]\n"
                  r"alloc(?:pid|proc) \(\) at kernel_c/proc.c:\d+", stop)
    assert m, stop
    old, new = int(m.group(1)), int(m.group(2))
    assert new == old + 1
    assert s("print nextpid") == f"$1 = {new}"
    # the PC is past the store, which ran exactly once
    store = int(m.group(3), 16)
    assert s.target.pc == store + s.target.hart.fetch(store)[1]
    stop = s("continue")
    assert f"Old value = {new}\nNew value = {new + 1}" in stop
    s("delete 1")
    assert s("continue") == "[The guest powered off with status 0]"
    assert s.console.endswith("hi\n")


def test_watchpoint_on_a_user_variable(session) -> None:
    """Unicorn reports stores by physical address: the watch follows the variable of
    the process it was set in."""
    s = session("grep zzz words.txt; echo $?")
    s("break sh:main")
    s("continue")
    pid = s.target.current_proc().pid
    assert s("watch laststatus") == (f"Hardware watchpoint 2: laststatus (4 bytes at "
                                     f"{s.target.programs.user('sh').dwarf.variable('laststatus').addr:#x}"
                                     f" in pid {pid} (sh))")
    stop = s("continue")
    assert re.search(rf"Old value = 0\nNew value = 1\n\[U-mode, pid {pid} \(sh\), the store at "
                     r"0x[0-9a-f]+\]\n\w+ \(\) at user_c/sh.c:\d+", stop), stop
    assert s("print laststatus") == "$1 = 1"
    assert "Old value = 1\nNew value = 0" in s("continue")  # echo $? succeeded
    s("delete")
    assert s("continue") == "[The guest powered off with status 0]"
    assert s.console.endswith("1\n")


def test_print_types_info_proc_and_info_mem(session) -> None:
    s = session("echo hi")
    s("break sys_exec")
    s("continue")
    assert s("print proc[0].name") == '$1 = "init"'
    assert s("print proc[0].state") in ("$2 = SLEEPING", "$2 = RUNNABLE")
    assert re.fullmatch(r"\$3 = \(struct proc \*\) 0x[0-9a-f]+ <proc\+0x[0-9a-f]+>",
                        s("print cpus[0].proc"))
    assert s("print/x 255") == "$4 = 0xff"
    assert re.fullmatch(r"\$5 = \{text\} 0x8[0-9a-f]+ <sys_fork>", s("print sys_fork"))
    lock = s("print proc[0].lock")
    assert re.fullmatch(r'\$\d+ = \{locked = 0, name = 0x[0-9a-f]+ "proc", cpu = .*\}', lock)
    procs = s("info proc").splitlines()
    assert procs[0].split() == ["PID", "PPID", "STATE", "KILLED", "SZ", "NAME", "WAIT",
                                "CHANNEL"]
    assert any(" init" in ln for ln in procs[1:])
    assert sum(ln.startswith("*") for ln in procs[1:]) == 1
    cur = s.target.current_proc()
    detail = s(f"info proc {cur.pid}")
    assert detail.startswith(f"process {cur.pid} ({cur.name}), slot ") and "on the CPU" in detail
    mem = s(f"info mem {cur.pid}")
    assert mem.startswith(f"page table of pid {cur.pid} ({cur.name}) (root 0x")
    assert re.search(r"^  0x0\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+r-xu$", mem, re.M), mem  # text
    assert re.search(r"^  0x3ffffff000\s+0x[0-9a-f]+\s+0x1000\s+r-x-$", mem, re.M)  # trampoline


def test_backtrace_of_a_sleeping_process(session) -> None:
    s = session("echo hi")
    s("break sys_exec if $prog == \"sh\"")
    s("continue")
    init = frames(s("bt pid 1"))  # init waits for the shell in wait()
    assert init[:2] == ["sched", "wait"] and "sys_wait" in init, init
    assert init[-2:] == ["main", "_start"] and "usertrap" in init
    assert "--- trap from user space: pid 1 (init) ---" in s("bt pid 1")
    with pytest.raises(DebugError, match="No process with pid 99."):
        s("bt pid 99")


def test_disassemble_and_list(session) -> None:
    s = session("echo hi")
    s("break sys_fork")
    s("continue")
    dis = s("disassemble")
    lines = dis.splitlines()
    assert lines[0] == "Dump of assembler code for function sys_fork:"
    assert lines[-1] == "End of assembler dump."
    assert any(ln.startswith("=> ") for ln in lines)
    assert re.search(r"jalr\s+ra, ra, -?0x[0-9a-f]+\t# 0x[0-9a-f]+ <fork>", dis), dis
    # a relative branch resolved to an absolute, symbolised target
    dis = s("disassemble acquire")
    assert re.search(r"\tc?\.?b(?:eq|ne|nez|eqz)z? .*0x8[0-9a-f]+ <acquire\+0x[0-9a-f]+>",
                     dis), dis
    src = s("list")
    ret = line_of("kernel_c/sysproc.c", "return fork();")
    assert re.search(rf"^{ret}\t  return fork\(\);$", src, re.M), src
    nxt = s("list")
    assert int(nxt.split("\t", 1)[0]) == int(src.splitlines()[-1].split("\t", 1)[0]) + 1
    out = s("list sh:main")
    assert re.search(r"^\d+\tmain\(int argc, char \*argv\[\]\)$", out, re.M), out
    out = s("x/2i $pc")
    assert out.startswith(f"=> {s.target.pc:#x} <sys_fork+")


# ---------------------------------------------------------------- errors

def test_errors_are_clear(session) -> None:
    s = session("echo hi")
    cases = {
        "break nosuch_function": 'Function "nosuch_function" not defined.',
        "break nosuch.c:3": "No source file named nosuch.c.",
        "break nosuchprog:main": 'No program "nosuchprog"',
        "print nosuch_variable": 'No symbol "nosuch_variable" in current context.',
        "x/4x 0x40000000": "Cannot access memory at address 0x40000000",
        "x/4x 0x10000000": "device registers of uart0",
        "list *0x1000": "No line number information available for *0x1000",
        "frobnicate": 'Undefined command: "frobnicate".',
        "info nosuch": 'Undefined info command: "nosuch".',
        "finish": '"finish" not meaningful in the outermost frame.',
        "print 1 +": "A syntax error in expression",
        "delete 99": "No breakpoint number 99.",
    }
    for cmd, msg in cases.items():
        with pytest.raises(DebugError) as e:
            s(cmd)
        assert msg in str(e.value), (cmd, str(e.value))
    # a name that is not a function: the nearest ones, as gdb's completion would list them
    with pytest.raises(DebugError) as e:
        s("break sys_ai_submit")
    assert str(e.value).startswith('Function "sys_ai_submit" not defined. Did you mean')
    assert "sys_ai_submitx" in str(e.value)
    with pytest.raises(DebugError, match=r'not defined in sh\. Did you mean: runpipe\?$'):
        s("tbreak sh:runpip")
    with pytest.raises(DebugError, match=r'^Function "qqqqzzzz" not defined\.$'):
        s("break qqqqzzzz")  # nothing near: no suggestion
    s("break sys_fork")
    s("continue")
    # from the kernel, a low address is tried in the current process's space too
    with pytest.raises(DebugError, match=r"not mapped in the page table of pid \d+ \(\w+\) "
                                         r"or the kernel"):
        s("x/4x 0x40000000")
    s("delete")
    s("continue")
    with pytest.raises(DebugError, match="The machine is not running: the guest powered "
                                         "off with status 0"):
        s("continue")
    assert s("info registers priv").split()[1] == "0x1"  # still inspectable


def test_panic_stops_with_the_report_and_stays_inspectable(session) -> None:
    s = session("echo hi")
    s("break sys_exec")
    s("continue")
    s("delete")
    # break the kernel: an illegal instruction at the start of sys_uptime, jump there
    k = s.target.programs.kernel
    uptime = k.symbol("sys_uptime").addr
    s.machine.ram.write(uptime, bytes(4))
    s(f"set $pc = {uptime:#x}")
    out = s("continue")
    assert "=== kernel panic: panic: kerneltrap: unexpected scause 0x2 (illegal instruction)" \
        in out, out
    assert "backtrace (frame pointers):" in out
    assert frames(s("bt"))[:2] == ["poweroff", "panic"]
    assert s("print $scause") == "$1 = 2"


def test_input_types_on_the_guest_console(session) -> None:
    s = session("")  # the interactive shell: it waits for typed lines
    assert s("input echo typed; halt") == ""
    assert s("continue") == "[The guest powered off with status 0]"
    assert s.console.endswith("$ typed\n")  # (the console echoed the line as it came)


# ---------------------------------------------------------------- completion

def test_tab_completion(session) -> None:
    s = session("echo hi")
    c = s.dbg.completions
    assert "info" in c("in", "in") and "input" in c("in", "in")
    assert c("re", "info re") == ["registers"]
    assert "sys_fork" in c("sys_fo", "break sys_fo")
    assert "sh:" in c("s", "break s")
    assert "sh:main" in c("sh:ma", "break sh:ma")
    assert "$sstatus" in c("$sst", "print $sst")
    assert "proc.c:" in c("proc.", "break proc.")
