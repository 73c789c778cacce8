"""cffi build of pyllm's C kernels into one extension, `pyllm.kernels._native`.

How a kernel file plugs in:
* put `name.c` and `name.h` in pyllm/kernels/; every `*.c` here is compiled into the extension;
  a header's cffi block is used only when its `.c` twin exists (a header committed before its
  source does not break everyone's build);
* the declarations Python may call go in the header between the lines `// cffi:begin` and
  `// cffi:end` (plain prototypes, structs and `#define NAME 123` integer constants only: that text
  is handed to `ffi.cdef`); everything outside those markers is ordinary C;
* AVX-512 code goes in functions marked `PYLLM_TARGET_AVX512` (see kernels.h) and is chosen at run
  time with `pyllm_cpu_has_avx512vnni()`, so the extension still runs on a CPU without it;
* write a numpy twin in pyllm/kernels/twins.py and a test comparing them with a named tolerance.

Built by `pip install -e .` (setup.py lists `pyllm/kernels/build.py:ffibuilder`) or in place with
`python -m pyllm.kernels.build`. C is compiled with -Wall -Werror.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
# by path: setup.py runs this file without pyllm on sys.path
source_hash = runpy.run_path(str(HERE / "srchash.py"))["source_hash"]
SOURCES = sorted(HERE.glob("*.c"))
HEADERS = sorted(HERE.glob("*.h"))
CFLAGS = ["-O3", "-std=gnu11", "-Wall", "-Werror", "-pthread", "-fno-math-errno",
          "-fno-semantic-interposition", "-Wno-unused-function"]




def cdef_text() -> str:
    parts = []
    for h in HEADERS:
        if not h.with_suffix(".c").exists():  # a header whose source is not written yet
            continue
        m = re.search(r"//\s*cffi:begin\s*\n(.*?)//\s*cffi:end", h.read_text(), re.S)
        if m:
            parts.append(m.group(1))
    parts.append("const char *pyllm_source_hash(void);")
    return "\n".join(parts)


def make_builder(absolute: bool = False) -> FFI:
    """The builder; sources relative to the checkout (setup.py) or absolute (in-place build)."""
    root = Path("/") if absolute else HERE.parent.parent
    ffi = FFI()
    ffi.cdef(cdef_text())
    includes = "".join(f'#include "{h.name}"\n' for h in HEADERS)
    ffi.set_source(
        "pyllm.kernels._native",
        includes + f'const char *pyllm_source_hash(void) {{ return "{source_hash()}"; }}\n',
        sources=[str(p.relative_to(root)) if not absolute else str(p) for p in SOURCES],
        include_dirs=[str(HERE)],
        extra_compile_args=CFLAGS,
        extra_link_args=["-pthread"],
    )
    return ffi


ffibuilder = make_builder()

if __name__ == "__main__":
    import os
    import shutil

    tmp = HERE.parent.parent / "build" / "cffi"
    so = make_builder(absolute=True).compile(tmpdir=str(tmp), verbose=False)
    # the name `pip install -e .` gives it (cffi modules use the stable ABI), so the two ways
    # of building never leave two copies where the older one could shadow the newer
    dest = HERE / "_native.abi3.so"
    for other in HERE.glob("_native.*.so"):
        if other != dest:
            other.unlink()
    # copy then rename: overwriting the file in place would truncate the code that running
    # processes have mapped (they die with SIGBUS); a rename leaves them the old inode
    part = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    shutil.copy2(so, part)
    os.replace(part, dest)
    print(f"built {dest}")
