"""The course's "qmat" weights: int8 rows with one float32 scale per row.

    weight[r][c] = scale[r] * q[r][c]        (course_lab.md section 3, "Quantization")

Three Linear objects over the same (scale, q) pair, with linear.py's interface
(`y = lin(x)`, x (T, K) float32 -> y (T, N); `.shape`, `.nbytes`, `.format`):

    QmatLinear      "qmat"        C: repacked into Q8R16 records (pyllm/kernels/rowq8.h), int8
                                  activations per 32-column block, VNNI dot products. Its
                                  `.qm` is a `struct pyllm_qmat`, so the Llama and Qwen3.5 C
                                  forward passes take it like their own matrices.
    QmatTwinLinear  "qmat-numpy"  the numpy twin of QmatLinear (same arithmetic).
    QmatF32Linear   "qmat-f32"    C: float32 activations on the course's row-major layout --
                                  the course's own arithmetic, kept as the measured alternative.

The int8-activation error has a bound, checked by the tests: per 32-column block b the
activation is off by at most dx_b / 2, so |y - y_exact|[r] <= scale[r] * sum_b dx_b/2 *
sum_{c in b} |q[r][c]|.

`quantize_rows` is the exporter's quantizer (max |w| / 127 per row, round half to even).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

F32 = np.float32
QK = 32  # activation block (quant.h)
GROUP_HEAD = 64  # bytes of the 16 row scales that open each Q8R16 row group
RECORD = 512  # bytes of one 16-row x 32-column record


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float (rows, cols) -> (scale float32 (rows,), q int8 (rows, cols)): scale = max|row| /
    127, q = round-half-even(w / scale) clipped to +-127; an all-zero row gets scale 0."""
    w = np.asarray(w, dtype=F32)
    amax = np.abs(w).max(axis=1) if w.shape[1] else np.zeros(w.shape[0], F32)
    scale = (amax / F32(127)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(scale > 0, F32(1) / scale, F32(0)).astype(F32)
    q = np.clip(np.rint(w * inv[:, None]), -127, 127).astype(np.int8)
    return scale, q


def dequantize(scale: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(scale, q) -> float32 (rows, cols) = scale[:, None] * q."""
    return np.asarray(q, dtype=F32) * np.asarray(scale, dtype=F32)[:, None]


def dequantize_table(scale: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Like `dequantize`, for a big matrix (the numpy-f32 backend's LM head): in C on the
    thread pool when the kernels are built."""
    from pyllm.kernels import native

    nat = native()
    rows, cols = q.shape
    if nat is None:
        return dequantize(scale, q)
    ffi, lib = nat
    s = np.require(scale, F32, ["C", "A"])
    qq = np.require(q, np.int8, ["C"])
    out = np.empty((rows, cols), F32)
    lib.pyllm_rowq8_dequantize(ffi.cast("float *", s.ctypes.data),
                               ffi.cast("int8_t *", qq.ctypes.data), rows, cols,
                               ffi.cast("float *", out.ctypes.data))
    return out


def concat(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Stack the rows of several (scale, q) matrices with the same columns (fused products)."""
    if len(parts) == 1:
        return parts[0]
    return (np.concatenate([np.asarray(s, F32) for s, _ in parts]),
            np.concatenate([np.asarray(q, np.int8) for _, q in parts], axis=0))


def q8r16_bytes(rows: int, cols: int) -> int:
    """Bytes of a Q8R16 matrix (rows a multiple of 16, cols of 32)."""
    return rows // 16 * (GROUP_HEAD + cols // QK * RECORD)


# ---------------------------------------------------------------- numpy twins

def repack_twin(scale: np.ndarray, q: np.ndarray, rows_out: int) -> np.ndarray:
    """The numpy twin of pyllm_repack_rowq8: Q8R16 bytes with rows_out rows (zero padding)."""
    rows, cols = q.shape
    nb, G = cols // QK, rows_out // 16
    sp = np.zeros(rows_out, F32)
    sp[:rows] = scale
    qp = np.zeros((rows_out, cols), np.int16)
    qp[:rows] = q
    u8 = (qp + 128).astype(np.uint8).reshape(G, 16, nb, 8, 4)  # (g, r, b, chunk, t)
    recs = u8.transpose(0, 2, 3, 1, 4).reshape(G, nb * RECORD)  # (g, b, chunk, r, t)
    head = sp.reshape(G, 16).view(np.uint8)  # 64 bytes per group
    return np.concatenate([head, recs], axis=1).reshape(-1)


def matmul_twin(scale: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The numpy twin of the Q8R16 product: x (n, cols) quantized to int8 blocks like
    pyllm_quantize_act, exact integer block sums, block scales, then the row scales."""
    from pyllm.kernels.twins import quantize_act

    rows, cols = q.shape
    nb = cols // QK
    xq, dx, _ = quantize_act(np.ascontiguousarray(x, dtype=F32))
    qb = np.asarray(q, F32).reshape(rows, nb, QK)
    xb = xq.reshape(-1, nb, QK).astype(F32)
    isum = np.einsum("rbk,nbk->nrb", qb, xb)  # exact: |sum| < 2^24
    acc = (isum * dx[:, None, :]).sum(axis=2, dtype=F32)  # (n, rows)
    return acc * np.asarray(scale, F32)[None, :]


def error_bound(scale: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bound on |int8-activation product - exact product| (n, rows) from the activation
    rounding alone (see the module docstring)."""
    from pyllm.kernels.twins import quantize_act

    rows, cols = q.shape
    nb = cols // QK
    _, dx, _ = quantize_act(np.ascontiguousarray(x, dtype=F32))
    qabs = np.abs(np.asarray(q, F32)).reshape(rows, nb, QK).sum(axis=2)  # (rows, nb)
    return (dx / 2) @ qabs.T * np.abs(np.asarray(scale, F32))[None, :]


# ---------------------------------------------------------------- Linear objects

def _native() -> tuple[Any, Any]:
    from pyllm.kernels import native

    nat = native()
    if nat is None:
        from pyllm.errors import PyllmError
        from pyllm.kernels import NATIVE_ERROR

        raise PyllmError(f"the qmat C kernels are not available: {NATIVE_ERROR}")
    return nat


class QmatLinear:
    """Q8R16 records + int8 activations in C (see the module docstring). Rows are padded to
    a multiple of 16 (cut off the result); columns must be a multiple of 32."""

    format = "qmat"

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        from pyllm.kernels.ops import QMat, aligned_empty

        self.ffi, self.lib = _native()
        rows, cols = q.shape
        if cols % QK:
            raise ValueError(f"qmat {rows}x{cols}: columns must be a multiple of {QK}")
        padded = rows + (-rows % 16)
        data = aligned_empty(q8r16_bytes(padded, cols))
        s = np.ascontiguousarray(scale, dtype=F32)
        qq = np.ascontiguousarray(q, dtype=np.int8)
        rc = self.lib.pyllm_repack_rowq8(self.ffi.cast("float *", s.ctypes.data),
                                         self.ffi.cast("int8_t *", qq.ctypes.data), rows, cols,
                                         padded, self.ffi.cast("uint8_t *", data.ctypes.data))
        assert rc == 0
        self.rows, self.shape = rows, (rows, cols)
        self.qm = QMat(data, padded, cols, self.lib.PYLLM_Q8R16)
        self._one: tuple[Any, np.ndarray, Any, Any] | None = None  # decode buffers

    @property
    def nbytes(self) -> int:
        return int(self.qm.data.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.shape[0] != 1:
            y = self.qm.matmul(x)
            return y if y.shape[1] == self.rows else y[:, :self.rows]
        if self._one is None:  # one token: keep the buffers (decode calls this a lot)
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


class QmatTwinLinear:
    """The numpy twin of QmatLinear: the same (scale, q), int8 activations."""

    format = "qmat-numpy"

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        if q.shape[1] % QK:
            raise ValueError(f"qmat {q.shape}: columns must be a multiple of {QK}")
        self.scale = np.ascontiguousarray(scale, dtype=F32)
        self.q = np.ascontiguousarray(q, dtype=np.int8)
        self.shape = q.shape

    @property
    def nbytes(self) -> int:
        return int(self.scale.nbytes + self.q.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return matmul_twin(self.scale, self.q, x)


class QmatF32Linear:
    """float32 activations on the course's row-major layout, in C (any shape)."""

    format = "qmat-f32"

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        self.ffi, self.lib = _native()
        self.scale = np.ascontiguousarray(scale, dtype=F32)
        self.q = np.ascontiguousarray(q, dtype=np.int8)
        self.shape = q.shape

    @property
    def nbytes(self) -> int:
        return int(self.scale.nbytes + self.q.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=F32).reshape(-1, self.shape[1])
        out = np.empty((x.shape[0], self.shape[0]), F32)
        f = self.ffi
        self.lib.pyllm_rowq8_matmul_f32(f.cast("float *", self.scale.ctypes.data),
                                        f.cast("int8_t *", self.q.ctypes.data), *self.shape,
                                        f.cast("float *", x.ctypes.data), x.shape[0],
                                        f.cast("float *", out.ctypes.data))
        return out
