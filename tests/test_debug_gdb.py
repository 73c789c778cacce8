"""The GDB stub: the real gdb-multiarch against `harness debug --gdb 0`, and each packet
handler of harness/debug/gdbserver.py on a booted machine.

No sleeps: the stub announces its port on stderr (port 0 = any free one) and the test
reads that line; an interrupt byte is in the socket before the run starts."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.abi import cheader
from harness.debug.gdbregs import FIRST_CSR, PRIV_REGNUM, target_xml
from harness.debug.gdbserver import GdbServer
from harness.debug.rsp import RspConnection, frame
from harness.debug.target import Target
from harness.guest.programs import Programs
from harness.machine.config import MachineConfig
from harness.run.launch import Launch

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
GDB = shutil.which("gdb-multiarch")
SYS_FORK = cheader.load("syscall.h")["SYS_fork"]

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


# ---------------------------------------------------------------- the real gdb

def _sections(out: str) -> dict[str, str]:
    """gdb's output split at the `echo @@NAME` markers the test put between commands."""
    parts = re.split(r"^@@(\w+)$", out, flags=re.M)
    return {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}


def _gdb_session(harness_args: list[str], steps: list[tuple[str, str]]
                 ) -> tuple[dict[str, str], subprocess.CompletedProcess[str], int, str, str]:
    """`harness debug --gdb 0 ARGS` driven by gdb-multiarch through `steps` (name, command;
    a command may use {port}). Returns gdb's sections, gdb's process, and the harness's
    exit status, stdout and stderr."""
    harness = subprocess.Popen(
        [sys.executable, "-m", "harness", "debug", "--gdb", "0", *harness_args], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert harness.stderr is not None
        line = harness.stderr.readline()
        m = re.search(r"GDB stub listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        args = [GDB or "gdb-multiarch", "-batch", "-nx", "-ex", "set confirm off",
                "-ex", f"file {KERNEL}"]
        for name, cmd in steps:
            args += ["-ex", f"echo @@{name}\\n", "-ex", cmd.format(port=m.group(1))]
        gdb = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=180)
        out, err = harness.communicate(timeout=120)
    finally:
        if harness.poll() is None:
            harness.kill()
    assert gdb.returncode == 0, gdb.stdout + gdb.stderr
    s = _sections(gdb.stdout)
    assert set(s) == {name for name, _ in steps}, gdb.stdout
    return s, gdb, harness.returncode, out, err


@pytest.mark.skipif(GDB is None, reason="needs gdb-multiarch")
def test_gdb_multiarch_breaks_steps_reads_and_continues() -> None:
    steps = [
        ("connect", "target remote :{port}"),
        ("regs", "info registers pc priv"),
        ("brk", "break sys_fork"),
        ("cont", "continue"),
        ("bt", "backtrace"),
        ("a7", "info registers a7"),
        ("priv", "print $priv"),
        ("sstatus", "print/x $sstatus & 0x100"),
        ("insn", "x/2i $pc"),
        ("var", "print nextpid"),
        ("mon", "monitor info proc"),
        ("si", "stepi"),
        ("setreg", "set var $t0 = 0x1234"),
        ("t0", "print/x $t0"),
        ("watch", "watch nextpid"),
        ("wcont", "continue"),
        ("del", "delete"),
        ("end", "continue"),
    ]
    s, gdb, status, out, err = _gdb_session(["--clock", "icount", "-c", "echo hi"], steps)
    assert re.search(r"_entry \(\) at kernel_c/entry\.S:\d+", s["connect"]), s["connect"]
    assert re.fullmatch(r"pc\s+0x80000000\s+0x80000000 <_entry>\n"
                        r"priv\s+0x1\s+prv:1 \[Supervisor\]", s["regs"]), s["regs"]
    assert re.fullmatch(r"Breakpoint 1 at 0x8[0-9a-f]+: file kernel_c/sysproc\.c, line \d+\.",
                        s["brk"]), s["brk"]
    assert re.search(r"Breakpoint 1, sys_fork \(\) at kernel_c/sysproc\.c:\d+\n\d+\t  return "
                     r"fork\(\);", s["cont"]), s["cont"]
    bt = s["bt"].splitlines()
    assert bt[0].startswith("#0  sys_fork () at kernel_c/sysproc.c:"), s["bt"]
    assert " in syscall () at kernel_c/syscall.c:" in bt[1]
    assert " in usertrap () at kernel_c/trap.c:" in bt[2]
    assert re.fullmatch(rf"a7\s+{SYS_FORK:#x}\s+{SYS_FORK}", s["a7"]), s["a7"]
    assert s["priv"] == "$1 = 1"  # S-mode
    assert s["sstatus"] == "$2 = 0x0"  # SPP = 0: the trap came from U-mode
    insn = s["insn"].splitlines()
    assert insn[0].startswith("=> 0x") and "<sys_fork" in insn[0] and len(insn) == 2
    m_var = re.fullmatch(r"\$3 = (\d+)", s["var"])
    assert m_var, s["var"]
    nextpid = int(m_var.group(1))
    assert s["mon"] == ""  # gdb writes a monitor command's output to its stderr
    mon = gdb.stderr.splitlines()
    assert mon[0].split()[:3] == ["PID", "PPID", "STATE"], gdb.stderr
    assert any(row.startswith("*") and row.split()[-1] == "init" for row in mon[1:]), mon
    assert re.fullmatch(r"0x0*8[0-9a-f]+\t\d+\t  return fork\(\);", s["si"]), s["si"]
    assert s["setreg"] == ""
    assert s["t0"] == "$4 = 0x1234"
    assert s["watch"] == "Hardware watchpoint 2: nextpid"
    assert re.search(rf"Hardware watchpoint 2: nextpid\n\nOld value = {nextpid}\n"
                     rf"New value = {nextpid + 1}\n", s["wcont"]), s["wcont"]
    assert "alloc" in s["wcont"]  # stopped in allocpid/allocproc
    assert s["del"] == ""
    assert s["end"] == "[Inferior 1 (Remote target) exited normally]"
    assert status == 0, err
    assert out.replace("\r\n", "\n").endswith("hi\n")


