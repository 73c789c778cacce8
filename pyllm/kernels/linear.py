"""Matrices, embeddings and the DeltaNet step as the Qwen3.5 model sees them: opaque objects
chosen once at load time, so the model code never branches on a weight format.

    ops = make_ops("numpy-f32")      # exact float32 (the reference path)
    ops = make_ops("c")              # int8 Q8X16 matrices (quant.h) + C kernels
    ops = make_ops("numpy-q8")       # the numpy twin of the int8 arithmetic
    lin = ops.linear("mlp.down", [tensor_ref, ...])   # rows of several tensors fused
    y = lin(x)                        # x (T, K) float32 -> y (T, N) float32

The ops also hold the per-token DeltaNet kernels (`conv`, `delta_step`), SwiGLU, the repack
cache of the C path, and `scope()` for a forward pass. `TRAITS` maps a format name to its
Linear class; the int8 one is tested against its numpy twin (`tests/test_qwen_kernels.py`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pyllm.errors import PyllmError

F32 = np.float32


def tensor_f32(t: Any) -> np.ndarray:
    """A TensorRef (F32, F16 or BF16) as a float32 array (exact conversion)."""
    return raw_f32(t.type, t.raw)


def raw_f32(type_: str, raw: np.ndarray) -> np.ndarray:
    """Stored F32 / F16 / BF16 (as uint16 bits) elements as float32 (exact conversion)."""
    from pyllm.loaders.safetensors import bf16_to_f32

    if type_ == "BF16":
        return bf16_to_f32(np.asarray(raw))
    return np.asarray(raw, dtype=F32)


class DenseLinear:
    """Exact float32: y = x @ W.T with W (N, K) held in memory."""

    format = "f32"

    def __init__(self, w: np.ndarray) -> None:
        self.w = np.ascontiguousarray(w, dtype=F32)
        self.shape = self.w.shape

    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w.T


class Embedding:
    """Row lookup in an embedding table kept in its stored dtype (bf16 rows convert exactly;
    a memory-mapped table costs no RAM for rows never used)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def rows(self, ids: np.ndarray) -> np.ndarray:
        from pyllm.loaders.safetensors import bf16_to_f32

        raw = np.asarray(self.t.raw)[np.asarray(ids, dtype=np.int64)]
        return bf16_to_f32(raw) if self.t.type == "BF16" else raw.astype(F32)


class NumpyOps:
    """The reference path ("numpy-f32"): float32 matrices, numpy DeltaNet step and conv."""

    backend = "numpy-f32"
    weight_format = "f32"
    cache_status = "off"

    def __init__(self) -> None:
        self.weight_bytes = 0
        self.repack_s = 0.0  # seconds spent quantizing (and caching) at load: none here
        self.n_threads = 1  # numpy's BLAS is held to one thread in scope()

    def linear(self, name: str, parts: Sequence[Any]) -> DenseLinear:
        w = np.concatenate([tensor_f32(t) for t in parts], axis=0) if len(parts) > 1 \
            else tensor_f32(parts[0])
        lin = DenseLinear(w)
        self.weight_bytes += lin.nbytes
        return lin

    def embedding(self, t: Any) -> Embedding:
        return Embedding(t)

    def finish(self) -> None:
        """Called after every matrix is built (the C ops close their repack cache here)."""

    def scope(self) -> contextlib.AbstractContextManager[None]:
        """Context for a forward pass: numpy's BLAS runs single-threaded in it. OpenBLAS's
        idle threads spin; when the other core is busy (the emulator, or the C kernels' own
        pool) its 2-thread products collapse (the chunked delta rule of a 128-token prompt
        measured 17 ms single-threaded and 130 ms with 2 threads next to a busy core)."""
        return blas_threads(1)

    @staticmethod
    def conv(x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:
        from pyllm.models.qwen35 import causal_conv

        return causal_conv(x, conv_state, w)

    @staticmethod
    def silu_mul(gu: np.ndarray) -> np.ndarray:
        """SwiGLU on [gate | up] rows: silu(gate) * up."""
        from pyllm.models.qwen35 import silu

        F = gu.shape[1] // 2
        return silu(gu[:, :F]) * gu[:, F:]

    @staticmethod
    def delta_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                      beta: np.ndarray, S: np.ndarray, chunk: int) -> np.ndarray:
        from pyllm.models.qwen35 import delta_rule_chunked

        return delta_rule_chunked(q, k, v, g, beta, S, chunk)

    @staticmethod
    def delta_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                   beta: np.ndarray) -> np.ndarray:
        from pyllm.models.qwen35 import delta_rule_step

        return delta_rule_step(S, q, k, v, g, beta)


