"""Who owns the cores: pyllm's C pool, or OpenBLAS (the numpy paths), never both at once.

On this 2-vCPU machine two spinning pools in one process make each other (and the emulator
thread) crawl, so the fast path keeps OpenBLAS at 1 thread and the numpy paths give it the
threads the model was asked to use. OpenBLAS is reached through threadpoolctl when it is
installed, else through the symbols of the OpenBLAS numpy has loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_DEFAULT_THREADS = 2  # see default_threads


def default_threads() -> int:
    """PYLLM_THREADS, else the cores, at most 2: the engine shares the machine with the
    emulator (the AI device runs it in the harness's process), and two memory streams
    already saturate the bandwidth the int8 products are bound by."""
    env = os.environ.get("PYLLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_THREADS))


def set_blas_threads(n: int) -> bool:
    """Limit the BLAS behind numpy to n threads; False if no way to do it was found."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
        return True
    except ImportError:
        pass
    calls = _openblas()
    if calls is None:
        return False
    calls[0](n)
    return True


def blas_threads() -> int:
    """Threads the BLAS behind numpy uses now (1 if unknown)."""
    try:
        from threadpoolctl import threadpool_info

        return max((p.get("num_threads", 1) for p in threadpool_info()
                    if p.get("user_api") == "blas"), default=1)
    except ImportError:
        return 1


@contextlib.contextmanager
def blas_limit(n: int) -> Iterator[None]:
    """Run the block with numpy's OpenBLAS limited to n threads (no-op if it is not found).
    Called around every forward pass of the numpy paths, so it uses the OpenBLAS calls
    directly (threadpoolctl inspects the loaded libraries on every call)."""
    calls = _openblas()
    if calls is None:
        yield
        return
    set_n, get_n = calls
    old = get_n()
    set_n(n)
    try:
        yield
    finally:
        set_n(old)


_OPENBLAS: Any = None  # (set_num_threads, get_num_threads) of numpy's OpenBLAS, or False


def _openblas() -> tuple[Any, Any] | None:
    """The set/get thread-count calls of the OpenBLAS loaded in this process, found once."""
    global _OPENBLAS
    if _OPENBLAS is None:
        _OPENBLAS = _find_openblas() or False
    return _OPENBLAS or None


def _find_openblas() -> tuple[Any, Any] | None:
    import numpy  # noqa: F401  (loads its OpenBLAS, so /proc/self/maps lists it)

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    libs = sorted({ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.lower()
                   and ln.split()[-1].startswith("/")})
    for path in libs:
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                set_n = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                get_n = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if set_n is not None and get_n is not None:
                    set_n.argtypes, set_n.restype = [ctypes.c_int], None
                    get_n.restype = ctypes.c_int
                    return set_n, get_n
    return None