@pytest.mark.skipif(GDB is None, reason="needs gdb-multiarch")
def test_harness_run_gdb_serves_the_same_stub() -> None:
    harness = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "-q", "--gdb", "0", "--clock", "icount",
         "-c", "echo served"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True)
    try:
        assert harness.stderr is not None
        m = re.search(r"GDB stub listening on 127\.0\.0\.1:(\d+)", harness.stderr.readline())
        assert m
        gdb = subprocess.run([GDB, "-batch", "-nx", "-ex", f"file {KERNEL}",
                              "-ex", f"target remote :{m.group(1)}", "-ex", "echo @@c\\n",
                              "-ex", "continue"], cwd=ROOT, capture_output=True, text=True,
                             timeout=180)
        out, _ = harness.communicate(timeout=120)
    finally:
        if harness.poll() is None:
            harness.kill()
    assert _sections(gdb.stdout)["c"] == "[Inferior 1 (Remote target) exited normally]"
    assert harness.returncode == 0 and out.replace("\r\n", "\n").endswith("served\n")


# ---------------------------------------------------------------- packet by packet

class Client:
    """The gdb side of a socketpair, with the server's replies produced by dispatch()."""

    def __init__(self, programs: Programs, cmd: str, cpus: int = 1) -> None:
        self.launch = Launch(MachineConfig(kernel=KERNEL, fs=FS, cmd=cmd, clock="icount",
                                           timeout=120, cpus=cpus))
        self.machine = self.launch.machine
        self.target = Target(self.machine, programs)
        self.gdb_sock, server_sock = socket.socketpair()
        self.conn = RspConnection(server_sock)
        self.conn.ack = False
        self.server = GdbServer(self.target, self.conn, monitor=lambda c: f"ran {c}")

    def __call__(self, pkt: str | bytes) -> bytes | None:
        return self.server.dispatch(pkt.encode() if isinstance(pkt, str) else pkt)

    def close(self) -> None:
        self.gdb_sock.close()
        self.conn.sock.close()
        self.machine.close()


@pytest.fixture(scope="module")
def programs() -> Programs:
    return Programs(KERNEL, ROOT / "build" / "user")


@pytest.fixture
def client(programs: Programs) -> Iterator[Client]:
    c = Client(programs, "echo hi")
    yield c
    c.close()


