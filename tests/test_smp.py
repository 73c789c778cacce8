"""Several harts: the machine on bare metal (tests/guest_stubs/smp.c) and our kernel.

The stub checks what the machine promises (docs/ARCHITECTURE.md, "Harts"): lr/sc locks
and amoadd give exact totals on every hart count, the harts really interleave (lost
updates without the lock), `--clock icount` repeats a run exactly, a hart runs code
another hart rewrote after a fence.i (its own or one an IPI asked for) and not without,
and IPIs wake harts parked in wfi.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from guest import run_guest, run_raw
from machine_stubs import Run
from made import stub

from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig


@pytest.fixture(scope="module")
def smp() -> Path:
    return stub("smp")


def _run(elf: Path, cmd: str, cpus: int, clock: str = "icount") -> tuple[int, str]:
    r = Run(elf, cmd=cmd, cpus=cpus, clock=clock)
    res = r.run()
    assert res.exit == Exit.POWEROFF, (res, r.text)
    return res.status, r.text


@pytest.mark.parametrize("cpus", [1, 2, 3, 4, 8])
def test_lock_and_amoadd_totals_are_exact(smp: Path, cpus: int) -> None:
    for seed in range(1, 6):
        status, text = _run(smp, f"locks {seed} 5000", cpus)
        n = cpus * 5000
        assert (status, text) == (0, f"locks harts {cpus} total {n} amoadd {n}\n")


def test_harts_interleave_and_icount_repeats_the_interleaving(smp: Path) -> None:
    totals = set()
    for seed in (1, 2, 3):
        first = _run(smp, f"nolock {seed} 20000", 4)
        assert _run(smp, f"nolock {seed} 20000", 4) == first  # the same run, exactly
        m = re.fullmatch(r"nolock harts 4 total (\d+) amoadd 80000\n", first[1])
        assert m, first
        totals.add(int(m.group(1)))
    assert min(totals) < 80000  # unlocked increments lose updates: the harts interleave
    assert len(totals) > 1      # and each seed interleaves them differently


def test_lock_and_amoadd_totals_are_exact_with_the_host_clock(smp: Path) -> None:
    # slices end by asynchronous stops here; a store cut by one must not be repeated
    # after the other harts ran (harness/machine/cpus.py, complete_store), and no such stop may
    # land inside an amoadd or sc, which Unicorn would run again (harness/machine/board.py,
    # _on_atomic_edge: before it, 1-2 extra in 80 000 in most runs)
    for seed in (1, 2, 3):
        assert _run(smp, f"locks {seed} 20000", 4, clock="host") == (
            0, "locks harts 4 total 80000 amoadd 80000\n")


@pytest.mark.parametrize("clock", ["icount", "host"])
def test_rewritten_code_runs_after_fence_i(smp: Path, clock: str) -> None:
    assert _run(smp, "icache 9", 4, clock) == (0, "icache 8 8 8\n")


def test_without_fence_i_harts_keep_their_stale_code(smp: Path) -> None:
    # what the fence.i test guards against: each hart's own translations
    assert _run(smp, "icache-nofence 9", 4) == (1, "icache 0 0 0\n")


@pytest.mark.parametrize("clock", ["icount", "host"])
def test_ipi_wakes_parked_harts(smp: Path, clock: str) -> None:
    assert _run(smp, "ipi", 4, clock) == (0, "ipi ok\n")


def test_kernel_boots_every_hart_and_ps_shows_them() -> None:
    proc = run_raw("ps", 120.0, "--cpus", "4")
    assert "nexai kernel: rv64imac, Sv39, S-mode, 4 harts" in proc.stdout, proc.stdout
    assert "cpu   4 harts running" in proc.stdout


def test_processes_spread_over_harts() -> None:
    # three CPU-bound children: ps must see them on more than one hart
    # (long enough to outlast both ps runs; the machine powers off when sh exits)
    r = run_guest("sysbench cpu 300000000 & sysbench cpu 300000000 & "
                  "sysbench cpu 300000000 & sleep 0.3; ps; sleep 0.3; ps", 180.0, "--cpus", "4")
    harts = {m.group(1) for m in re.finditer(r"^\s*\d+\s+\d+\s+\w+\s+(\d)\s+\d+K sysbench",
                                             r.output, re.M)}
    assert len(harts) >= 2, r.output


@pytest.mark.parametrize("cpus", [1, 4])
def test_icount_kernel_runs_repeat_exactly(cpus: int) -> None:
    cmd = "echo a > f; cat f f | wc; ls | wc; ps"
    outs = {run_guest(cmd, 180.0, "--cpus", str(cpus), "--clock", "icount").output
            for _ in range(2)}
    assert len(outs) == 1, outs


@pytest.mark.parametrize("cpus", [2, 8])
def test_usertests_on_more_harts(cpus: int) -> None:
    # 1 and 4 harts: tests/test_userland.py (conftest.py runs it with both)
    r = run_guest("usertests -q", 900.0, "--cpus", str(cpus))
    assert re.search(r"^ALL TESTS PASSED \(\d+ tests\)$", r.output, re.M), r.output[-3000:]
    assert r.status == 0


def _pingpong(cpus: int, clock: str, n: int = 200) -> Machine:
    from guest import FS_IMG, KERNEL

    out = bytearray()
    m = Machine(MachineConfig(kernel=KERNEL, fs=FS_IMG, cpus=cpus, clock=clock, timeout=300,
                              cmd=f"sysbench pingpong {n}", output=out.extend))
    try:
        res = m.run()
    finally:
        m.close()
    assert res.exit == Exit.POWEROFF and f"pingpong: n={n} " in out.decode(), out[-2000:]
    return m


def test_pingpong_on_one_busy_hart_does_not_ipi_every_round_trip() -> None:
    # both processes run on one hart; the other idles in wfi. Each round trip makes one
    # RUNNABLE, and the idle hart is told once: while its IPI_WAKE is pending it gets
    # no more (ipi.c, ipi_flush); before, one IPI per round trip (222 for 200)
    m = _pingpong(2, "icount")
    assert 0 < m.stats.ipis < 100, m.stats


def test_a_hurried_slice_ends_in_c_at_a_trap_from_user_mode() -> None:
    # host clock: an IPI to an idle hart ends the sender's slice at its next trap from
    # U-mode after IPI_GRACE_NS (Machine._hurry); the C trap path checks that itself,
    # so the slice's traps stay on the C path (Traps.hurry)
    m = _pingpong(2, "host", 2000)
    if m.trap_path != "c":
        pytest.skip("the C trap path is not built")
    assert m.stats.ipi_wakes > 0, m.stats
    assert sum(c.traps.python_traps for c in m.cpus) < 50, m.stats  # type: ignore[attr-defined]


def test_debugger_shows_and_selects_harts() -> None:
    import subprocess
    import sys

    from guest import ROOT

    r = subprocess.run([sys.executable, "-m", "harness", "debug", "--cpus", "4", "-c",
                        "sleep 1; sleep 1", "--ex", "break sys_sleep", "--ex", "continue",
                        "--ex", "info cpus", "--ex", "cpu 0", "--ex", "cpu", "--ex", "continue",
                        "--batch"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout
    hits = re.findall(r"Breakpoint 1, sys_sleep \(\) at kernel_c/sysproc\.c:\d+  "
                      r"\[hart (\d), S-mode, pid \d+ \(sleep\)\]", out)
    assert len(hits) == 2, out  # both sleeps stop, on whichever hart runs them
    rows = re.findall(r"^([* ])\s+(\d)\s+(running|wfi|parked)\s", out, re.M)
    assert [int(h) for _, h, _ in rows[:4]] == [0, 1, 2, 3], out
    assert [h for mark, h, _ in rows[:4] if mark == "*"] == [hits[0]], out
    assert "[Switching to hart 0]" in out and "\nhart 0\n" in out


def test_fault_report_lists_every_hart(smp: Path) -> None:
    from harness.run.fault_report import format_report

    r = Run(smp, cmd="fault", cpus=4, clock="icount")
    res = r.run()
    assert res.exit == Exit.FAULT and "context 0" in res.message, res
    rep = format_report(r.machine, res)
    assert rep.splitlines()[1].startswith("hart 0 in S-mode"), rep
    assert "harts (4; * = the one above):" in rep
    rows = re.findall(r"^  ([* ])(\d)  (running|wfi)\s+S-mode  0x[0-9a-f]+  (\S+)", rep, re.M)
    assert [(m, h, s) for m, h, s, _ in rows] == [
        ("*", "0", "running"), (" ", "1", "wfi"), (" ", "2", "wfi"), (" ", "3", "wfi")], rep
    assert all(w.startswith("hart_main") for *_, w in rows[1:]), rep