class Q8Linear:
    """int8 weights in Q8X16 records (pyllm/kernels/quant.h: 16 rows interleaved, one f16
    scale per row and 32 columns, like GGUF Q8_0), times int8-quantized activations, run by
    pyllm_qmatmul. Rows are padded to a multiple of 16; the padding is cut off the result.
    The activation buffers for one token are kept (decode calls this ~100 times a token)."""

    format = "q8x16"

    def __init__(self, data: np.ndarray, rows: int, cols: int) -> None:
        from pyllm.kernels.ops import QMat

        self.rows, self.shape = rows, (rows, cols)
        self.qm = QMat(data, rows + (-rows % 16), cols, native()[1].PYLLM_Q8X16)
        self.ffi, self.lib = native()
        self._one: tuple[Any, np.ndarray, Any, Any] | None = None  # decode buffers

    @property
    def nbytes(self) -> int:
        return self.qm.data.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.shape[0] != 1:
            y = self.qm.matmul(x)
            return y if y.shape[1] == self.rows else y[:, :self.rows]
        if self._one is None:
            from pyllm.kernels.ops import QAct

            act = QAct(1, self.shape[1])
            out = np.empty((1, self.qm.rows), F32)
            self._one = (act, out, self.ffi.cast("float *", out.ctypes.data), act.c)
        act, out, out_p, act_c = self._one
        x = np.ascontiguousarray(x, dtype=F32)
        self.lib.pyllm_quantize_act(self.ffi.cast("float *", x.ctypes.data), 1, self.shape[1],
                                    act_c)
        self.lib.pyllm_qmatmul(self.qm.c, act_c, out_p)
        return out[:, :self.rows].copy()


def native() -> Any:
    from pyllm.kernels import native as _native

    return _native()


def rows_f32(parts: Sequence[Any], r0: int, r1: int) -> np.ndarray:
    """Rows [r0, r1) of the row-wise concatenation of `parts` as float32; rows past the end
    are zero (the padding of the last 16-row group)."""
    cols = parts[0].shape[1]
    out = np.zeros((r1 - r0, cols), F32)
    base = 0
    for t in parts:
        n = t.shape[0]
        lo, hi = max(r0, base), min(r1, base + n)
        if lo < hi:
            out[lo - r0:hi - r0] = raw_f32(t.type, np.asarray(t.raw)[lo - base:hi - base])
        base += n
    return out


class RepackCache:
    """The repacked matrices of one checkpoint, kept in one file so the next load maps them
    instead of quantizing again (0.8B: ~0.9 GB, written once).

    File: `<cache dir>/qwen35-<path tag>-<key>.q8x16.safetensors`, a safetensors file of U8
    tensors (one per fused matrix, 64-byte aligned). The key covers the checkpoint's headers,
    sizes and mtimes and the record format (quant.h's record size and a hash of the
    quantizer's sources), so a changed checkpoint or format gets a new file; older files for
    the same checkpoint path are deleted when one is written.
    """

    FORMAT = "q8x16-v2"

    def __init__(self, key: str, path_tag: str, folder: Path) -> None:
        self.folder = folder
        key = _format_key(self.FORMAT + key)
        self.path = folder / f"qwen35-{path_tag}-{key}.q8x16.safetensors"
        self.tag = path_tag
        self.file = None
        self.arrays: dict[str, np.ndarray] = {}  # every matrix, mapped or freshly packed
        self.fresh = False  # some matrix was not in the file: write a new one
        if self.path.exists():
            from pyllm.loaders.safetensors import SafetensorsFile

            try:
                f = SafetensorsFile(self.path)
                if f.metadata.get("format") == self.FORMAT:
                    self.file = f
                    f.advise_willneed()
            except PyllmError:
                self.file = None  # damaged: rebuild it

    def get(self, name: str, nbytes: int) -> np.ndarray | None:
        if self.file is None or name not in self.file.tensors:
            return None
        arr = self.file.raw(name)
        if arr.nbytes != nbytes or arr.ctypes.data % 64:
            return None
        self.arrays[name] = arr
        return arr

    def put(self, name: str, data: np.ndarray) -> None:
        self.arrays[name] = data
        self.fresh = True

    @property
    def status(self) -> str:
        return "miss" if self.fresh else "hit" if self.file is not None else "empty"

    def save(self) -> None:
        """After loading: write the file (atomically) if anything was repacked, else fault the
        mapped file in (so load time covers the whole read). Write failures only warn."""
        if not self.fresh:
            if self.file is not None:
                self.file.populate()
            return
        import warnings

        from pyllm.loaders.safetensors import SafetensorsWriter

        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            specs = [(n, "U8", a.shape) for n, a in self.arrays.items()]
            with SafetensorsWriter(tmp, specs, {"format": self.FORMAT}, align=64) as w:
                for n, a in self.arrays.items():
                    w.write(n, a)
            os.replace(tmp, self.path)
            for old in self.folder.glob(f"qwen35-{self.tag}-*.q8x16.safetensors"):
                if old != self.path:
                    old.unlink(missing_ok=True)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            warnings.warn(f"could not write the repack cache {self.path}: {exc}", stacklevel=2)


