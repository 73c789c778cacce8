"""numpy twins of the C kernels: the same arithmetic, written plainly.

They are the reference the C code is tested against (tests/test_pyllm_kernels.py, tolerances named
there) and the fallback when the extension is not built. Each twin takes the GGUF blocks or plain
arrays, not the repacked records, so it also checks the repacking.
"""

from __future__ import annotations

import numpy as np

from pyllm.kquants import QK_K, q6_k_values, scale_min_k4
from pyllm.quants import Q4_1_BLOCK, Q8_0_BLOCK, QK, nibbles


def quantize_act(x: np.ndarray, group: int = QK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (n, cols) f32 -> (xq int8 (n, cols), dx (n, nb) f32, sum(xq) (n, nb) int32) with one
    scale per `group` columns (32, or 256 for the K-quant products), dx given per 32-column
    block all the same (quant.h)."""
    n, cols = x.shape
    xb = x.reshape(n, cols // group, group).astype(np.float32)
    amax = np.abs(xb).max(axis=2)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * inv[:, :, None]).astype(np.int8).reshape(n, cols)
    return q, np.repeat(d, group // QK, axis=1), sums(q, QK)


def sums(q: np.ndarray, width: int) -> np.ndarray:
    """Sums of each `width` columns of int8 rows (n, cols) -> (n, cols // width) int32."""
    return q.astype(np.int32).reshape(q.shape[0], -1, width).sum(axis=2)


def qmatmul_q4_1(raw: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """GGUF Q4_1 weights (rows, cols) times int8-quantized x (n, cols) -> (n, rows) f32."""
    b = raw.view(Q4_1_BLOCK).reshape(rows, cols // QK)
    q = np.concatenate([b["qs"] & 0x0F, b["qs"] >> 4], axis=2).astype(np.float32)  # (r, nb, 32)
    xq, dx, sx = quantize_act(x)
    nb = cols // QK
    xqb = xq.reshape(-1, nb, QK).astype(np.float32)
    # exact integer dot products per block (|sum| < 2^24, so float32 is exact): (n, r, nb)
    isum = np.einsum("rbk,nbk->nrb", q, xqb)
    d, m = b["d"].astype(np.float32), b["m"].astype(np.float32)  # (r, nb)
    out = isum * (d[None] * dx[:, None, :]) + m[None] * (dx * sx.astype(np.float32))[:, None, :]
    return out.sum(axis=2, dtype=np.float32)


def qmatmul_q8_0(raw: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """GGUF Q8_0 weights (rows, cols) times int8-quantized x (n, cols) -> (n, rows) f32."""
    b = raw.view(Q8_0_BLOCK).reshape(rows, cols // QK)
    q = b["qs"].astype(np.float32)  # (r, nb, 32)
    xq, dx, _ = quantize_act(x)
    xqb = xq.reshape(-1, cols // QK, QK).astype(np.float32)
    isum = np.einsum("rbk,nbk->nrb", q, xqb)
    d = b["d"].astype(np.float32)
    return (isum * (d[None] * dx[:, None, :])).sum(axis=2, dtype=np.float32)


def qmatmul_q5_0(raw: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """GGUF Q5_0 weights (rows, cols) times int8-quantized x (n, cols) -> (n, rows) f32: the
    exact integer block sums of (q - 16) * xq times d * dx."""
    b = raw.view(np.uint8).reshape(rows * (cols // QK), 22)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(rows, cols // QK)
    fifth = np.unpackbits(np.ascontiguousarray(b[:, 2:6]), axis=1, bitorder="little")
    q = (nibbles(b[:, 6:22]) | (fifth << 4)).astype(np.float32) - np.float32(16)
    q = q.reshape(rows, cols // QK, QK)
    xq, dx, _ = quantize_act(x)
    xqb = xq.reshape(-1, cols // QK, QK).astype(np.float32)
    isum = np.einsum("rbk,nbk->nrb", q, xqb)
    return (isum * (d[None] * dx[:, None, :])).sum(axis=2, dtype=np.float32)


def repack_q4_1(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """GGUF Q4_1 -> Q4X16 records (see quant.h), as bytes."""
    nb = cols // QK
    b = raw.view(np.uint8).reshape(rows // 16, 16, nb, 20)
    qs = b[..., 4:].reshape(rows // 16, 16, nb, 4, 4)  # (g, r, b, chunk, 4)
    nib = qs.transpose(0, 2, 3, 1, 4).reshape(rows // 16, nb, 256)
    dm = b[..., :4].reshape(rows // 16, 16, nb, 2, 2).transpose(0, 2, 3, 1, 4)
    return np.concatenate([nib, dm.reshape(rows // 16, nb, 64)], axis=2).reshape(-1)


def repack_q8_0(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """GGUF Q8_0 -> Q8X16 row groups (see quant.h), as bytes: records in pairs (two blocks'
    int8 chunks, then their scales); an odd last block, then its scales and 32 zero bytes."""
    nb, g = cols // QK, rows // 16
    b = raw.view(np.uint8).reshape(g, 16, nb, 34)
    qs = (b[..., 2:] ^ 0x80).reshape(g, 16, nb, 8, 4).transpose(0, 2, 3, 1, 4).reshape(g, nb, 512)
    d = b[..., :2].transpose(0, 2, 1, 3).reshape(g, nb, 32)
    even = nb - nb % 2
    pairs = np.concatenate([qs[:, :even].reshape(g, even // 2, 1024),
                            d[:, :even].reshape(g, even // 2, 64)], axis=2).reshape(g, -1)
    tail = [qs[:, even:].reshape(g, -1), d[:, even:].reshape(g, -1),
            np.zeros((g, 32 * (nb % 2)), np.uint8)]
    return np.concatenate([pairs, *tail], axis=1).reshape(-1)


def qmatmul_q4_k(raw: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """GGUF Q4_K weights (rows, cols) times x (n, cols) quantized per 256 columns -> (n, rows):
    per super-block, the sub-blocks' exact integer sums times d*sc, minus dmin times the
    integer sum of mins times block sums, then dx (kquant.c's order)."""
    nsb = cols // QK_K
    b = raw.view(np.uint8).reshape(rows * nsb, 144)
    sc, mn = scale_min_k4(b[:, 4:16])  # (rows * nsb, 8)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(rows, nsb, 1)
    dmin = b[:, 2:4].copy().view(np.float16).astype(np.float32).reshape(rows, nsb)
    qs = b[:, 16:].reshape(rows * nsb, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    q = (qs & 15).astype(np.float32).reshape(rows, nsb, 8, 32)
    xq, dx, bs = quantize_act(x, QK_K)
    xs = xq.reshape(-1, nsb, 8, 32).astype(np.float32)
    isum = np.einsum("rsuk,nsuk->nrsu", q, xs)  # exact: |sum| < 2^24
    dsc = d * sc.reshape(rows, nsb, 8).astype(np.float32)  # (rows, nsb, 8)
    sacc = (isum * dsc[None]).sum(axis=3, dtype=np.float32)
    imin = np.einsum("rsu,nsu->nrs", mn.reshape(rows, nsb, 8).astype(np.int64),
                     bs.reshape(-1, nsb, 8).astype(np.int64)).astype(np.float32)
    sacc = sacc - imin * dmin[None]
    return (sacc * dx[:, None, ::8]).sum(axis=2, dtype=np.float32)


def qmatmul_q6_k(raw: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """GGUF Q6_K weights (rows, cols) times x (n, cols) quantized per 256 columns -> (n, rows):
    per 16-column sub-block the exact integer sum of (q - 32) * xq times d*sc, summed over the
    super-block, then dx."""
    nsb = cols // QK_K
    b = raw.view(np.uint8).reshape(rows * nsb, 210)
    q = (q6_k_values(b).astype(np.int32) - 32).astype(np.float32).reshape(rows, nsb, 16, 16)
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(rows, nsb, 16)
    d = b[:, 208:210].copy().view(np.float16).astype(np.float32).reshape(rows, nsb, 1)
    xq, dx, _ = quantize_act(x, QK_K)
    isum = np.einsum("rskc,nskc->nrsk", q, xq.reshape(-1, nsb, 16, 16).astype(np.float32))
    sacc = (isum * (d * sc)[None]).sum(axis=3, dtype=np.float32)
    return (sacc * dx[:, None, ::8]).sum(axis=2, dtype=np.float32)
