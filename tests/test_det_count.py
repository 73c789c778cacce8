"""The deterministic machine's instruction counter (harness/fastpath/sched.c) counts per
translated block; these tests hold it to a count made instruction by instruction (a
Python UC_HOOK_CODE on every address, added after the counter's hooks, so it sees exactly
the instructions that start): at the end of whole runs with traps, interrupts, MMIO,
switch points and wfi; at every guest read of the time during a run (an MMIO callback, a
trap); at a run end placed on every instruction of a stretch of blocks; and for U-mode
code at the address of kernel code whose bytes differ there (tests/guest_stubs/ukva.c)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from unicorn import UC_HOOK_CODE

from harness import fastpath
from harness.cpu.registers import REG_PC
from harness.det.mode import ram_hash
from harness.det.schedule import ScheduleSpec
from harness.machine.board import Machine
from harness.machine.config import REACHED, Exit, MachineConfig
from tests.made import stub as stub_elf

ROOT = Path(__file__).resolve().parent.parent
KERNEL, FS = ROOT / "build/kernel/kernel.elf", ROOT / "build/fs.img"
# fork, exec, pipes, the disk, the console: syscalls, page faults, timer and device
# interrupts, MMIO, harts idle in wfi
WORKLOAD = "echo hi | wc; ls | wc; usertests badptr userfault"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


def _machine(spec: str, cmd: str = WORKLOAD, kernel: Path = KERNEL, cpus: int = 4) -> Machine:
    fs = FS if kernel == KERNEL else None
    return Machine(MachineConfig(kernel=kernel, fs=fs, cpus=cpus, cmd=cmd, timeout=300,
                                 output=lambda b: None, schedule=ScheduleSpec.parse(spec)))


class Reference:
    """Instructions started per hart, counted by a Python code hook on every address (the
    last hook of each hart: an earlier one that stops the run before an instruction
    keeps it from being counted, as it keeps it from running). `log(lo, hi)`: also note
    (hart, PC) of the instructions numbered lo .. hi-1 over all harts."""

    def __init__(self, m: Machine, log: tuple[int, int] = (0, 0)) -> None:
        self.counts = [0] * len(m.cpus)
        self.total = 0
        self.lo, self.hi = log
        self.seen: dict[int, tuple[int, int]] = {}
        for c in m.cpus:
            c.uc.hook_add(UC_HOOK_CODE, self._hook, c.id)

    def _hook(self, uc: object, addr: int, size: int, hart: int) -> None:
        if self.lo <= self.total < self.hi:
            self.seen[self.total] = (hart, addr)
        self.counts[hart] += 1
        self.total += 1


def _finish(m: Machine) -> tuple:
    res = m.run()
    assert res.exit == Exit.POWEROFF, res.message
    d = m.det
    assert d is not None
    return d.counter.total, tuple(d.counter.counts()), ram_hash(m.ram.view)


def test_block_lengths_decode_rvc() -> None:
    got = fastpath.load()
    assert got is not None, fastpath.ERROR
    ffi, lib = got
    # addi (32-bit), c.addi, c.nop, lui (32-bit), c.j: lengths 4, 2, 2, 4, 2
    code = bytes.fromhex("13051500" "0505" "0100" "b7050000" "01a0")
    assert lib.sched_insns(ffi.from_buffer(code), len(code)) == 5
    assert lib.sched_insns(ffi.from_buffer(code), 8) == 3


def _time_reads(m: Machine, now: Callable[[], int]) -> list[int]:
    """now() at each read of guest time during a run (a device's MMIO callback, the
    CLINT's mtimecmp store, rdtime's trap, a device's time stamp)."""
    out: list[int] = []
    executed = m.clock._executed  # type: ignore[union-attr]

    def read() -> int:
        if m._in_run:  # (between runs the counter is exact anyway)
            out.append(now())
        return executed()

    m.clock._executed = read  # type: ignore[union-attr]
    return out


@pytest.mark.parametrize("spec", ["rr", "random:7", "pct:3"])
def test_counts_equal_a_count_per_instruction(spec: str) -> None:
    """The same run twice: alone, and with the per-instruction count beside it (whose
    hook on every instruction also has Unicorn write the PC before each one, which
    MMIO callbacks otherwise do not see). Equal counts per hart at the end, and equal
    time at every read of it during the run."""
    a = _machine(spec)
    try:
        counter = a.det.counter
        reads = _time_reads(a, lambda: counter.total)
        end = _finish(a)
        traps = a.cpus[0].traps.counts
        assert traps[8] > 100 and traps[13] + traps[15] > 0  # syscalls, page faults
        assert counter.stats()["exits"] > 0  # runs ended inside a block
        if spec != "rr":
            assert counter.points > 0  # switch points passed ...
        if spec.startswith("random"):
            assert counter.switches > 0  # ... and switched at (PCT: only at its change points)
    finally:
        a.close()
    b = _machine(spec)
    try:
        ref = Reference(b)
        ref_reads = _time_reads(b, lambda: ref.total)
        assert _finish(b) == end
        assert list(end[1]) == ref.counts and end[0] == ref.total
        assert len(reads) > 50 and reads == ref_reads
    finally:
        b.close()


def test_a_run_ends_at_every_instruction_of_a_stretch() -> None:
    """run_to(total=N) for each N of 3000 consecutive instructions (each run ends one
    instruction after the last, inside a block or at its start), then 300 single steps
    of one hart: each stop has the count asked for and the PC the per-instruction count
    saw there, and the run ends as one that never stopped."""
    start, n = 400_000, 3_000
    a = _machine("random:3")
    try:
        ref = Reference(a, (start, start + n + 20_000))
        whole = _finish(a)
    finally:
        a.close()
    b = _machine("random:3")
    try:
        counter = b.det.counter
        assert b.run_to(total=start).message == REACHED
        for goal in range(start + 1, start + n + 1):
            res = b.run_to(total=goal)
            assert res.exit == Exit.PAUSE and res.message == REACHED, (goal, res.message)
            assert counter.total == goal
            hart, pc = ref.seen[goal]
            assert b.cpus[hart].hart.get(REG_PC) == pc, (goal, hart, hex(pc))
        hart = ref.seen[start + n][0]
        mine = [pc for i, (h, pc) in sorted(ref.seen.items()) if i >= start + n and h == hart]
        b.cur = hart
        for k in range(300):
            before = counter.count(hart)
            assert b.cpus[hart].hart.get(REG_PC) == mine[k], k
            assert b.step() is None and counter.count(hart) == before + 1
        assert _finish(b) == whole
    finally:
        b.close()


def test_user_code_at_a_kernel_address() -> None:
    """ukva.c runs U-mode code at the virtual address of a kernel function whose bytes
    there are other instructions in a block of the same length: the kernel's block,
    decoded when S-mode ran it, must not be taken for the user's."""
    m = _machine("rr", cmd="", kernel=stub_elf("ukva"), cpus=1)
    try:
        ref = Reference(m)
        out = bytearray()
        m.add_output_hook(out.extend)
        _finish(m)
        assert b"ukva ok" in out, bytes(out)
        assert list(m.det.counter.counts()) == ref.counts
    finally:
        m.close()
