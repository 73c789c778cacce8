"""The kernel (kernel_c/) seen from the guest and from the machine around it.

Most cases run tests/kernel_progs/ktest.c, which `make build` compiles with the user
programs' flags and links with user_c's library (build/tests/_ktest, tests/made.py); this
module puts it in a scratch file-system image next to the normal programs (harness/disk/fsbuild.py).
ktest makes the system calls with bad pointers, lengths, fds and numbers, fuzzes them,
bombs fork and sbrk, feeds exec malformed ELF files, kills blocked processes and checks
the clock; each of its modes prints "ktest NAME: OK ..." only when every check held and
no page leaked.

The rest drive the machine directly (harness.machine.board): the boot banner, init's argv,
console line editing and ^C, the idle timer, and a deliberate kernel panic whose frame
pointer chain must run from panic() through kernelvec's frame record into the
corrupted system call.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import guest
import pytest
from machine_stubs import Captured
from made import kernel_prog

from harness.disk.fsbuild import build_image

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
UBUILD = ROOT / "build" / "user"
NEVER = 2**64 - 1


def _require_build() -> None:
    missing = [p for p in [KERNEL, UBUILD / "_init", UBUILD / "_sh"] if not p.exists()]
    if missing:
        pytest.skip(f"{missing[0].relative_to(ROOT)} is not built (run make build)")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """build/user's programs plus ktest, in a scratch image."""
    _require_build()
    out = tmp_path_factory.mktemp("ktest")
    files: dict[str, str | Path | bytes] = {
        p.name[1:]: p for p in UBUILD.glob("_*") if p.is_file()}
    files["ktest"] = kernel_prog("ktest")
    img = out / "fs.img"
    build_image(img, files, size_blocks=8192, ninodes=512)
    return img


class Boot(Captured):
    """One machine run with its console output captured; `during` is given the Boot."""

    def __init__(self, fs: Path, cmd: str = "", *, timeout: float = 120.0,
                 ram_size: int = 128 << 20) -> None:
        from harness.machine.config import MachineConfig

        super().__init__(MachineConfig(kernel=KERNEL, fs=fs, cmd=cmd, timeout=timeout,
                                       ram_size=ram_size, cpus=guest.CPUS))


def run_cmd(image: Path, cmd: str, timeout: float = 300.0) -> tuple[str, int]:
    """Boot with `-c cmd`; return the console output and the power-off status."""
    from harness.machine.config import Exit

    b = Boot(image, cmd, timeout=timeout)
    r = b.run()
    assert r.exit == Exit.POWEROFF, f"{r.exit}: {r.message}\n{b.text[-3000:]}"
    assert "panic" not in b.text
    return b.text, r.status


# ----------------------------------------------------------------------------- boot


def test_boot_banner(image: Path) -> None:
    out, status = run_cmd(image, "echo ok")
    assert status == 0
    lines = out.splitlines()
    n = guest.CPUS
    harts = f"{n} hart" + ("s" if n > 1 else "")
    i = lines.index(f"nexai kernel: rv64imac, Sv39, S-mode, {harts}")
    assert re.fullmatch(r"ram   128 MiB at 0x80000000, kernel \d+ KiB, \d+ pages free",
                        lines[i + 1]), lines[i + 1]
    assert re.fullmatch(r"dev   uart16550 0x10000000 irq 10, virtio-blk 0x10001000 irq 1 "
                        r"\(8192 KiB\), timer 10000000 Hz, plic 0xc000000", lines[i + 2])
    assert lines[i + 3] == f"cpu   {harts} running"
    m = re.fullmatch(r"boot  (\d+) ms to /init", lines[i + 4])
    assert m and int(m.group(1)) < 10_000
    assert "ok" in lines[i + 5:]


