"""The C trap path (harness/fastpath/traps.c) against its specification, the Python path
(harness/machine/traps.py): the same decoder, and the same workloads giving the same guest output
and the same trap counts, exactly (`--clock icount` makes a kernel run reproducible
instruction for instruction, so any difference in delivery would show)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from harness import fastpath
from harness.machine.board import Machine
from harness.machine.config import MachineConfig
from harness.machine.traps import mem_operand
from harness.machine.traps_c import CTraps, trap_path
from tests.made import stub as stub_elf

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS_IMG = ROOT / "build" / "fs.img"
# syscall-, fork-, pipe- and fault-heavy: sysbench's loops and the usertests that trap
WORKLOAD = ("sysbench getpid 300; sysbench fork 20; sysbench pipe 16; "
            "usertests exec forkcopy pipedata badptr userfault unaligned sbrkbasic")


@pytest.fixture(scope="module")
def lib() -> object:
    got = fastpath.load()
    assert got is not None, fastpath.ERROR  # the default path must be the C one here
    return got


def _c_operand(ffi: object, lib: object, insn: int, length: int) -> tuple[int, int, int] | None:
    base, disp, size = ffi.new("int *"), ffi.new("int64_t *"), ffi.new("int *")  # type: ignore[attr-defined]
    if not lib.fp_mem_operand(insn, length, base, disp, size):  # type: ignore[attr-defined]
        return None
    return base[0], disp[0], size[0]


def test_decoder_matches_python(lib: tuple[object, object]) -> None:
    ffi, clib = lib
    for half in range(1 << 16):  # every compressed instruction
        if half & 3 != 3:
            assert _c_operand(ffi, clib, half, 2) == mem_operand(half, 2), hex(half)
    rng = random.Random(19)
    words = [rng.getrandbits(32) | 3 for _ in range(50_000)]
    # every major opcode and funct3 with random other bits
    words += [(rng.getrandbits(32) & ~0x707F) | op | f3 << 12 for op in range(3, 128, 4)
              for f3 in range(8)]
    for w in words:
        assert _c_operand(ffi, clib, w, 4) == mem_operand(w, 4), hex(w)


def _run(kernel: Path, path: str, **kw: object) -> tuple[Machine, bytes]:
    out = bytearray()
    m = Machine(MachineConfig(kernel=kernel, traps=path, output=out.extend,
                              timeout=300.0, **kw))  # type: ignore[arg-type]
    try:
        r = m.run()
        assert r.exit.value == "poweroff", r.message
    finally:
        m.close()
    return m, bytes(out)


def test_stub_traps_same_on_both_paths() -> None:
    """Every synchronous trap kind from U-mode under Sv39 (utraps.c checks each)."""
    mc, out_c = _run(stub_elf("utraps"), "c")
    mp, out_p = _run(stub_elf("utraps"), "python")
    assert isinstance(mc.traps, CTraps) and not isinstance(mp.traps, CTraps)
    assert out_c == out_p and b"trap 12 ok" in out_c
    assert Counter(dict(mc.traps.counts)) == Counter(dict(mp.traps.counts))
    assert mc.traps.rdtime == mp.traps.rdtime == 1
    assert mc.traps.python_traps == 0  # none needed Python


@pytest.mark.parametrize("cpus", [1, 4])
def test_kernel_workload_same_on_both_paths(cpus: int) -> None:
    if not (KERNEL.exists() and FS_IMG.exists()):
        pytest.skip("the kernel is not built (make build)")
    kw = {"fs": FS_IMG, "clock": "icount", "cmd": WORKLOAD, "cpus": cpus}
    mc, out_c = _run(KERNEL, "c", **kw)
    mp, out_p = _run(KERNEL, "python", **kw)
    assert b"ALL TESTS PASSED (7 tests)" in out_c
    assert out_c == out_p
    counts = Counter(dict(mc.traps.counts))
    assert counts == Counter(dict(mp.traps.counts))
    assert counts[8] > 300 and counts[13] and counts[15]  # the workload did trap
    assert [c.traps.rdtime for c in mc.cpus] == [c.traps.rdtime for c in mp.cpus]
    # under icount rdtime is Python's (its clock counts reads); nothing else went there
    assert sum(c.traps.python_traps for c in mc.cpus) == sum(c.traps.rdtime for c in mc.cpus)


def test_python_path_while_armed() -> None:
    """`python_path()` hands one hart's traps to Python; the counts do not change."""
    out = bytearray()
    m = Machine(MachineConfig(kernel=stub_elf("utraps"), output=out.extend, timeout=20.0))
    try:
        t = m.traps
        assert isinstance(t, CTraps)
        with t.python_path():
            assert m.run().exit.value == "poweroff"
        assert t.python_traps == sum(t.counts.values()) + t.rdtime
        assert b"trap 8 ok" in out
    finally:
        m.close()