def test_target_description() -> None:
    root = ET.fromstring(target_xml().split("\n", 2)[2])
    assert root.find("architecture").text == "riscv:rv64"
    feats = {f.get("name"): f for f in root.findall("feature")}
    assert set(feats) == {"org.gnu.gdb.riscv.cpu", "org.gnu.gdb.riscv.csr",
                          "org.gnu.gdb.riscv.virtual"}
    cpu = [(r.get("name"), int(r.get("regnum"))) for r in feats["org.gnu.gdb.riscv.cpu"]]
    assert cpu[0] == ("zero", 0) and cpu[8] == ("fp", 8) and cpu[32] == ("pc", 32)
    csr = {r.get("name"): int(r.get("regnum")) for r in feats["org.gnu.gdb.riscv.csr"]}
    assert csr["sstatus"] == FIRST_CSR + 0x100 and csr["satp"] == FIRST_CSR + 0x180
    assert [r.get("regnum") for r in feats["org.gnu.gdb.riscv.virtual"]] == [str(PRIV_REGNUM)]


def test_q_packets(client: Client) -> None:
    assert client("qSupported:multiprocess+;swbreak+;xmlRegisters=i386").startswith(
        b"PacketSize=4000;qXfer:features:read+;QStartNoAckMode+;swbreak+")
    xml = target_xml().encode()
    assert client("qXfer:features:read:target.xml:0,40") == b"m" + xml[:0x40]
    assert client(f"qXfer:features:read:target.xml:40,{len(xml):x}") == b"l" + xml[0x40:]
    assert client("qXfer:features:read:other.xml:0,40") == b"E00"
    assert client("qAttached") == b"1"
    assert client("qC") == b"QC1"
    assert client("qfThreadInfo") == b"m1"
    assert client("qsThreadInfo") == b"l"
    assert client("qSymbol::") == b"OK"
    assert client("qTStatus") == b""  # unsupported: the empty reply
    assert client("vMustReplyEmpty") == b""
    assert client("vCont?") == b"vCont;c;C;s;S"
    assert client("Hg0") == b"OK" and client("T1") == b"OK"
    assert client("?") == b"T05thread:1;"


def test_monitor_command(client: Client) -> None:
    assert client("qRcmd," + b"info proc".hex()) == b"OK"
    got = client.gdb_sock.recv(4096)
    assert got == frame(b"O" + b"ran info proc\n".hex().encode())


def test_register_packets(client: Client) -> None:
    h = client.target.hart
    g = client("g")
    assert len(g) == 33 * 16
    assert int.from_bytes(bytes.fromhex(g[32 * 16 :].decode()), "little") == 0x8000_0000
    assert client("p20") == (0x8000_0000).to_bytes(8, "little").hex().encode()  # pc = 32
    assert client(f"p{PRIV_REGNUM:x}") == (1).to_bytes(8, "little").hex().encode()
    assert client(f"p{FIRST_CSR + 0x180:x}") == (0).to_bytes(8, "little").hex().encode()
    assert client("p1fff") == b"E45"  # no such register
    assert client("Pa=" + (0x1234).to_bytes(8, "little").hex()) == b"OK"  # a0 = x10
    assert h.x(10) == 0x1234
    assert client(f"P{FIRST_CSR + 0x140:x}=" + (0x55).to_bytes(8, "little").hex()) == b"OK"
    assert client(f"p{FIRST_CSR + 0x140:x}") == (0x55).to_bytes(8, "little").hex().encode()
    regs = bytearray(bytes.fromhex(g.decode()))
    regs[8 * 5 : 8 * 6] = (0xABC).to_bytes(8, "little")  # t0
    assert client(b"G" + regs.hex().encode()) == b"OK"
    assert h.x(5) == 0xABC and h.pc == 0x8000_0000


def test_memory_packets(client: Client, programs: Programs) -> None:
    addr = programs.kernel.symbol("_entry").addr
    code = client.machine.ram.read(addr, 8)
    assert client(f"m{addr:x},8") == code.hex().encode()
    bss = programs.kernel.dwarf.variable("nextpid").addr
    assert client(f"M{bss:x},4:78563412") == b"OK"
    assert client.machine.ram.u32(bss) == 0x12345678
    # X carries binary data (read_packet has already undone the `}` escapes)
    assert client(f"X{bss:x},4:".encode() + bytes([0x23, 1, 2, 3])) == b"OK"
    assert client.machine.ram.u32(bss) == 0x03020123
    assert client("m40000000,4") == b"E0e"  # nothing there
    assert client("m10000000,4") == b"E0e"  # the UART: device registers are not read


