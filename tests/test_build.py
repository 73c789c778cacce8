"""The build: make, not the tests, builds every guest program (issue 18), with the flags
written once in the makefiles."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_var(*names: str) -> list[str]:
    """The words of make variables, as the top Makefile defines them."""
    rule = "print-vars: ; @echo " + " ".join(f"$({n})" for n in names)
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval", rule, "print-vars"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def test_make_builds_every_test_guest_program() -> None:
    progs = {f"build/tests/_{p.stem}" for p in (ROOT / "tests" / "kernel_progs").glob("*.c")}
    stubs = {f"build/stubs/{p.stem}.elf" for p in (ROOT / "tests" / "guest_stubs").glob("*.c")
             if p.name != "stub.c"}  # stub.c is linked into every stub
    assert set(make_var("TESTPROG_BINS", "STUB_ELFS")) == progs | stubs
    # `make build` makes them: testprogs is one of its prerequisites
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^build:.*\btestprogs\b", text, re.M)
    assert re.search(r"^testprogs: \$\(TESTPROG_BINS\) \$\(STUB_ELFS\)$", text, re.M)


def test_no_test_types_the_guest_compiler_flags() -> None:
    """The user programs' and stubs' flags live in user_c/user.mk and
    tests/guest_stubs/stubs.mk only; tests take what make built (tests/made.py)."""
    flags = ("-fno-tree-loop-distribute-patterns", "-nostartfiles")  # one of each set
    typed = [p.name for p in (ROOT / "tests").glob("*.py") if p.name != Path(__file__).name
             and any(f in p.read_text() for f in flags)]
    assert typed == []