def _format_key(base: str) -> str:
    """Fold the record format into a cache key: record size and the quantizer's sources."""
    import hashlib

    h = hashlib.sha256(base.encode())
    _, lib = native()
    h.update(str(lib.PYLLM_Q8X16_RECORD).encode())
    for name in ("quant.h", "quant.c"):
        src = Path(__file__).with_name(name)
        if src.exists():
            h.update(src.read_bytes())
    return h.hexdigest()[:24]


def cache_dir() -> Path:
    """PYLLM_CACHE_DIR, else models/.cache next to the named models."""
    env = os.environ.get("PYLLM_CACHE_DIR")
    if env:
        return Path(env)
    from pyllm.registry import models_dir

    return models_dir() / ".cache"


class Q8Ops(NumpyOps):
    """The fast path: Q8X16 matrices (quantized from bf16/f16/f32 at load, or mapped from the
    repack cache), C conv step and DeltaNet step. Threads: the pool of pyllm/kernels/pool.c."""

    weight_format = "q8x16"

    def __init__(self, n_threads: int | None = None, cache_key: str | None = None,
                 cache_tag: str = "") -> None:
        super().__init__()
        from pyllm.kernels import backend_name

        self.ffi, self.lib = native()
        self.backend = backend_name()
        self.n_threads = n_threads or default_threads()
        self.lib.pyllm_set_threads(self.n_threads)
        self.cache = RepackCache(cache_key, cache_tag, cache_dir()) if cache_key else None

    @property
    def cache_status(self) -> str:  # type: ignore[override]
        return self.cache.status if self.cache is not None else "off"

    def linear(self, name: str, parts: Sequence[Any]) -> Q8Linear | DenseLinear:  # type: ignore[override]
        from pyllm.kernels.ops import aligned_empty

        rows, cols = sum(t.shape[0] for t in parts), parts[0].shape[1]
        if cols % 32:  # no 32-column blocks: keep it exact
            return super().linear(name, parts)
        padded = rows + (-rows % 16)
        nbytes = int(self.lib.pyllm_qmat_bytes(self.lib.PYLLM_Q8X16, padded, cols))
        data = self.cache.get(name, nbytes) if self.cache is not None else None
        if data is None:
            t_repack = time.perf_counter()
            data = aligned_empty(nbytes)
            per_group = nbytes // (padded // 16)
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
            if self.cache is not None:
                self.cache.put(name, data)
            self.repack_s += time.perf_counter() - t_repack
        lin = Q8Linear(data, rows, cols)
        self.weight_bytes += lin.nbytes
        return lin

    def finish(self) -> None:
        if self.cache is not None:
            t = time.perf_counter()
            self.cache.save()
            if self.cache.fresh:  # writing the new cache is part of the one-time repack
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


Ops = NumpyOps  # the protocol the model relies on (Q8Ops has the same members)
Linear = DenseLinear | Q8Linear
TRAITS: dict[str, type] = {"f32": DenseLinear, "q8x16": Q8Linear}


