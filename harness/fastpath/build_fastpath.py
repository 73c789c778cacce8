"""cffi build of the machine's C hot paths into one extension, `harness.fastpath._fastpath`.

Every `*.c` here is compiled into it; a header's declarations between `// cffi:begin` and
`// cffi:end` are what Python sees, plus the `extern "Python+C"` callbacks below, through which
C hands an event to the Python path. The recipe is pyllm's (pyllm/kernels/extension.py).

Built by `pip install -e .` (setup.py lists `harness/fastpath/build_fastpath.py:ffibuilder`), by
`make` (the Makefile's FASTPATH rule) or in place with `python -m
harness.fastpath.build_fastpath`. C is compiled with -Wall -Werror.
"""

from __future__ import annotations

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
# by path: setup.py runs this file without the packages on sys.path
Extension = runpy.run_path(str(HERE.parent.parent / "pyllm/kernels/extension.py"))["Extension"]

EXTENSION = Extension(
    module="harness.fastpath._fastpath", folder=HERE, prefix="fp",
    cflags=["-O2", "-std=gnu11", "-Wall", "-Werror", "-fno-semantic-interposition"],
    extra_cdef="""
extern "Python+C" void fp_py_intr(void *uc, uint32_t intno, void *handle);
extern "Python+C" int fp_py_invalid(void *uc, void *handle);
extern "Python+C" int fp_py_mmio(void *handle, uint32_t win, uint64_t offset, uint32_t size,
                                 int write, uint64_t value, uint64_t *out);
extern "Python+C" void fp_py_clint(void *handle, uint32_t win);
extern "Python+C" int fp_py_chain(void *handle, uint32_t win);
extern "Python+C" int fp_py_watch(void *handle, uint64_t addr, int size, int write);
""")

ffibuilder = EXTENSION.builder()

if __name__ == "__main__":
    print(f"built {EXTENSION.build_in_place('cffi-harness')}")
