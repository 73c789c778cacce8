"""pyllm's hot kernels: C through cffi (`_ckernels`), each with a numpy twin (`twins.py`).

`c_kernels()` returns the cffi `(ffi, lib)` pair, or None when the extension is not built
(then every caller uses the numpy twins, which give the same answers, only slower);
`require_c_kernels()` the pair or a one-line error. `backend_name()` says which code runs
("c-avx512vnni", "c-generic" or "numpy"). Set PYLLM_NO_C=1 to force the numpy path.

Adding a kernel: see build_kernels.py (file layout, cffi markers, runtime ISA dispatch).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

_LOADED: tuple[Any, Any] | None = None
_TRIED = False
C_KERNELS_ERROR: str | None = None  # why the C kernels are not in use, if they are not


def c_kernels() -> tuple[Any, Any] | None:
    """The (ffi, lib) of the compiled kernels, or None (numpy fallback)."""
    global _LOADED, _TRIED, C_KERNELS_ERROR
    if _TRIED:
        return _LOADED
    _TRIED = True
    if os.environ.get("PYLLM_NO_C"):
        C_KERNELS_ERROR = "disabled by PYLLM_NO_C"
        return None
    try:
        from pyllm.kernels._ckernels import ffi, lib  # type: ignore[import-not-found]
    except ImportError as exc:
        C_KERNELS_ERROR = (f"C kernels not built ({exc}); using numpy. Build them with "
                        "`pip install -e .` or `python -m pyllm.kernels.build_kernels`")
        warnings.warn(C_KERNELS_ERROR, RuntimeWarning, stacklevel=2)
        return None
    _check_fresh(ffi.string(lib.pyllm_source_hash()).decode())
    _LOADED = (ffi, lib)
    return _LOADED


def require_c_kernels() -> tuple[Any, Any]:
    """The (ffi, lib) of the compiled kernels; a PyllmError saying why when they are not in
    use (for code that has no numpy fallback)."""
    nat = c_kernels()
    if nat is None:
        from pyllm.errors import PyllmError

        raise PyllmError(f"the C kernels are not available: {C_KERNELS_ERROR}")
    return nat


def _check_fresh(built: str) -> None:
    """Warn when the sources changed since the extension was built (a stale build misleads)."""
    try:
        from pathlib import Path

        from pyllm.kernels.extension import source_hash

        here = Path(__file__).parent
        if not (here / "kernels.h").exists():  # installed without sources
            return
        if source_hash(here) != built:
            warnings.warn("pyllm C kernels are older than their sources: rebuild with "
                          "`python -m pyllm.kernels.build_kernels`", RuntimeWarning, stacklevel=3)
    except Exception:  # sources absent (installed wheel) or cffi missing: nothing to compare
        pass


def backend_name() -> str:
    nat = c_kernels()
    if nat is None:
        return "numpy"
    return "c-avx512vnni" if nat[1].pyllm_cpu_has_avx512vnni() else "c-generic"