def test_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TRAPS", "python")
    assert trap_path() == "python"
    assert trap_path("c") == "c"
    monkeypatch.setenv("HARNESS_TRAPS", "fast")
    with pytest.raises(ValueError, match="c or python"):
        trap_path()


# console-, disk- and interrupt-heavy: the C bus's registers (harness/fastpath/mmio.c)
DEVICE_WORKLOAD = "ls; ls /; cat words.txt prompt.txt; sysbench fs; ls | wc; ps; uptime"


@pytest.mark.parametrize("cpus", [1, 4])
def test_devices_same_on_both_paths(cpus: int) -> None:
    """The C bus (UART THR/LSR, PLIC claim/complete, virtio ISR/ACK) against the Python
    devices: the same console bytes, interrupts claimed, disk requests, timer ticks (the
    instruction clock) and MMIO accesses, exactly."""
    if not (KERNEL.exists() and FS_IMG.exists()):
        pytest.skip("the kernel is not built (make build)")
    kw = {"fs": FS_IMG, "clock": "icount", "cmd": DEVICE_WORKLOAD, "cpus": cpus}
    mc, out_c = _run(KERNEL, "c", **kw)
    mp, out_p = _run(KERNEL, "python", **kw)
    assert mc.c_mmio is not None and mp.c_mmio is None
    assert b"words.txt" in out_c and out_c == out_p
    assert mc.clock.insns == mp.clock.insns  # the same ticks at the same instructions
    assert Counter(dict(mc.traps.counts)) == Counter(dict(mp.traps.counts))
    assert mc.uart.tx_count == mp.uart.tx_count >= len(out_c)
    assert mc.plic.claims == mp.plic.claims > 0
    assert (mc.plic.line, mc.plic.claimed) == (mp.plic.line, mp.plic.claimed)
    assert mc.disk.completed == mp.disk.completed > 0
    assert mc.disk.interrupt_status == mp.disk.interrupt_status
    assert ([c.bus.accesses for c in mc.cpus] == [c.bus.accesses for c in mp.cpus])
    # the timer: every hart's last deadline and STIP (icount keeps the CLINT in Python)
    assert list(mc.clint.cmp) == list(mp.clint.cmp) and mc.c_mmio.clint is None
    assert [bool(v) for v in mc.clint.levels] == [bool(v) for v in mp.clint.levels]
    # the hot registers were served in C: the console bytes and two accesses per claim
    assert mc.c_mmio.fast() >= mc.uart.tx_count + 2 * mc.plic.claims


@pytest.mark.parametrize("cmd", ["wfi", "busy"])
def test_clint_in_c(cmd: str) -> None:
    """With the host clock the C bus serves mtime and mtimecmp (harness/fastpath/clint.c):
    the timer stub's ticks arrive as on the Python path, a store tells Python only when
    the waker must wake earlier (here: each re-arm after a tick, the slice having no other
    deadline), and the Clint object reads the C state."""
    mc, out_c = _run(stub_elf("timer"), "c", cmd=cmd)
    mp, out_p = _run(stub_elf("timer"), "python", cmd=cmd)
    assert out_c == out_p and b"ticks 5 ok" in out_c
    st = mc.c_mmio.clint if mc.c_mmio is not None else None
    assert st is not None and mp.c_mmio is None
    # 6 stores of two halves and one 8-byte mtime read, all in C
    assert st.fast == 6 * 2 + 2
    assert 1 <= st.calls <= 6 * 2
    assert list(mc.clint.cmp) == list(mp.clint.cmp) == [2**64 - 1]  # disarmed at the end
    assert not mc.clint.level and int(st.level[0]) == 0