@pytest.mark.parametrize("mib", [32, 512])
def test_ram_size_comes_from_bootinfo(image: Path, mib: int) -> None:
    b = Boot(image, "echo ok", ram_size=mib << 20)
    b.run()
    m = re.search(r"^ram   (\d+) MiB at 0x80000000, kernel (\d+) KiB, (\d+) pages free$",
                  b.text, re.M)
    assert m, b.text
    assert int(m.group(1)) == mib
    total, kernel, free = (mib << 20) // 4096, int(m.group(2)) // 4, int(m.group(3))
    # everything but the kernel image, the page reference counts (a byte a page:
    # kalloc.c) and the boot's own allocations (the kernel page table, NPROC kernel
    # stacks: about 150 pages) is free, whatever the RAM size
    refs = -(-total // 4096)
    assert total - kernel - refs - 200 < free < total - kernel - refs


def test_init_gets_the_whole_command(image: Path) -> None:
    word = "x" * 2000
    out, status = run_cmd(image, f"echo {word}; echo done")
    assert f"\n{word}\ndone\n" in out
    assert status == 0


# ----------------------------------------------------------------------------- ktest


@pytest.mark.parametrize("mode, ok", [
    ("args", r"ktest args: OK \d+ checks"),
    ("badelf", "ktest badelf: OK 8 malformed files refused"),
    ("kill", "ktest kill: OK 4 blocked processes killed"),
    ("time", r"ktest time: OK sleep\(10\) took \d+ us, \d+ ticks"),
    ("forkbomb", r"ktest forkbomb: OK \d+ flat forks"),
    ("sbrkbomb", r"ktest sbrkbomb: OK free pages \d+ at the low point"),
    ("fuzz 1 40", "ktest fuzz: OK 40 children, seed 1"),
])
def test_ktest(image: Path, mode: str, ok: str) -> None:
    out, status = run_cmd(image, f"ktest {mode}")
    assert re.search(f"^{ok}$", out, re.M), out[-3000:]
    assert "FAIL" not in out
    assert status == 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_ktest_fuzz_more_seeds(image: Path, seed: int) -> None:
    out, status = run_cmd(image, f"ktest fuzz {seed} 150", timeout=600)
    assert f"ktest fuzz: OK 150 children, seed {seed}" in out, out[-3000:]
    assert status == 0


def test_unknown_syscall_is_reported_and_fails(image: Path) -> None:
    out, _ = run_cmd(image, "ktest args")
    assert re.search(r"^pid \d+ ktest: unknown sys call 1000$", out, re.M)
    assert re.search(r"^pid \d+ ktest: unknown sys call -1$", out, re.M)


@pytest.mark.parametrize("kind, scause, name, stval", [
    ("load", 0xD, "load page fault", "0x80000000"),
    ("store", 0xF, "store page fault", "0x3fffffe000"),     # TRAPFRAME
    ("exec", 0xC, "instruction page fault", "sepc"),        # the fetch address
    ("illegal", 0x2, "illegal instruction", "0x0"),         # the instruction: .word 0
    ("ebreak", 0x3, "breakpoint", "sepc"),                  # the breakpoint's address
    ("csr", 0x2, "illegal instruction", "0x18001073"),      # csrw satp, zero
])
def test_user_fault_kills_only_the_process(image: Path, kind: str, scause: int, name: str,
                                           stval: str) -> None:
    out, status = run_cmd(image, f"ktest fault {kind}; echo alive")
    m = re.search(rf"^usertrap\(\): unexpected scause {scause:#x} \({name}\) pid=\d+ ktest\n"
                  r" {12}sepc=(0x[0-9a-f]+) stval=(0x[0-9a-f]+)$", out, re.M)
    assert m, out
    assert m.group(2) == (m.group(1) if stval == "sepc" else stval)
    assert f"ktest fault {kind}: child status -1" in out
    assert out.rstrip().endswith("alive")
    assert status == 0


# ----------------------------------------------------------------------------- console


def test_console_line_editing_and_ctrl_keys(image: Path) -> None:
    def type_keys(b: Boot) -> None:
        m = b.machine
        b.wait_for("$ ")
        m.send_input(b"echo abx\x7fc\n")             # DEL erases x
        b.wait_for("abc\n")
        m.send_input(b"echo junk\x15echo kept\n")    # ^U erases the line
        b.wait_for("\nkept\n")                       # the output: the echo has "kept\n" too
        m.send_input(b"sleep 1000\n")
        time.sleep(0.3)
        m.send_input(b"\x10")                         # ^P: process list
        b.wait_for(" sleep sleep ")
        m.send_input(b"\x03")                         # ^C: kills sleep, not sh
        b.wait_for("^C\n")
        m.send_input(b"echo after\n")
        b.wait_for("\nafter\n")                      # the output, not the echo
        m.send_input(b"halt\n")

    b = Boot(image, "", timeout=60)
    r = b.run(type_keys)
    from harness.machine.config import Exit

    assert r.exit == Exit.POWEROFF, b.text
    out = b.text
    assert "\nabc\n" in out and "\nkept\n" in out and "\nafter\n" in out
    assert "\njunk\n" not in out                              # the erased line never ran
    assert re.search(r"^\d+ sleep sleep sz=\d+ hart=\d$", out, re.M)   # ^P row for sleep
    assert re.search(r"^1 sleep init sz=\d+ hart=\d$", out, re.M)


def test_idle_machine_stops_its_timer(image: Path) -> None:
    """At the prompt with nothing to do the kernel disarms the timer (no ticks at all);
    with a process in sleep() the timer is set for its wake-up only, not every tick."""
    from harness.abi import cheader

    hz = cheader.load("memlayout.h")["TIMEBASE_HZ"]
    seen: dict[str, int] = {}

    def probe(m, key: str) -> None:  # noqa: ANN001 (Machine)
        done = threading.Event()

        def look() -> None:
            seen[key] = m.clint.mtimecmp
            seen[key + "_now"] = m.clock.mtime()
            done.set()

        m.post(look)
        assert done.wait(5)

    def idle(b: Boot) -> None:
        m = b.machine
        b.wait_for("$ ")
        time.sleep(0.5)
        probe(m, "prompt")
        m.send_input(b"sleep 30\n")
        time.sleep(0.5)
        probe(m, "sleeping")
        m.request_quit("test done")

    b = Boot(image, "", timeout=60)
    b.run(idle)
    assert seen["prompt"] == NEVER, seen
    # the sleeper wakes 30 s after it started, about 29.5 s after the probe
    ahead = (seen["sleeping"] - seen["sleeping_now"]) / hz
    assert 25 < ahead <= 30, seen


def test_process_woken_after_idle_is_still_preempted(image: Path) -> None:
    """The CPU idles with only a 30 s sleep() armed; console input wakes ktest, which
    forks and spins: the child must run on a preemption tick, not 30 s later."""
    from harness.machine.config import Exit

    def type_line(b: Boot) -> None:
        b.wait_for("ktest preempt: waiting for a line\n")
        time.sleep(0.3)                                  # let the CPU go idle
        b.machine.send_input(b"go\n")

    b = Boot(image, "ktest preempt", timeout=60)
    r = b.run(type_line)
    assert r.exit == Exit.POWEROFF, b.text[-2000:]
    assert "ktest preempt: OK child ran while the parent spun" in b.text, b.text[-2000:]


# ----------------------------------------------------------------------------- panic


def _frames(m, pc: int) -> list[str]:  # noqa: ANN001 (Machine)
    """Function names along the frame-pointer chain, read the way docs/ARCHITECTURE.md
    describes it: ra at fp-8, the caller's fp at fp-16; a leaf function (the innermost
    frame only) saves no ra, so there fp-8 holds the caller's fp and ra is live. After
    a frame whose return address lies in kernelvec (or its overflow path) comes
    kernelvec's record, whose "return address" is the exact interrupted pc."""
    from unicorn.riscv_const import UC_RISCV_REG_RA, UC_RISCV_REG_S0

    def name(addr: int) -> str:
        hit = m.kernel.lookup(addr)
        return hit[0].name if hit else hex(addr)

    names = [name(pc)]
    fp = m.hart.get(UC_RISCV_REG_S0)
    for depth in range(32):
        if fp == 0:
            break
        ra, prev = m.hart.read_u64(fp - 8), m.hart.read_u64(fp - 16)
        if ra is None or prev is None:
            break
        if depth == 0 and not m.kernel.contains_code(ra):
            ra, prev = m.hart.get(UC_RISCV_REG_RA), ra
        if ra == 0:
            break
        names.append(name(ra if names[-1] in ("kernelvec", "overflow") else ra - 1))
        fp = prev
    return names


def _after_prologue(m, symbol: str) -> int:  # noqa: ANN001 (Machine)
    """Address of the first instruction after `symbol`'s frame set-up (`addi s0, sp, N`),
    where a fault keeps the whole call chain on the frame-pointer list."""
    import capstone

    cs = capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)
    start = m.kernel.symbol(symbol)
    code = m.ram.read(start, 64)
    for insn in cs.disasm(code, start):
        if insn.op_str.replace(" ", "").startswith("s0,sp,"):
            return insn.address + insn.size
    raise AssertionError(f"no frame set-up found in {symbol}")