class Q8TwinLinear:
    """The numpy twin of Q8Linear: the same Q8_0-style weight quantization (per 32 columns,
    f16 scale, round half to even) and int8 activations, computed by pyllm.kernels.twins."""

    format = "q8_0-numpy"

    def __init__(self, w: np.ndarray) -> None:
        from pyllm.quants import Q8_0_BLOCK

        rows, cols = w.shape
        xb = np.ascontiguousarray(w, dtype=F32).reshape(rows, cols // 32, 32)
        amax = np.abs(xb).max(axis=2)
        d16 = (amax / F32(127)).astype(np.float16)
        d = d16.astype(F32)
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
        blocks = np.empty((rows, cols // 32), Q8_0_BLOCK)
        blocks["d"] = d16
        blocks["qs"] = np.clip(np.rint(xb * inv[:, :, None]), -127, 127).astype(np.int8)
        self.raw = blocks.reshape(-1).view(np.uint8)
        self.shape = (rows, cols)

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        from pyllm.kernels.twins import qmatmul_q8_0

        return qmatmul_q8_0(self.raw, *self.shape, np.ascontiguousarray(x, dtype=F32))


class NumpyQ8Ops(NumpyOps):
    """The numpy twin of the fast path: int8 matrices, numpy conv and DeltaNet step."""

    backend = "numpy-q8"
    weight_format = "q8_0-numpy"

    def linear(self, name: str, parts: Sequence[Any]) -> Q8TwinLinear | DenseLinear:  # type: ignore[override]
        if parts[0].shape[1] % 32:
            return super().linear(name, parts)
        rows = sum(t.shape[0] for t in parts)
        lin = Q8TwinLinear(rows_f32(parts, 0, rows))
        self.weight_bytes += lin.nbytes
        return lin


Ops = NumpyOps  # the protocol the model relies on (the other Ops have the same members)
Linear = DenseLinear | Q8Linear | Q8TwinLinear
TRAITS: dict[str, type] = {"f32": DenseLinear, "q8x16": Q8Linear, "q8_0-numpy": Q8TwinLinear}

# the OS course's per-row int8 "qmat" matrices (pyllm/kernels/qmat.py; course assets only)
from pyllm.kernels.qmat import QmatF32Linear, QmatLinear, QmatTwinLinear  # noqa: E402

Linear = Linear | QmatLinear | QmatTwinLinear | QmatF32Linear
TRAITS.update({"qmat": QmatLinear, "qmat-numpy": QmatTwinLinear, "qmat-f32": QmatF32Linear})
BACKENDS = ("auto", "c", "numpy-q8", "numpy-f32")


def make_ops(backend: str = "auto", *, n_threads: int | None = None,
             cache_key: str | None = None, cache_tag: str = "") -> NumpyOps:
    """Ops for a backend: "c" (Q8X16 + C kernels), "numpy-q8" (its numpy twin),
    "numpy-f32" (exact float32, alias "numpy"), "auto" ("c" when the kernels are built,
    else "numpy-f32", which is both exact and faster than the int8 twin in numpy)."""
    backend = {"numpy": "numpy-f32"}.get(backend, backend)
    if backend not in BACKENDS:
        raise PyllmError(f"unknown backend '{backend}' (choose {', '.join(BACKENDS)})")
    if backend == "numpy-f32":
        return NumpyOps()
    if backend == "numpy-q8":
        return NumpyQ8Ops()
    from pyllm.kernels import native as _native

    if _native() is None:
        if backend == "c":
            from pyllm.kernels import NATIVE_ERROR

            raise PyllmError(f"backend 'c' requested but {NATIVE_ERROR}")
        return NumpyOps()
    return Q8Ops(n_threads=n_threads, cache_key=cache_key, cache_tag=cache_tag)


_BLAS_SET: Any = None  # (set_num_threads, get_num_threads) of numpy's OpenBLAS, or False


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Run the block with numpy's OpenBLAS limited to n threads (no-op if it is not found)."""
    global _BLAS_SET
    if _BLAS_SET is None:
        _BLAS_SET = _find_openblas() or False
    if not _BLAS_SET:
        yield
        return
    set_n, get_n = _BLAS_SET
    old = get_n()
    set_n(n)
    try:
        yield
    finally:
        set_n(old)


def _find_openblas() -> tuple[Any, Any] | None:
    import ctypes

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


def default_threads() -> int:
    """PYLLM_THREADS, else the cores (at most 2: the engine shares the machine with the
    emulator, and two memory streams already saturate the bandwidth)."""
    env = os.environ.get("PYLLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(os.cpu_count() or 1, 2))
