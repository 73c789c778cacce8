"""Who owns the cores: pyllm's C pool, or OpenBLAS (the numpy paths), never both at once.

On this 2-vCPU machine two spinning pools in one process make each other (and the emulator
thread) crawl, so the fast path keeps OpenBLAS at 1 thread and the numpy paths give it the
threads the model was asked to use. `threadpoolctl` does it when installed; otherwise the
OpenBLAS bundled with numpy is called directly.
"""

from __future__ import annotations

import ctypes
import glob
import os


def set_blas_threads(n: int) -> bool:
    """Limit the BLAS behind numpy to n threads; False if no way to do it was found."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
        return True
    except ImportError:
        pass
    import numpy as np

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                    "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                return True
    return False


def blas_threads() -> int:
    """Threads the BLAS behind numpy uses (1 if unknown)."""
    try:
        from threadpoolctl import threadpool_info

        return max((p.get("num_threads", 1) for p in threadpool_info()
                    if p.get("user_api") == "blas"), default=1)
    except ImportError:
        return 1
