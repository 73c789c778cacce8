"""cffi build of pyllm's C kernels into one extension, `pyllm.kernels._ckernels`.

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

Built by `pip install -e .` (setup.py lists `pyllm/kernels/build_kernels.py:ffibuilder`) or
in place with `python -m pyllm.kernels.build_kernels`. C is compiled with -Wall -Werror. The
recipe is pyllm/kernels/extension.py, shared with the machine's C hot paths
(harness/fastpath/build_fastpath.py).
"""

from __future__ import annotations

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
# by path: setup.py runs this file without pyllm on sys.path
Extension = runpy.run_path(str(HERE / "extension.py"))["Extension"]

EXTENSION = Extension(
    module="pyllm.kernels._ckernels", folder=HERE, prefix="pyllm", twins_only=True,
    cflags=["-O3", "-std=gnu11", "-Wall", "-Werror", "-pthread", "-fno-math-errno",
            "-fno-semantic-interposition", "-Wno-unused-function"],
    ldflags=["-pthread"])

ffibuilder = EXTENSION.builder()

if __name__ == "__main__":
    print(f"built {EXTENSION.build_in_place('cffi')}")
