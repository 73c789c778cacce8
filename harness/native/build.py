"""cffi build of the machine's C hot paths into one extension, `harness.native._fastpath`.

Every `*.c` here is compiled into it; a header's declarations between `// cffi:begin` and
`// cffi:end` are what Python sees (as in pyllm/kernels/build.py, which this follows), plus
the `extern "Python+C"` callbacks below, through which C hands an event to the Python path.

Built by `pip install -e .` (setup.py lists `harness/native/build.py:ffibuilder`), by `make`
(the Makefile's FASTPATH rule) or in place with `python -m harness.native.build`.
C is compiled with -Wall -Werror.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
# by path: setup.py runs this file without harness on sys.path
source_hash = runpy.run_path(str(HERE / "srchash.py"))["source_hash"]
SOURCES = sorted(HERE.glob("*.c"))
HEADERS = sorted(HERE.glob("*.h"))
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Werror", "-fno-semantic-interposition"]
PYTHON_CALLBACKS = """
extern "Python+C" void fp_py_intr(void *uc, uint32_t intno, void *handle);
extern "Python+C" int fp_py_invalid(void *uc, void *handle);
"""


def cdef_text() -> str:
    parts = []
    for h in HEADERS:
        m = re.search(r"//\s*cffi:begin\s*\n(.*?)//\s*cffi:end", h.read_text(), re.S)
        if m:
            parts.append(m.group(1))
    parts.append(PYTHON_CALLBACKS)
    parts.append("const char *fp_source_hash(void);")
    return "\n".join(parts)


def make_builder(absolute: bool = False) -> FFI:
    """The builder; sources relative to the checkout (setup.py) or absolute (in-place build)."""
    root = Path("/") if absolute else HERE.parent.parent
    ffi = FFI()
    ffi.cdef(cdef_text())
    includes = "".join(f'#include "{h.name}"\n' for h in HEADERS)
    ffi.set_source(
        "harness.native._fastpath",
        includes + f'const char *fp_source_hash(void) {{ return "{source_hash()}"; }}\n',
        sources=[str(p.relative_to(root)) if not absolute else str(p) for p in SOURCES],
        include_dirs=[str(HERE)],
        extra_compile_args=CFLAGS,
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    import os
    import shutil

    tmp = HERE.parent.parent / "build" / "cffi-harness"
    so = make_builder(absolute=True).compile(tmpdir=str(tmp), verbose=False)
    dest = HERE / "_fastpath.abi3.so"
    for other in HERE.glob("_fastpath.*.so"):
        if other != dest:
            other.unlink()
    # copy then rename: a running machine keeps the old inode mapped (see pyllm's build)
    part = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    shutil.copy2(so, part)
    os.replace(part, dest)
    print(f"built {dest}")
