"""The Ops: what a model asks for its matrices and kernels, chosen once at load time, so the
model code never branches on a weight format.

    ops = make_ops("numpy-f32")      # exact float32 (the reference path)
    ops = make_ops("c")              # int8 records (quant.h) + C kernels
    ops = make_ops("numpy-q8")       # the numpy twin of the int8 arithmetic
    lin = ops.linear("mlp.down", [tensor_ref, ...])   # rows of several tensors fused
    y = lin(x)                        # x (T, K) float32 -> y (T, N) float32

`linear` takes checkpoint tensors of any stored type (F32/F16/BF16, the GGUF block types);
`qmat_linear` the course's int8 rows. The ops also hold the per-token DeltaNet kernels
(`conv`, `delta_step`, `delta_chunked`), SwiGLU, the repack cache of the C path, and
`scope()` for a forward pass. `Ops` (NumpyOps) is the protocol: the other Ops have the
same members.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.backend import records, reference
from pyllm.backend.hugepages import RecordArena
from pyllm.backend.linear import (
    BlockTwinLinear,
    DenseLinear,
    Linear,
    QmatF32Linear,
    QmatTwinLinear,
    RecordLinear,
)
from pyllm.backend.tensors import Embedding, rows_f32, tensor_f32
from pyllm.backend.threads import blas_limit, default_threads
from pyllm.backend.traits import TRAITS
from pyllm.errors import PyllmError
from pyllm.kernels import qmat as qm
from pyllm.kernels import require_c_kernels
from pyllm.quants import BLOCK_BYTES

F32 = np.float32
BACKENDS = ("auto", "c", "numpy-q8", "numpy-f32")
Qmat = tuple[np.ndarray, np.ndarray]  # the course's int8 rows: (scale (rows,), q (rows, cols))
GGUF_BLOCKS = ("Q4_1", "Q8_0")  # stored types the C path repacks as they are


class NumpyOps:
    """The reference path ("numpy-f32"): float32 matrices, numpy DeltaNet step and conv."""

    backend = "numpy-f32"
    weight_format = "f32"
    cache_status = "off"
    c_kernels = False  # the compiled kernels run this path (their pool owns the cores)

    def __init__(self) -> None:
        self.weight_bytes = 0
        self.repack_s = 0.0  # seconds of repacking (and caching) at load: none here
        self.n_threads = 1  # numpy's BLAS is held to one thread in scope()

    def _count(self, lin: Linear) -> Linear:
        """Every matrix an Ops hands out: a format of the traits table, counted."""
        assert isinstance(lin, TRAITS[lin.format].linear), lin.format
        self.weight_bytes += lin.nbytes
        return lin

    def linear(self, name: str, parts: Sequence[Any]) -> Linear:
        w = np.concatenate([tensor_f32(t) for t in parts], axis=0) if len(parts) > 1 \
            else tensor_f32(parts[0])
        return self._count(DenseLinear(w))

    def qmat_linear(self, name: str, parts: Sequence[Qmat]) -> Linear:
        return self._count(DenseLinear(qm.dequantize_table(*qm.concat(parts))))

    def embedding(self, t: Any) -> Embedding:
        return Embedding(t)

    def finish(self) -> None:
        """Called after every matrix is built (the C ops close their repack cache here)."""

    def scope(self) -> contextlib.AbstractContextManager[None]:
        """Context for a forward pass: numpy's BLAS runs single-threaded in it. OpenBLAS's
        idle threads spin; when the other core is busy (the emulator, or the C kernels' own
        pool) its 2-thread products collapse, far slower than one thread's."""
        return blas_limit(1)

    @staticmethod
    def conv(x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:
        return reference.causal_conv(x, conv_state, w)

    @staticmethod
    def silu_mul(gu: np.ndarray) -> np.ndarray:
        """SwiGLU on [gate | up] rows: silu(gate) * up."""
        F = gu.shape[1] // 2
        return reference.silu(gu[:, :F]) * gu[:, F:]

    @staticmethod
    def delta_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                      beta: np.ndarray, S: np.ndarray, chunk: int) -> np.ndarray:
        return reference.delta_rule_chunked(q, k, v, g, beta, S, chunk)

    @staticmethod
    def delta_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                   beta: np.ndarray) -> np.ndarray:
        return reference.delta_rule_step(S, q, k, v, g, beta)


Ops = NumpyOps  # the protocol the models rely on


class NumpyQ8Ops(NumpyOps):
    """The numpy twin of the fast path: int8 matrices, numpy conv and DeltaNet step. GGUF
    blocks are used as stored; float rows are quantized like the C path does."""

    backend = "numpy-q8"
    weight_format = "q8_0-numpy"

    def linear(self, name: str, parts: Sequence[Any]) -> Linear:
        rows, cols = sum(t.shape[0] for t in parts), parts[0].shape[1]
        if cols % 32:
            return super().linear(name, parts)
        types = {t.type for t in parts}
        if len(types) == 1 and types <= set(GGUF_BLOCKS):
            raw = np.concatenate([np.asarray(t.raw).reshape(-1) for t in parts]) \
                if len(parts) > 1 else np.asarray(parts[0].raw)
            return self._count(BlockTwinLinear(types.pop(), raw, rows, cols))
        return self._count(BlockTwinLinear.quantized(rows_f32(parts, 0, rows)))

    def qmat_linear(self, name: str, parts: Sequence[Qmat]) -> Linear:
        return self._count(QmatTwinLinear(*qm.concat(parts)))


