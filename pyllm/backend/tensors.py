"""Stored tensors as float32, and the embedding lookup: the one place that reads a tensor
of any stored type (F32, F16, BF16, and the GGUF block types of pyllm/quants.py, kquants.py).

A TensorRef's `raw` is uint8 bytes for block types (rows of whole blocks); for the
float types it is the typed elements (safetensors) or their bytes (GGUF).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.quants import BLOCK_BYTES, BLOCK_SIZE, bf16_to_f32, dequantize, row_bytes

F32 = np.float32
ELEMENTS = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}  # BF16 as its bits


def elements(t: Any) -> np.ndarray:
    """The stored elements of a float-type TensorRef, typed and shaped (a view, no copy)."""
    return np.asarray(t.raw).view(ELEMENTS[t.type]).reshape(t.shape)


def raw_f32(type_: str, raw: np.ndarray) -> np.ndarray:
    """Stored F32 / F16 / BF16 (as uint16 bits) elements as float32 (exact conversion)."""
    if type_ == "BF16":
        return bf16_to_f32(np.asarray(raw))
    return np.asarray(raw, dtype=F32)


def dequant_fast(type_: str, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """quants.dequantize, in C when the kernels are built (pyllm/kernels/dequant.c: the same
    float32 values, 2-7 times faster than numpy, Q5_1 and Q5_K with AVX-512 16-28 times)."""
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is None or type_ not in BLOCK_BYTES:
        return dequantize(type_, raw, shape)
    from pyllm.loaders.gguf import GGML_TYPE_IDS

    ffi, lib = nat
    raw = np.ascontiguousarray(raw)
    out = np.empty(shape, F32)
    nblocks = out.size // BLOCK_SIZE[type_]
    assert raw.nbytes == nblocks * BLOCK_BYTES[type_], (type_, raw.nbytes, shape)
    rc = lib.pyllm_dequant(GGML_TYPE_IDS[type_], ffi.cast("uint8_t *", raw.ctypes.data),
                           nblocks, ffi.cast("float *", out.ctypes.data))
    return out if rc == 0 else dequantize(type_, raw, shape)


def tensor_f32(t: Any) -> np.ndarray:
    """A TensorRef of any supported type as a float32 array of its shape (exact for the
    float types; block types are dequantized)."""
    if t.type in BLOCK_BYTES:
        return dequant_fast(t.type, np.asarray(t.raw), t.shape)
    return raw_f32(t.type, elements(t))


def tensor_rows(t: Any, lo: int, hi: int) -> np.ndarray:
    """Rows [lo, hi) of a 2-D TensorRef as float32 (only those rows are read)."""
    rows, cols = t.shape
    if t.type in BLOCK_BYTES:
        part = np.asarray(t.raw).reshape(rows, row_bytes(t.type, cols))[lo:hi]
        return dequant_fast(t.type, part.reshape(-1), (hi - lo, cols))
    return raw_f32(t.type, elements(t)[lo:hi])


def gather_rows(t: Any, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` (any order, repeats allowed) of a 2-D TensorRef as float32."""
    ids = np.asarray(ids, dtype=np.int64)
    rows, cols = t.shape
    if t.type in BLOCK_BYTES:
        part = np.asarray(t.raw).reshape(rows, row_bytes(t.type, cols))[ids]
        return dequant_fast(t.type, part.reshape(-1), (len(ids), cols))
    return raw_f32(t.type, elements(t)[ids])


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
            out[lo - r0:hi - r0] = tensor_rows(t, lo - base, hi - base)
        base += n
    return out


class Embedding:
    """Row lookup in an embedding table kept in its stored type (a memory-mapped table costs
    no RAM for rows never used)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return gather_rows(self.t, ids)

    def c_table(self, native: tuple[str, ...]) -> tuple[str, np.ndarray] | None:
        """The whole table for a C forward pass: (its stored type, the stored elements) if the
        C code reads that type (`native`), else ("F32", the table converted once) for the
        float types. None means "no whole table: give the rows of each call" (see
        `call_rows`): a block type the C code does not read (a Q6_K table of 248k rows
        would be 1 GB as float32, and its conversion a second of every load)."""
        if self.t.type in native:
            return self.t.type, np.ascontiguousarray(self.t.raw)
        if self.t.type in BLOCK_BYTES:
            return None
        return "F32", np.ascontiguousarray(tensor_f32(self.t))


def call_rows(embed: Any, batch: Sequence[tuple[Any, Any]]) -> tuple[np.ndarray, list[Any]]:
    """For an embedding without a whole table (c_table None): (the float32 rows of every
    token of `batch`, the batch with its tokens replaced by their row numbers in those
    rows). The C passes read token ids for nothing but the row lookup."""
    ids = [np.atleast_1d(np.asarray(t, np.int64)) for _, t in batch]
    rows = np.ascontiguousarray(embed.rows(np.concatenate(ids)), dtype=F32)
    remapped, at = [], 0
    for (st, t), i in zip(batch, ids, strict=True):
        r = np.arange(at, at + len(i), dtype=np.int32)
        remapped.append((st, r if np.ndim(t) else int(r[0])))
        at += len(i)
    return rows, remapped
