"""The kernel's virtual memory layout (kernel_c/vmlayout.h): where the trampoline page and
the trap frame sit in every address space. The header computes them from param.h and riscv.h,
so they are evaluated with those defines."""

from __future__ import annotations

from harness.abi import cheader

VM = cheader.parse_defines((cheader.KERNEL_DIR / "vmlayout.h").read_text(),
                           {**cheader.load("param.h").defines,
                            **cheader.parse_defines((cheader.KERNEL_DIR / "riscv.h").read_text())})
TRAMPOLINE = VM["TRAMPOLINE"]
