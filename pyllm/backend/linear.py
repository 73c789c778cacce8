"""The matrix objects ("Linear"): `y = lin(x)`, x (T, K) float32 -> y (T, N) float32, with
`.shape` (N, K), `.nbytes` and `.format` (its name in traits.py). One class per way of
computing the product; which one a model gets is the Ops' choice (ops.py), never the
model's.

    DenseLinear       "f32"         exact float32 numpy (x @ W.T)
    RecordLinear      "q4x16" / "q5x16" / "q8x16" / "q4k16" / "q6k16" / "parts" / "qmat"
                                    C: 16-row records (pyllm/kernels/quant.h, kquant.h,
                                    rowq8.h; "parts": rows of several kinds) times
                                    int8 activations per 32 columns (per 256 for the
                                    K-quants); its `.qm` is the struct pyllm_qmat the
                                    C forward passes take
    BlockTwinLinear   "q4_1-numpy" / "q8_0-numpy"
                                    the numpy twin of the C product, on GGUF-style blocks
    QmatTwinLinear    "qmat-numpy"  the numpy twin of the course's int8 rows ("qmat")
    QmatF32Linear     "qmat-f32"    C: float32 activations on the course's row-major layout
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyllm.kernels import qmat as qm
from pyllm.kernels import require_c_kernels, twins
from pyllm.quants import Q8_0_BLOCK, QK

F32 = np.float32


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


class RecordLinear:
    """A matrix of 16-row records (Q4X16, Q8X16: quant.h; Q8R16: rowq8.h) over a 64-byte
    aligned buffer, times int8-quantized activations, run by pyllm_qmatmul. `rows` is the
    matrix's own row count; the records may hold more (zero padding to a whole 16-row
    group), which is cut off the result. The activation buffers of one token are kept
    (decode calls this ~100 times a token)."""

    FORMATS = {"PYLLM_Q4X16": "q4x16", "PYLLM_Q5X16": "q5x16", "PYLLM_Q8X16": "q8x16",
               "PYLLM_Q8R16": "qmat",
               "PYLLM_Q4K16": "q4k16", "PYLLM_Q6K16": "q6k16"}

    def __init__(self, data: np.ndarray, rows: int, cols: int, kind: str) -> None:
        from pyllm.kernels.cstructs import QMat

        self.ffi, self.lib = require_c_kernels()
        self.format = self.FORMATS[kind]
        self.rows, self.shape = rows, (rows, cols)
        self.qm = QMat(data, rows + (-rows % 16), cols, getattr(self.lib, kind))
        self._one: tuple[Any, np.ndarray, Any, Any] | None = None  # decode buffers

    @classmethod
    def of_parts(cls, parts: list[RecordLinear], rows: int) -> RecordLinear:
        """One matrix of the rows of `parts` (each of its own record kind; all but the last
        whole 16-row groups), run as PYLLM_PARTS: `rows` is the real row count."""
        from pyllm.kernels.cstructs import QParts

        self = cls.__new__(cls)
        self.ffi, self.lib = require_c_kernels()
        self.format = "parts"
        self.rows, self.shape = rows, (rows, parts[0].shape[1])
        self.parts = parts
        self.qm = QParts([p.qm for p in parts])
        self._one = None
        return self

    @classmethod
    def from_qmat(cls, scale: np.ndarray, q: np.ndarray) -> RecordLinear:
        """The course's int8 rows (scale, q) repacked into Q8R16 records (columns must be a
        multiple of 32; rows are padded to 16)."""
        from pyllm.kernels.cstructs import aligned_empty

        ffi, lib = require_c_kernels()
        rows, cols = q.shape
        if cols % QK:
            raise ValueError(f"qmat {rows}x{cols}: columns must be a multiple of {QK}")
        padded = rows + (-rows % 16)
        data = aligned_empty(qm.q8r16_bytes(padded, cols))
        s = np.require(scale, F32, ["C", "A"])
        qq = np.require(q, np.int8, ["C"])
        rc = lib.pyllm_repack_rowq8(ffi.cast("float *", s.ctypes.data),
                                    ffi.cast("int8_t *", qq.ctypes.data), rows, cols, padded,
                                    ffi.cast("uint8_t *", data.ctypes.data))
        assert rc == 0
        return cls(data, rows, cols, "PYLLM_Q8R16")

    @property
    def nbytes(self) -> int:
        return self.qm.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.shape[0] != 1:
            y = self.qm.matmul(x)
            return y if y.shape[1] == self.rows else y[:, :self.rows]
        if self._one is None:
            from pyllm.kernels.cstructs import QAct

            act = QAct(1, self.shape[1])
            out = np.empty((1, self.qm.rows), F32)
            self._one = (act, out, self.ffi.cast("float *", out.ctypes.data), act.c)
        act, out, out_p, act_c = self._one
        x = np.ascontiguousarray(x, dtype=F32)
        self.lib.pyllm_quantize_act_for(self.qm.c, self.ffi.cast("float *", x.ctypes.data), 1,
                                        act_c)
        self.lib.pyllm_qmatmul(self.qm.c, act_c, out_p)
        return out[:, :self.rows].copy()


def quantize_q8_0(w: np.ndarray) -> np.ndarray:
    """float (rows, cols) -> Q8_0 blocks (bytes): per 32 columns an f16 scale max|w|/127
    and int8 weights rounded half to even (the quantizer of pyllm_quantize_f32_q8x16)."""
    rows, cols = w.shape
    xb = np.ascontiguousarray(w, dtype=F32).reshape(rows, cols // QK, QK)
    amax = np.abs(xb).max(axis=2)
    d16 = (amax / F32(127)).astype(np.float16)
    d = d16.astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    blocks = np.empty((rows, cols // QK), Q8_0_BLOCK)
    blocks["d"] = d16
    blocks["qs"] = np.clip(np.rint(xb * inv[:, :, None]), -127, 127).astype(np.int8)
    return blocks.reshape(-1).view(np.uint8)


class BlockTwinLinear:
    """The numpy twin of the C int8 product, on GGUF Q4_1 / Q8_0 blocks (pyllm.kernels.twins):
    the same int8 activations and exact integer block sums."""

    def __init__(self, type_: str, raw: np.ndarray, rows: int, cols: int) -> None:
        self.fn = twins.qmatmul_q4_1 if type_ == "Q4_1" else twins.qmatmul_q8_0
        self.format = f"{type_.lower()}-numpy"
        self.raw, self.shape = raw, (rows, cols)

    @classmethod
    def quantized(cls, w: np.ndarray) -> BlockTwinLinear:
        """float32 rows quantized to Q8_0 blocks first (the twin of the C path's quantizer)."""
        return cls("Q8_0", quantize_q8_0(w), *w.shape)

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.fn(self.raw, *self.shape, np.ascontiguousarray(x, dtype=F32))


class QmatRows:
    """The course's int8 rows kept as stored: scale (rows,) float32, q (rows, cols) int8."""

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        self.scale = np.ascontiguousarray(scale, dtype=F32)
        self.q = np.ascontiguousarray(q, dtype=np.int8)
        self.shape = q.shape

    @property
    def nbytes(self) -> int:
        return int(self.scale.nbytes + self.q.nbytes)


class QmatTwinLinear(QmatRows):
    """The numpy twin of RecordLinear.from_qmat: the same (scale, q), int8 activations."""

    format = "qmat-numpy"

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        if q.shape[1] % QK:
            raise ValueError(f"qmat {q.shape}: columns must be a multiple of {QK}")
        super().__init__(scale, q)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return qm.matmul_twin(self.scale, self.q, x)


class QmatF32Linear(QmatRows):
    """float32 activations on the course's row-major layout, in C (any shape)."""

    format = "qmat-f32"

    def __init__(self, scale: np.ndarray, q: np.ndarray) -> None:
        self.ffi, self.lib = require_c_kernels()
        super().__init__(scale, q)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=F32).reshape(-1, self.shape[1])
        out = np.empty((x.shape[0], self.shape[0]), F32)
        f = self.ffi
        self.lib.pyllm_rowq8_matmul_f32(f.cast("float *", self.scale.ctypes.data),
                                        f.cast("int8_t *", self.q.ctypes.data), *self.shape,
                                        f.cast("float *", x.ctypes.data), x.shape[0],
                                        f.cast("float *", out.ctypes.data))
        return out


Linear = DenseLinear | RecordLinear | BlockTwinLinear | QmatTwinLinear | QmatF32Linear
