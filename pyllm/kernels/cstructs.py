"""The C structs of the int8 products as numpy-backed objects: `QMat` (a matrix of records),
`QAct` (int8-quantized activations), 64-byte aligned buffers and pointers. No logic here
beyond shapes and pointers."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyllm.kernels import require_c_kernels as _lib

QK = 32


def ptr(a: np.ndarray, ctype: str = "void *") -> Any:
    ffi, _ = _lib()
    return ffi.cast(ctype, a.ctypes.data)


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    """An uninitialised uint8 array whose data pointer is a multiple of `align`."""
    buf = np.empty(nbytes + align, dtype=np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + nbytes]


class QAct:
    """int8 activations for n rows x cols (the C struct pyllm_qact and its arrays)."""

    def __init__(self, n: int, cols: int) -> None:
        ffi, _ = _lib()
        nb = cols // QK
        self.q = np.empty((n, cols), np.int8)
        self.d = np.empty((n, nb), np.float32)
        self.ds = np.empty((n, nb), np.float32)
        self.s = np.empty((n, nb), np.int32)
        self.s16 = np.empty((n, 2 * nb), np.int16)  # group 256 only (quant.h)
        self.b16 = np.empty((n, nb), np.int16)
        self.c = ffi.new("struct pyllm_qact *")
        self.c.q, self.c.d = ptr(self.q, "int8_t *"), ptr(self.d, "float *")
        self.c.ds, self.c.s = ptr(self.ds, "float *"), ptr(self.s, "int32_t *")
        self.c.s16, self.c.b16 = ptr(self.s16, "int16_t *"), ptr(self.b16, "int16_t *")
        self.c.n, self.c.cols, self.c.group = n, cols, QK

    def quantize_for(self, w: Any, x: np.ndarray) -> None:
        """x (n, cols) f32 -> these activations, in the form the products of `w` (a struct
        pyllm_qmat pointer) need (pyllm_quantize_act_for: per 256 columns for K-quants)."""
        _, lib = _lib()
        x = np.ascontiguousarray(x, dtype=np.float32)
        lib.pyllm_quantize_act_for(w, ptr(x, "float *"), x.shape[0], self.c)


class QMat:
    """A repacked weight matrix (struct pyllm_qmat over an aligned byte buffer)."""

    def __init__(self, data: np.ndarray, rows: int, cols: int, type_: int) -> None:
        ffi, _ = _lib()
        assert data.ctypes.data % 64 == 0
        self.data, self.rows, self.cols, self.type = data, rows, cols, type_
        self.c = ffi.new("struct pyllm_qmat *")
        self.c.data = ptr(data, "uint8_t *")
        self.c.rows, self.c.cols, self.c.type = rows, cols, type_

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @classmethod
    def from_gguf(cls, type_: str, raw: np.ndarray, rows: int, cols: int,
                  out: np.ndarray | None = None) -> QMat:
        """Repack GGUF Q4_1 / Q8_0 blocks (or quantize f32 rows) into records."""
        _, lib = _lib()
        kind = lib.PYLLM_Q4X16 if type_ == "Q4_1" else lib.PYLLM_Q8X16
        n = lib.pyllm_qmat_bytes(kind, rows, cols)
        if n < 0:
            raise ValueError(f"matrix {rows}x{cols} does not fit 16-row/32-column records")
        if out is None:
            out = aligned_empty(n)
        src = np.ascontiguousarray(raw)
        if type_ == "Q4_1":
            rc = lib.pyllm_repack_q4_1(ptr(src, "uint8_t *"), rows, cols, ptr(out, "uint8_t *"))
        elif type_ == "Q8_0":
            rc = lib.pyllm_repack_q8_0(ptr(src, "uint8_t *"), rows, cols, ptr(out, "uint8_t *"))
        else:  # float32 (rows, cols)
            f = np.ascontiguousarray(src, dtype=np.float32)
            rc = lib.pyllm_quantize_f32_q8x16(ptr(f, "float *"), rows, cols,
                                              ptr(out, "uint8_t *"))
        assert rc == 0
        return cls(out, rows, cols, kind)

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """(n, cols) f32 -> (n, rows) f32 with int8-quantized activations."""
        _, lib = _lib()
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, self.cols)
        act = QAct(x.shape[0], self.cols)
        act.quantize_for(self.c, x)
        out = np.empty((x.shape[0], self.rows), np.float32)
        lib.pyllm_qmatmul(self.c, act.c, ptr(out, "float *"))
        return out


class QParts(QMat):
    """The rows of several record matrices one after the other (PYLLM_PARTS, quant.h): a
    fused projection whose parts are stored in different types. Each part but the last has
    whole 16-row groups."""

    def __init__(self, subs: list[QMat]) -> None:  # noqa: D107 (no QMat buffer of its own)
        ffi, lib = _lib()
        self.subs = subs
        self.arr = ffi.new("struct pyllm_qmat[]", len(subs))
        for i, s in enumerate(subs):
            self.arr[i] = s.c[0]
        self.rows, self.cols, self.type = sum(s.rows for s in subs), subs[0].cols, lib.PYLLM_PARTS
        self.c = ffi.new("struct pyllm_qmat *")
        self.c.rows, self.c.cols, self.c.type = self.rows, self.cols, self.type
        self.c.parts, self.c.nparts = self.arr, len(subs)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.subs)


def set_threads(n: int) -> None:
    _lib()[1].pyllm_set_threads(n)
