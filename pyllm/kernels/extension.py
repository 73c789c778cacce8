"""How one of our cffi extensions is built: pyllm's kernels and the machine's C hot paths.

A folder of `*.c`/`*.h` becomes one extension. Each header's declarations between the lines
`// cffi:begin` and `// cffi:end` are what Python sees (`ffi.cdef`); a hash of every source is
compiled in as `<prefix>_source_hash()`, so an import can tell a stale build from a fresh one.

This file imports nothing of ours: setup.py runs the build scripts by path (without the
packages on sys.path), and they load this file by path too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout


def source_hash(folder: Path) -> str:
    """Hash of every .c/.h file in `folder` (16 hex digits)."""
    h = hashlib.sha256()
    for p in sorted(folder.glob("*.c")) + sorted(folder.glob("*.h")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class Extension:
    """One extension: `module` (dotted name) from the sources in `folder`."""

    module: str
    folder: Path
    prefix: str  # C name prefix of the compiled-in hash function
    cflags: list[str]
    ldflags: list[str] = field(default_factory=list)
    extra_cdef: str = ""  # e.g. extern "Python+C" callbacks
    twins_only: bool = False  # a header counts only once its .c exists

    @property
    def stem(self) -> str:
        return self.module.rsplit(".", 1)[1]

    def cdef_text(self) -> str:
        parts = []
        for h in sorted(self.folder.glob("*.h")):
            if self.twins_only and not h.with_suffix(".c").exists():
                continue
            m = re.search(r"//\s*cffi:begin\s*\n(.*?)//\s*cffi:end", h.read_text(), re.S)
            if m:
                parts.append(m.group(1))
        parts.append(self.extra_cdef)
        parts.append(f"const char *{self.prefix}_source_hash(void);")
        return "\n".join(parts)

    def builder(self, absolute: bool = False):  # -> cffi.FFI
        """The builder; sources relative to the checkout (setup.py) or absolute (in place)."""
        from cffi import FFI

        ffi = FFI()
        ffi.cdef(self.cdef_text())
        includes = "".join(f'#include "{h.name}"\n' for h in sorted(self.folder.glob("*.h")))
        digest = source_hash(self.folder)
        sources = sorted(self.folder.glob("*.c"))
        ffi.set_source(
            self.module,
            includes + f'const char *{self.prefix}_source_hash(void) {{ return "{digest}"; }}\n',
            sources=[str(p) if absolute else str(p.relative_to(ROOT)) for p in sources],
            include_dirs=[str(self.folder)],
            extra_compile_args=self.cflags,
            extra_link_args=self.ldflags,
        )
        return ffi

    def build_in_place(self, tmpdir: str) -> Path:
        """Compile and install next to the sources as `<stem>.abi3.so`, the name `pip install
        -e .` gives it (cffi modules use the stable ABI), removing other copies that could
        shadow it."""
        so = self.builder(absolute=True).compile(tmpdir=str(ROOT / "build" / tmpdir),
                                                 verbose=False)
        dest = self.folder / f"{self.stem}.abi3.so"
        for other in self.folder.glob(f"{self.stem}.*.so"):
            if other != dest:
                other.unlink()
        # copy then rename: overwriting the file in place would truncate the code that
        # running processes have mapped (they die with SIGBUS); a rename leaves them the
        # old inode
        part = dest.with_name(dest.name + f".{os.getpid()}.tmp")
        shutil.copy2(so, part)
        os.replace(part, dest)
        return dest
