"""Zeroed arrays in memory that Linux backs with 2 MB pages: the per-sequence state, and the
matrices a load repacks (RecordArena).

A decode step touches every sequence's KV cache (and Qwen3.5's DeltaNet memory) once per layer,
each layer's slice in other pages, while the weights stream through the caches between two
visits, so with 4 KB pages most of those touches are TLB misses too; 2 MB pages need 512 times
fewer TLB entries. What that gives a decode step, and how it is measured, is in
docs/ARCHITECTURE.md ("Batched decode: what bounds it"). The weights already come in 2 MB pages
(pyllm/loaders/safetensors.py).

Transparent huge pages are usually in `madvise` mode, so a region gets them only if it asks
(MADV_HUGEPAGE) and is 2 MB aligned: `zeros` maps anonymous memory with 2 MB of slack and
places the array on a 2 MB boundary. Untouched slack is never backed. Small arrays, and
systems without MADV_HUGEPAGE, get plain numpy memory.
"""

from __future__ import annotations

import mmap

import numpy as np

HUGE = 2 << 20
MIN_BYTES = HUGE  # below this a huge page would mostly hold nothing


def zeros(shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
    """np.zeros(shape, dtype), on 2 MB pages where the kernel will give them."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dt.itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advice is None:
        return np.zeros(shape, dt)
    region = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(advice)
    except OSError:  # THP compiled out: the pages stay small, the memory is still good
        pass
    raw = np.frombuffer(region, np.uint8)  # keeps `region` mapped while any view lives
    start = (-raw.ctypes.data) % HUGE
    return raw[start:start + nbytes].view(dt).reshape(shape)


def zeros_pair(shape_a: tuple[int, ...], shape_b: tuple[int, ...],
               dtype: np.dtype | type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Two zeroed arrays in one mapping (a KV cache's k and v), so that together they fill
    whole huge pages rather than each rounding up on its own."""
    na, nb = int(np.prod(shape_a)), int(np.prod(shape_b))
    flat = zeros((na + nb,), dtype)
    return flat[:na].reshape(shape_a), flat[na:].reshape(shape_b)


class RecordArena:
    """Memory for the repacked matrices of one load: large regions on 2 MB pages, handed out
    in 64-byte aligned pieces (the kernels' loads). Most matrices of a small model are under
    2 MB; each in memory of its own would take a page fault every 4 KB (SmolLM2 Q8_0: the
    faults took as long as the repack, 0.05 s). A region lives while any piece does; its
    untouched tail is never backed."""

    REGION = 64 << 20

    def __init__(self) -> None:
        self.region: np.ndarray | None = None
        self.used = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A zeroed uint8 array of nbytes, 64-byte aligned, in no other piece's memory."""
        at = self.used + (-self.used % 64)
        if self.region is None or at + nbytes > self.region.size:
            if nbytes >= self.REGION // 2:  # a large matrix gets a region of its own
                return zeros((nbytes,), np.uint8)
            self.region, at = zeros((self.REGION,), np.uint8), 0
        self.used = at + nbytes
        return self.region[at:at + nbytes]
