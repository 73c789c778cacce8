"""`harness bench system` runs end to end and reports every figure (values are not
asserted: performance is measured, never tested)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "build" / "kernel" / "kernel.elf").is_file()
                    or not (ROOT / "build" / "fs.img").is_file(), reason="needs `make build`")
def test_bench_system_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "system", "--reps", "1",
                        "--cpus", "1,2", "--idle-seconds", "0.5", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for label in ("Boot to shell prompt (ms)", "Guest MIPS per hart", "Guest MIPS in total",
                  "Syscall round trip, getpid (us)", "pingpong round trip (us)",
                  "IPI wake-up, store to run (us)", "Host CPU at the prompt",
                  "fork + exit + wait (us)", "pipe to a child (KiB/s)",
                  "Trap floor, no kernel, C (us)", "Ratio Python / C: getpid",
                  "Minimal kernel path, stub (us)",
                  "UART LSR load, C register (us)", "Console output, C bus (KiB/s)",
                  "CLINT mtimecmp store, C register (us)", "CSR instruction, bare Unicorn (ns)"):
        assert label in r.stdout
    med = json.loads(out.read_text())["median"]
    for key in ("raw_mips", "floor_us", "guest_over_bare", "syscall_over_floor", "floor_py_us",
                "syscall_py_us", "fork_py_us", "floor_py_over_c", "syscall_py_over_c",
                "mmio_lsr_c_us", "mmio_scr_c_us", "mmio_lsr_python_us", "console_c_kib_s",
                "mmio_mtimecmp_c_us", "mmio_mtimecmp_python_us",
                "console_python_kib_s"):
        assert med[key] >= 0
    assert med["csr_ns"] > 0 and med["csr_in_insns"] > 1  # a CSR costs more than an add
    assert med["minpath_us"] > 0 and med["minpath_over_floor"] > 0
    for n in (1, 2):
        for key in ("boot_ms", "guest_mips_total", "guest_mips_per_hart", "syscall_us",
                    "pingpong_us", "idle_cpu_percent", "fork_us", "pipe_kib_s"):
            assert med[f"{key}_{n}"] >= 0
        assert med[f"guest_mips_total_{n}"] > 0 and med[f"syscall_us_{n}"] > 0
    assert med["ipi_wake_us_2"] > 0  # the pingpong on two harts woke them by IPI