def test_breakpoint_continue_step_and_remove(client: Client, programs: Programs) -> None:
    fork = programs.kernel.symbol("sys_fork").addr
    assert client(f"Z0,{fork:x},2") == b"OK"
    assert client("c") == b"T05swbreak:;thread:1;"
    assert client.target.pc == fork
    assert client("?") == b"T05swbreak:;thread:1;"
    assert client("s") == b"T05thread:1;"
    assert client.target.pc != fork
    assert client("vCont;s:1") == b"T05thread:1;"
    assert client(f"z0,{fork:x},2") == b"OK"
    assert client("vCont;c") == b"W00"
    assert client.launch.text.replace("\r\n", "\n").endswith("hi\n")
    assert client("c") == b"W00"  # still over


def test_parked_and_idle_harts_step_and_run_alone(programs: Programs) -> None:
    """gdb steps a thread in software (a breakpoint at its next instruction, then a
    continue): a hart idle in wfi gets there at once, vCont;c:N runs hart N alone, and a
    hart the kernel has not started yet does not move."""
    c = Client(programs, "sleep 1", cpus=4)
    try:
        m = c.machine
        parked = m.cpus[1].hart.pc
        assert not m.cpus[1].started
        assert c("vCont;s:2") == b"T05thread:2;"
        assert not m.cpus[1].started and m.cpus[1].hart.pc == parked
        sleep = programs.kernel.symbol("sys_sleep").addr
        assert c(f"Z0,{sleep:x},2") == b"OK"
        assert c("vCont;c").startswith(b"T05swbreak:;thread:")
        assert c(f"z0,{sleep:x},2") == b"OK"
        idle = [h for h in m.cpus if h.started and h.idle]
        assert idle, [(h.id, h.started, h.idle) for h in m.cpus]
        for h in idle:
            pcs = {o.id: o.hart.pc for o in m.cpus if o is not h}
            got = h.hart.fetch(h.hart.pc)
            assert got is not None
            nxt = h.hart.pc + got[1]
            assert c(f"Z0,{nxt:x},2") == b"OK"
            assert c(f"vCont;c:{h.id + 1:x}") == f"T05swbreak:;thread:{h.id + 1:x};".encode()
            assert h.hart.pc == nxt
            assert {o.id: o.hart.pc for o in m.cpus if o is not h} == pcs  # alone
            assert c(f"z0,{nxt:x},2") == b"OK"
        assert c("vCont;c") == b"W00"
    finally:
        c.close()


def test_watchpoint_packets(client: Client, programs: Programs) -> None:
    nextpid = programs.kernel.dwarf.variable("nextpid").addr
    before = client.machine.ram.u32(nextpid)
    assert client(f"Z2,{nextpid:x},4") == b"OK"
    assert client(f"Z3,{nextpid:x},4") == b""  # read watchpoints: not supported
    assert client("c") == f"T05watch:{nextpid:x};thread:1;".encode()
    assert client.machine.ram.u32(nextpid) == before + 1
    assert client(f"z2,{nextpid:x},4") == b"OK"
    assert client("c") == b"W00"


def test_interrupt_while_the_guest_runs(programs: Programs) -> None:
    c = Client(programs, "sleep 100")
    try:
        c.gdb_sock.sendall(b"\x03")  # gdb's Ctrl-C, already waiting when the run starts
        assert c("c") == b"T02thread:1;"
        assert c.target.alive
        assert c("k") is None and c.server.done
        assert c.machine.result is not None and c.machine.result.message == "killed by gdb"
    finally:
        c.close()


def test_detach_lets_the_guest_run_on(client: Client, programs: Programs) -> None:
    fork = programs.kernel.symbol("sys_fork").addr
    client(f"Z0,{fork:x},2")
    assert client("D") == b"OK" and client.server.done
    assert client.target.bps.internal == []  # gdb's breakpoints are gone
    assert client.target.m.run().status == 0


