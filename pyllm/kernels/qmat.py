"""The course's "qmat" weights: int8 rows with one float32 scale per row.

    weight[r][c] = scale[r] * q[r][c]        (course_lab.md section 3, "Quantization")

Here: the quantizer, the (C-backed) dequantizer, and the numpy twins of the Q8R16 repacking
(pyllm/kernels/rowq8.h) and product. The matrix objects over a (scale, q) pair are in
pyllm/backend/linear.py: `RecordLinear.from_qmat` ("qmat": Q8R16 records, int8 activations,
VNNI), `QmatTwinLinear` ("qmat-numpy"), `QmatF32Linear` ("qmat-f32": float32 activations on
the course's row-major layout -- the course's own arithmetic, kept as the measured
alternative).

The int8-activation error has a bound, checked by the tests: per 32-column block b the
activation is off by at most dx_b / 2, so |y - y_exact|[r] <= scale[r] * sum_b dx_b/2 *
sum_{c in b} |q[r][c]|.

`quantize_rows` is the exporter's quantizer (max |w| / 127 per row, round half to even).
"""

from __future__ import annotations

from collections.abc import Sequence

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
    from pyllm.kernels import c_kernels

    nat = c_kernels()
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
