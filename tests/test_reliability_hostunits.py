"""The kernel's pure logic, compiled for the host with AddressSanitizer and UBSan.

tests/host_c/ holds one C driver per unit: kernel_c/ai_slots.c (slots, circular queue,
request state machine: contract checks and a random walk with invariants after every
step), kernel_c/kalloc.c (the page allocator over an arena standing in for RAM) and
kernel_c/path.c (path elements, against a reference split). The kernel's own string.c is
linked in under renamed symbols (-Dmemset=k_memset ...), so no libc routine stands in
for kernel code. Any sanitizer report aborts the driver (-fno-sanitize-recover).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KSRC = ROOT / "kernel_c"
DRIVERS = ROOT / "tests" / "host_c"
CC = shutil.which("gcc") or shutil.which("cc")
RENAMES = ["memset", "memmove", "memcmp", "memcpy", "strlen", "strncmp", "strncpy",
           "safestrcpy", "end"]
CFLAGS = ["-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-fno-builtin",
          "-I", str(KSRC), *(f"-D{n}=k_{n}" for n in RENAMES)]
UNITS = {"ai_slots": ["ai_slots.c"], "kalloc": ["kalloc.c"], "path": ["path.c"]}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory):  # -> Callable[[str], Path]
    if CC is None:
        pytest.skip("no host C compiler")
    out = tmp_path_factory.mktemp("hostc")
    probe = out / "probe.c"
    probe.write_text("int main(void){return 0;}\n")
    if subprocess.run([CC, "-fsanitize=address,undefined", "-o", str(out / "probe"),
                       str(probe)], capture_output=True).returncode:
        pytest.skip("the host compiler has no AddressSanitizer/UBSan runtime")

    def make(unit: str) -> Path:
        exe = out / f"test_{unit}"
        srcs = [DRIVERS / f"test_{unit}.c", *(KSRC / s for s in UNITS[unit]),
                KSRC / "string.c"]
        r = subprocess.run([CC, *CFLAGS, "-o", str(exe), *map(str, srcs)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return exe

    return make


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_under_sanitizers(build, unit: str) -> None:
    exe = build(unit)
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and f"OK {unit} " in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]


def test_a_planted_overflow_is_caught(build, tmp_path: Path) -> None:
    """The harness can fail: a driver that writes one byte past a kalloc'd page aborts."""
    src = tmp_path / "test_planted.c"
    src.write_text('#include "hostk.h"\n#include "ai.h"\n#include "ai_slots.h"\n'
                   "void *kalloc(void){return aligned_alloc(4096, 4096);}\n"
                   "void kfree(void *p){free(p);}\n"
                   "int main(void){ char *p = kalloc(); p[4096] = 1; kfree(p);"
                   ' return hk_done("planted"); }\n')
    exe = tmp_path / "planted"
    r = subprocess.run([CC, *CFLAGS, "-I", str(DRIVERS), "-o", str(exe), str(src),
                        str(KSRC / "string.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "heap-buffer-overflow" in r.stderr