class CKernelOps(NumpyOps):
    """The fast path ("c"): 16-row records run by the C kernels -- each GGUF type as
    records.py's table says (Q4_1/Q4_0 -> Q4X16, Q4_K -> Q4K16, Q6_K -> Q6K16, Q8_0 and the
    exact int8 types -> Q8X16, the rest quantized at load to Q8X16), float rows quantized
    (Q8X16), the course's int8 rows as Q8R16; records are mapped from the repack cache when
    it has them.
    C conv, SwiGLU and DeltaNet steps. Threads: the pool of pyllm/kernels/pool.c."""

    weight_format = "q8x16"
    c_kernels = True

    def __init__(self, n_threads: int | None = None, cache_key: str | None = None,
                 cache_name: str = "", records: str = "q8x16") -> None:
        super().__init__()
        from pyllm.kernels import backend_name

        self.ffi, self.lib = require_c_kernels()
        self.backend = backend_name()
        self.n_threads = n_threads or default_threads()
        self.lib.pyllm_set_threads(self.n_threads)
        self.arena = RecordArena()  # where repacked matrices go
        self.cache = None
        if cache_key:
            from pyllm.backend.repack_cache import RepackCache
            from pyllm.paths import cache_dir

            self.cache = RepackCache(cache_key, cache_name, cache_dir(), records)

    @property
    def cache_status(self) -> str:  # type: ignore[override]
        return self.cache.status if self.cache is not None else "off"

    def linear(self, name: str, parts: Sequence[Any]) -> Linear:
        rows, cols = sum(t.shape[0] for t in parts), parts[0].shape[1]
        if cols % 32:  # no 32-column blocks: keep it exact
            return super().linear(name, parts)
        runs = records.plan(parts, cols)  # which record each part's type goes to
        if runs is None:  # parts not on 16-row groups: quantize all rows as one Q8X16
            return self._count(self._records(name, "PYLLM_Q8X16", list(parts), cols,
                                             whole=True))
        subs = [self._records(name if len(runs) == 1 else f"{name}#{i}", kind, ts, cols)
                for i, (kind, ts) in enumerate(runs)]
        if len(subs) == 1:
            return self._count(subs[0])
        return self._count(RecordLinear.of_parts(subs, rows))

    def _records(self, name: str, kind: str, ts: list[Any], cols: int,
                 whole: bool = False) -> RecordLinear:
        """One record matrix of the rows of `ts`, from the repack cache or repacked now
        (whole: quantized as one row range instead of part by part)."""
        rows = sum(t.shape[0] for t in ts)
        padded = rows + (-rows % 16)
        # float rows are quantized in row slabs on every thread; block types go part by part
        # (repack_run: as stored, or requantized in C on the pool)
        whole = whole or (kind == "PYLLM_Q8X16" and not any(t.type in BLOCK_BYTES for t in ts))
        nbytes = int(self.lib.pyllm_qmat_bytes(getattr(self.lib, kind), padded, cols)) if whole \
            else records.run_bytes(self.lib, kind, ts, cols)
        data = self.cache.get(name, nbytes) if self.cache is not None else None
        if data is None:
            t_repack = time.perf_counter()
            data = self.arena.take(nbytes)
            if whole:
                self._quantize_rows(ts, padded, cols, data)
            else:
                records.repack_run(self.lib, self.ffi, kind, ts, cols, data)
            if self.cache is not None:
                self.cache.put(name, data)
            self.repack_s += time.perf_counter() - t_repack
        return RecordLinear(data, rows, cols, kind)

    def _quantize_rows(self, parts: Sequence[Any], padded: int, cols: int,
                       data: np.ndarray) -> None:
        per_group = data.nbytes // (padded // 16)
        slab = max(16, (1 << 22) // (cols * 4) // 16 * 16)  # ~4 MB of f32 at a time

        def quantize(r0: int) -> None:  # rows [r0, r0 + slab): convert, then quantize
            r1 = min(padded, r0 + slab)
            x = rows_f32(parts, r0, r1)
            out = data[r0 // 16 * per_group:]
            rc = self.lib.pyllm_quantize_f32_q8x16(
                self.ffi.cast("float *", x.ctypes.data), r1 - r0, cols,
                self.ffi.cast("uint8_t *", out.ctypes.data))
            assert rc == 0

        starts = range(0, padded, slab)
        if len(starts) > 1 and self.n_threads > 1:  # numpy and cffi release the GIL
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.n_threads) as ex:
                list(ex.map(quantize, starts))
        else:
            for r0 in starts:
                quantize(r0)

    def qmat_linear(self, name: str, parts: Sequence[Qmat]) -> Linear:
        return self._count(RecordLinear.from_qmat(*qm.concat(parts)))

    def finish(self) -> None:
        if self.cache is not None:
            t = time.perf_counter()
            self.cache.save()  # a new file is written on a thread of its own
            if self.cache.fresh:
                self.repack_s += time.perf_counter() - t

    def conv(self, x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:  # type: ignore[override]
        out = np.empty(x.shape, F32)
        x = np.ascontiguousarray(x, dtype=F32)
        f = self.ffi
        self.lib.pyllm_gdn_conv(f.cast("float *", conv_state.ctypes.data),
                                f.cast("float *", x.ctypes.data), x.shape[0],
                                f.cast("float *", w.ctypes.data), w.shape[1], w.shape[0],
                                f.cast("float *", out.ctypes.data))
        return out

    def silu_mul(self, gu: np.ndarray) -> np.ndarray:  # type: ignore[override]
        n, two_f = gu.shape
        gu = np.ascontiguousarray(gu, dtype=F32)
        out = np.empty((n, two_f // 2), F32)
        self.lib.pyllm_silu_mul(self.ffi.cast("float *", gu.ctypes.data), n, two_f // 2,
                                self.ffi.cast("float *", out.ctypes.data))
        return out

    def delta_chunked(self, q: np.ndarray, k: np.ndarray, v: np.ndarray,  # type: ignore[override]
                      g: np.ndarray, beta: np.ndarray, S: np.ndarray, chunk: int) -> np.ndarray:
        T, H, dk = k.shape
        dv = v.shape[2]
        out = np.empty((T, H, dv), F32)
        f = self.ffi
        args = [np.ascontiguousarray(a, dtype=F32) for a in (q, k, v, g, beta)]
        rc = self.lib.pyllm_gdn_chunked(f.cast("float *", S.ctypes.data),
                                        *(f.cast("float *", a.ctypes.data) for a in args),
                                        H, T, dk, dv, min(chunk, 64),
                                        f.cast("float *", out.ctypes.data))
        if rc == -2:
            raise MemoryError("pyllm_gdn_chunked: out of memory")
        if rc != 0:  # sizes the kernel does not take (dv > 256, chunk > 64)
            return super().delta_chunked(q, k, v, g, beta, S, chunk)
        return out

    def delta_step(self, S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,  # type: ignore[override]
                   g: np.ndarray, beta: np.ndarray) -> np.ndarray:
        H, dk, dv = S.shape
        out = np.empty((H, dv), F32)
        f = self.ffi
        args = [np.ascontiguousarray(a, dtype=F32) for a in (q, k, v, g, beta)]
        rc = self.lib.pyllm_gdn_step(f.cast("float *", S.ctypes.data),
                                     *(f.cast("float *", a.ctypes.data) for a in args),
                                     H, dk, dv, f.cast("float *", out.ctypes.data))
        if rc != 0:
            return super().delta_step(S, q, k, v, g, beta)
        return out


class CF32Ops(CKernelOps):
    """The course's own arithmetic ("c-f32"): its int8 rows times float32 activations in C
    (course assets only; the kernels otherwise as CKernelOps)."""

    def qmat_linear(self, name: str, parts: Sequence[Qmat]) -> Linear:
        return self._count(QmatF32Linear(*qm.concat(parts)))


def make_ops(backend: str = "auto", *, n_threads: int | None = None,
             cache_key: str | None = None, cache_name: str = "", records: str = "q8x16",
             fallback: str = "numpy-f32", course: bool = False) -> NumpyOps:
    """Ops for a backend: "c" (int8 records + C kernels), "numpy-q8" (its numpy twin),
    "numpy-f32" (exact float32, alias "numpy"), "c-f32" (course assets only), "auto" ("c"
    when the kernels are built, else `fallback`: numpy-f32 is both exact and faster than the
    int8 twin in numpy). cache_key / cache_name / records: the C path's repack cache (none
    without a key)."""
    from pyllm import kernels

    backend = {"numpy": "numpy-f32"}.get(backend, backend)
    choices = BACKENDS + (("c-f32",) if course else ())
    if backend not in choices:
        raise PyllmError(f"unknown backend '{backend}' (choose {', '.join(choices)})")
    if backend == "auto":
        backend = "c" if kernels.c_kernels() is not None else fallback
    if backend == "numpy-f32":
        return NumpyOps()
    if backend == "numpy-q8":
        return NumpyQ8Ops()
    if kernels.c_kernels() is None:
        raise PyllmError(f"backend '{backend}' requested but {kernels.C_KERNELS_ERROR}")
    if backend == "c-f32":
        return CF32Ops(n_threads=n_threads)
    return CKernelOps(n_threads=n_threads, cache_key=cache_key, cache_name=cache_name,
                      records=records)
