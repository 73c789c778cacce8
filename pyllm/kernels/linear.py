"""Matrices, embeddings and the DeltaNet step as the Qwen3.5 model sees them: opaque objects
chosen once at load time, so the model code never branches on a weight format.

    ops = make_ops("numpy")          # exact float32 (the reference path)
    ops = make_ops("c")              # int8 Q8x16 repacked matrices + C kernels
    lin = ops.linear("mlp.down", [tensor_ref, ...])   # rows of several tensors fused
    y = lin(x)                        # x (T, K) float32 -> y (T, N) float32

`TRAITS` maps a format name to its Linear class; every entry has a numpy twin that the
tests compare against (`tests/test_qwen_kernels.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.errors import PyllmError

F32 = np.float32


def tensor_f32(t: Any) -> np.ndarray:
    """A TensorRef (F32, F16 or BF16) as a float32 array (exact conversion)."""
    from pyllm.loaders.safetensors import bf16_to_f32

    if t.type == "BF16":
        return bf16_to_f32(np.asarray(t.raw))
    return np.asarray(t.raw, dtype=F32)


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
    """The reference path: float32 matrices, numpy DeltaNet step and conv."""

    backend = "numpy-f32"
    weight_format = "f32"
    cache_status = "off"

    def __init__(self) -> None:
        self.weight_bytes = 0
        self.n_threads = 1

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

    @staticmethod
    def conv(x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:
        from pyllm.models.qwen35 import causal_conv

        return causal_conv(x, conv_state, w)

    @staticmethod
    def delta_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                   beta: np.ndarray) -> np.ndarray:
        from pyllm.models.qwen35 import delta_rule_step

        return delta_rule_step(S, q, k, v, g, beta)


Ops = NumpyOps  # the protocol the model relies on (the C ops class has the same members)
Linear = DenseLinear
TRAITS: dict[str, type] = {"f32": DenseLinear}


def make_ops(backend: str = "auto", *, n_threads: int | None = None,
             cache_key: str | None = None) -> NumpyOps:
    """Ops for a backend name: "numpy" (exact f32), "c" (Q8x16 + C kernels), "auto"."""
    if backend not in ("auto", "c", "numpy"):
        raise PyllmError(f"unknown backend '{backend}' (choose auto, c or numpy)")
    if backend == "numpy" or os.environ.get("PYLLM_NO_NATIVE"):
        if backend == "c":
            raise PyllmError("backend 'c' requested but PYLLM_NO_NATIVE is set")
        return NumpyOps()
    from pyllm.kernels import native

    if native() is None:
        if backend == "c":
            from pyllm.kernels import NATIVE_ERROR

            raise PyllmError(f"backend 'c' requested but {NATIVE_ERROR}")
        return NumpyOps()
    from pyllm.kernels.q8x16 import Q8Ops

    return Q8Ops(n_threads=n_threads, cache_key=cache_key)