def _corrupt_and_call(image: Path, symbol: str, code: bytes, cmd: str):  # -> (Boot, result)
    """Boot, overwrite kernel function `symbol` just after its prologue with `code` once
    the guest printed "ready", and let cmd (which then calls that function) run into it.
    Returns (Boot, RunResult, address of the corrupted instruction)."""

    def corrupt(b: Boot) -> None:
        m = b.machine
        b.wait_for("ready\n")
        done = threading.Event()

        def poke() -> None:
            at = _after_prologue(m, symbol)
            sym, off = m.kernel.lookup(at)
            if sym.size and off + len(code) > sym.size:
                raise AssertionError(f"{len(code)} bytes do not fit in {symbol} at +{off:#x}")
            where.append(at)
            m.ram.write(at, code)   # also drops stale translations
            done.set()

        m.post(poke)
        done.wait(5)

    where: list[int] = []
    b = Boot(image, cmd, timeout=60)
    r = b.run(corrupt)
    assert where, b.text[-2000:]
    return b, r, where[0]


def test_kernel_panic_has_a_backtrace_into_the_interrupted_function(image: Path) -> None:
    """Write an illegal instruction into sys_uptime in the running kernel, then call it."""
    from harness.machine.config import Exit

    b, r, addr = _corrupt_and_call(image, "sys_uptime", bytes(4),
                                   "echo ready; sleep 1; uptime")
    m = b.machine
    assert r.exit == Exit.PANIC, f"{r.exit} {r.message}\n{b.text[-2000:]}"
    want = (f"panic: kerneltrap: unexpected scause 0x2 (illegal instruction) "
            f"sepc={addr:#x} stval=0x0")
    assert want in b.text
    assert r.message == want
    assert r.status == 1                    # POWER_FAIL | (1 << 16)
    # poweroff <- panic <- kerneltrap <- kernelvec <- [record: sepc] sys_uptime <- syscall
    # <- usertrap, and the chain ends there (uservec enters usertrap with s0 = ra = 0)
    assert _frames(m, r.pc) == ["poweroff", "panic", "kerneltrap", "kernelvec",
                                "sys_uptime", "syscall", "usertrap"]


