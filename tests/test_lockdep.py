"""The lock checks of `harness race` (harness/race/lockdep.py): a clean kernel run has
none, an order cycle between two lock classes is reported once with both chains, the
kernel's own table of harmless orders (kernel_c/lockorder.c) is honoured, and the CLI
writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.det.schedule import ScheduleSpec
from harness.guest.programs import Programs
from harness.machine.board import Machine
from harness.machine.config import MachineConfig
from harness.race.lockdep import Held, LockDep
from harness.run.race_seeds import RaceOptions, render, run_seed

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
USER = ROOT / "build" / "user"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")


def test_a_clean_run_has_no_findings_and_sees_the_locks() -> None:
    programs = Programs(KERNEL, USER)
    opts = RaceOptions(cmd="echo hi | wc; ls | wc", kernel=KERNEL, fs=FS, cpus=4)
    r = run_seed(opts, "random:3", programs)
    assert r.exit == "ok" and r.findings == []
    assert r.events > 1000  # every acquire and release went through the checks


def test_an_order_cycle_is_reported_once_with_both_chains() -> None:
    programs = Programs(KERNEL, USER)
    cfg = MachineConfig(kernel=KERNEL, fs=FS, cpus=2, cmd="", output=lambda b: None,
                        schedule=ScheduleSpec.parse("rr"))
    m = Machine(cfg)
    try:
        dep = LockDep(m, programs.kernel)
        k = programs.kernel.elf
        a_chain, b_chain = (k.symbol("kalloc") + 8,), (k.symbol("bread") + 8,)
        dep._edge(0, Held(0x1000, "kmem", a_chain, False), "bcache", b_chain)
        assert dep.findings == []  # one order alone is fine
        dep._edge(1, Held(0x2000, "bcache", b_chain, False), "kmem", a_chain)
        dep._edge(1, Held(0x2000, "bcache", b_chain, False), "kmem", a_chain)
        assert len(dep.findings) == 1
        f = dep.findings[0]
        assert f.kind == "lock order" and '"bcache" then "kmem"' in f.title
        text = render(f, programs)
        assert "kalloc at kernel_c/kalloc.c:" in text and "bread at kernel_c/bio.c:" in text
        # the kernel's table: fork's child lock before the inode table is no edge
        dep._edge(0, Held(0x3000, "proc", a_chain, False), "itable", b_chain)
        assert "itable" not in dep.edges.get("proc", {})
        dep._edge(0, Held(0x3000, "itable", a_chain, False), "proc", b_chain)
        assert len(dep.findings) == 1
    finally:
        m.close()


def test_harness_race_cli(tmp_path: Path) -> None:
    out = tmp_path / "race.json"
    r = subprocess.run([sys.executable, "-m", "harness", "race", "-c", "echo hi | wc",
                        "--seeds", "2", "--json", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 distinct finding(s) in 2 schedule(s)" in r.stdout
    data = json.loads(out.read_text())
    assert [x["schedule"] for x in data["runs"]] == ["random:1", "random:2"]
    bad = subprocess.run([sys.executable, "-m", "harness", "race", "--seed", "bogus:1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
