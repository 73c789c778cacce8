"""The machine's hot paths in C (cffi, `_fastpath`): see build.py, traps.h, mmio.h.

`load()` gives (ffi, lib), or None with `ERROR` saying why (not built, or built from other
sources than these: a stale build would silently run old code, so it is not used).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ERROR = ""
_LOADED: tuple[Any, Any] | None = None
_TRIED = False

REBUILD = "build it with `make build` or `python -m harness.fastpath.build_fastpath`"


def load() -> tuple[Any, Any] | None:
    global ERROR, _LOADED, _TRIED
    if _TRIED:
        return _LOADED
    _TRIED = True
    try:
        from harness.fastpath._fastpath import ffi, lib  # type: ignore[import-not-found]
    except ImportError as exc:
        ERROR = f"the C trap path is not built ({exc}); {REBUILD}"
        return None
    if (Path(__file__).parent / "traps.c").exists():  # sources present: compare them
        from pyllm.kernels.extension import source_hash

        if source_hash(Path(__file__).parent) != ffi.string(lib.fp_source_hash()).decode():
            ERROR = f"the C trap path is older than its sources; {REBUILD}"
            return None
    _LOADED = (ffi, lib)
    return _LOADED