def test_kernel_stack_overflow_panics_instead_of_hanging(image: Path) -> None:
    """sys_uptime rewritten to move sp 10 KiB down and store: kernelvec sees the frame
    would land in the guard page and panics on its spare stack."""
    from harness.machine.config import Exit

    code = b"".join(i.to_bytes(4, "little") for i in (
        0x000022B7,     # lui  t0, 2           t0 = 8192
        0x7FF28293,     # addi t0, t0, 2047    t0 = 10239: past the 8 KiB stack, not the guard
        0x40510133,     # sub  sp, sp, t0
        0x00013023,     # sd   zero, 0(sp)     faults in the guard page
    ))
    b, r, addr = _corrupt_and_call(image, "sys_uptime", code, "echo ready; sleep 1; uptime")
    m = b.machine
    assert r.exit == Exit.PANIC, f"{r.exit} {r.message}\n{b.text[-2000:]}"
    assert re.fullmatch(r"panic: kerneltrap: kernel stack overflow: sp=0x3f[0-9a-f]+ "
                        rf"scause 0xf \(store page fault\) sepc={addr + 12:#x} "
                        r"stval=0x3f[0-9a-f]+", r.message), r.message
    assert _frames(m, r.pc) == ["poweroff", "panic", "kstackoverflow", "overflow",
                                "sys_uptime", "syscall", "usertrap"]