def test_framing_and_acks_over_a_socket(programs: Programs) -> None:
    c = Client(programs, "echo hi")
    try:
        c.conn.ack = True
        c.gdb_sock.sendall(b"+$qC#b4")  # a stray ack, then a packet
        assert c.conn.read_packet() == b"qC"
        assert c.gdb_sock.recv(1) == b"+"
        c.gdb_sock.sendall(b"$qC#00")  # bad checksum: nacked and dropped
        c.gdb_sock.sendall(b"$qAttached#8f")
        assert c.conn.read_packet() == b"qAttached"
        assert c.gdb_sock.recv(2) == b"-+"
        c.gdb_sock.sendall(b"-+")  # our first send is refused once, then accepted
        c.conn.send(b"QC1")
        assert c.gdb_sock.recv(64) == frame(b"QC1") * 2
        # binary data: `}` escapes ($ # } *) and run-length encoding (0 then "*" 3+29)
        c.gdb_sock.sendall(frame(b"X0,6:}\x03}]0* "))
        assert c.conn.read_packet() == b"X0,6:#}0000"
        assert c.gdb_sock.recv(1) == b"+"
        c.gdb_sock.sendall(b"$QStartNoAckMode#b0")
        assert c.conn.read_packet() == b"QStartNoAckMode"
        assert c.gdb_sock.recv(1) == b"+"
        c.gdb_sock.sendall(b"+")
        assert c.server.dispatch(b"QStartNoAckMode") is None and not c.conn.ack
        assert c.gdb_sock.recv(64) == frame(b"OK")
    finally:
        c.close()


@pytest.mark.skipif(GDB is None, reason="needs gdb-multiarch")
def test_gdb_multiarch_sees_harts_as_threads() -> None:
    steps = [
        ("connect", "target remote :{port}"),
        ("brk", "break sys_sleep"),
        ("cont", "continue"),
        ("threads", "info threads"),
        ("t2", "thread 2"),
        ("pc2", "print $pc"),
        ("si2", "stepi"),
        ("del", "delete"),
        ("end", "continue"),
    ]
    s, gdb, status, _, err = _gdb_session(
        ["--clock", "icount", "--cpus", "4", "-c", "sleep 1"], steps)
    hit = re.search(r"Thread (\d)(?: \"[^\"]*\")? hit Breakpoint 1, sys_sleep", s["cont"])
    assert hit, s["cont"]
    rows = re.findall(r"^[* ] +(\d) +Thread \d \(hart (\d) \((running|wfi|parked)\)\)",
                      s["threads"], re.M)
    assert [r[0] for r in rows] == ["1", "2", "3", "4"], s["threads"]
    assert [r[1] for r in rows] == ["0", "1", "2", "3"]
    current = re.search(r"^\* +(\d)", s["threads"], re.M)
    assert current and current.group(1) == hit.group(1)
    assert "Switching to thread 2" in s["t2"], s["t2"]
    pc2 = re.search(r"0x[0-9a-f]+ <(\w+)", s["pc2"])
    assert pc2, s["pc2"]
    if hit.group(1) != "2":
        assert pc2.group(1) != "sys_sleep", s["pc2"]  # hart 1's own registers
        assert re.search(r"0x[0-9a-f]+", s["si2"]), s["si2"]  # stepped hart 1 alone
    assert s["end"] == "[Inferior 1 (Remote target) exited normally]", s["end"]
    assert status == 0, err


@pytest.mark.skipif(GDB is None, reason="needs gdb-multiarch")
def test_gdb_multiarch_steps_every_hart_running_or_in_wfi() -> None:
    steps = [("connect", "target remote :{port}"), ("brk", "break sys_sleep"),
             ("cont", "continue"), ("threads", "info threads")]
    for t in (1, 2, 3, 4):
        steps += [(f"t{t}", f"thread {t}"), (f"pc{t}", "print $pc"), (f"si{t}", "stepi"),
                  (f"after{t}", "print $pc")]
    steps += [("del", "delete"), ("end", "continue")]
    s, gdb, status, _, err = _gdb_session(
        ["--clock", "icount", "--cpus", "4", "-c", "sleep 1"], steps)
    assert re.search(r"\(hart \d \(wfi\)\)", s["threads"]), s["threads"]  # one at least
    for t in (1, 2, 3, 4):
        assert "exited" not in s[f"si{t}"], s[f"si{t}"]
        before = re.search(r"0x([0-9a-f]+)", s[f"pc{t}"])
        after = re.search(r"0x([0-9a-f]+)", s[f"after{t}"])
        assert before and after, (s[f"pc{t}"], s[f"after{t}"])
        assert after.group(1) != before.group(1), (t, s[f"si{t}"])
    assert s["end"] == "[Inferior 1 (Remote target) exited normally]", s["end"]
    assert status == 0, err
