"""llama.cpp's K-quants and IQ4_XS: 256-weight super-blocks, their layouts and numpy
dequantizers (bit-exact with gguf-py's, like quants.py; tests/test_quants.py).

A super-block holds 256 weights in sub-blocks of 16 or 32, each with a small integer scale
(and a min for Q2_K/Q4_K/Q5_K) that multiplies the super-block's f16 scales d (and dmin):

  Q2_K   84 B: u8 sc[16] (scale | min << 4), u8 qs[64] (2-bit), f16 d, f16 dmin
                 w = d * sc * q - dmin * min                         16 sub-blocks of 16
  Q3_K  110 B: u8 hmask[32], u8 qs[64] (2 low bits), u8 scales[12] (16 x 6-bit), f16 d
                 w = d * (sc - 32) * (q - 4 * !hbit)                  16 sub-blocks of 16
  Q4_K  144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale + 8 x 6-bit min), u8 qs[128]
                 w = d * sc * q - dmin * min                          8 sub-blocks of 32
  Q5_K  176 B: as Q4_K, then u8 qh[32] (fifth bits) before qs[128]
  Q6_K  210 B: u8 ql[128] (4 low bits), u8 qh[64] (2 high bits), i8 sc[16], f16 d
                 w = d * sc * (q - 32)                                16 sub-blocks of 16
  IQ4_XS 136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
                 w = d * (ls - 32) * KVALUES[q]                       8 sub-blocks of 32

Where the bits of weight p (0..255) sit:
  Q2_K/Q3_K 2-bit q: qs[32 * (p // 128) + p % 32] >> (2 * (p // 32 % 4)), & 3
  Q3_K high bit, Q5_K fifth bit: bit (p // 32) of hmask/qh[p % 32]
  Q4_K/Q5_K nibble: qs[32 * (p // 64) + p % 32], low nibble if p % 64 < 32 else high
  Q6_K low 4 bits: ql[64 * (p // 128) + p % 64], low nibble if p % 128 < 64 else high;
       high 2 bits: qh[32 * (p // 128) + p % 32] >> (2 * (p // 32 % 4)), & 3
  IQ4_XS nibble: qs[16 * (p // 32) + p % 16], low nibble if p % 32 < 16 else high
"""

from __future__ import annotations

import numpy as np

# IQ4_NL's and IQ4_XS's non-uniform 4-bit grid (ggml's kvalues_iq4nl)
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                   np.int8)

F32 = np.float32
QK_K = 256


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(b[:, at:at + 2]).view(np.float16).astype(F32)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """(n, 64) bytes of 2-bit values -> (n, 256) in weight order (see the module doc)."""
    n = qs.shape[0]
    q = qs.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    return (q & 3).reshape(n, QK_K)


def _bitplanes(h: np.ndarray) -> np.ndarray:
    """(n, 32) bytes -> (n, 256): weight p is bit p // 32 of byte p % 32."""
    n = h.shape[0]
    bits = h.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    return (bits & 1).reshape(n, QK_K)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """(n, 128) bytes -> (n, 256): per 32 bytes, their low nibbles then their high nibbles."""
    n = qs.shape[0]
    q = qs.reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(n, QK_K)


def scale_min_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins. Bytes 0-3 hold scales
    0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for the mins;
    bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble)."""
    a, m, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([a & 0x3F, (hi & 0x0F) | ((a >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (hi >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def scales_k3(s: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> 16 signed scales (6 bits, minus 32). Low 4 bits: bytes 0-7, low
    nibbles for scales 0-7, high nibbles for 8-15; high 2 bits of scale k: bits 2 * (k // 4)
    of byte 8 + k % 4."""
    n = s.shape[0]
    lo = np.concatenate([s[:, :8] & 0x0F, s[:, :8] >> 4], axis=1)
    hi = (s[:, 8:12].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 4, 1))
    hi = (hi & 3).reshape(n, 16)
    return ((lo | (hi << 4)).astype(np.int8) - np.int8(32)).astype(F32)


def _per(v: np.ndarray, sub: int) -> np.ndarray:
    """Per-sub-block factors (n, 256 // sub) spread over the sub-blocks' weights (n, k, 1)."""
    return v.reshape(v.shape[0], QK_K // sub, 1)


def dq_q2_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    sc = b[:, :16]
    dl = _per(_f16(b, 80) * (sc & 0x0F).astype(F32), 16)
    ml = _per(_f16(b, 82) * (sc >> 4).astype(F32), 16)
    q = _crumbs(b[:, 16:80]).reshape(n, 16, 16).astype(F32)
    return (dl * q - ml).reshape(n, QK_K)


def dq_q3_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    dl = _per(_f16(b, 108) * scales_k3(b[:, 96:108]), 16)
    hbit = _bitplanes(b[:, :32]) ^ 1  # a set bit means no offset
    q = (_crumbs(b[:, 32:96]).astype(np.int8) - (hbit << 2).astype(np.int8)).astype(F32)
    return (dl * q.reshape(n, 16, 16)).reshape(n, QK_K)


def dq_q4_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    sc, mn = scale_min_k4(b[:, 4:16])
    d = _per(_f16(b, 0) * sc.astype(F32), 32)
    dm = _per(_f16(b, 2) * mn.astype(F32), 32)
    q = _nibbles32(b[:, 16:144]).reshape(n, 8, 32).astype(F32)
    return (d * q - dm).reshape(n, QK_K)


def dq_q5_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    sc, mn = scale_min_k4(b[:, 4:16])
    d = _per(_f16(b, 0) * sc.astype(F32), 32)
    dm = _per(_f16(b, 2) * mn.astype(F32), 32)
    q = (_nibbles32(b[:, 48:176]) | (_bitplanes(b[:, 16:48]) << 4)).reshape(n, 8, 32)
    return (d * q.astype(F32) - dm).reshape(n, QK_K)


def q6_k_values(b: np.ndarray) -> np.ndarray:
    """Q6_K blocks (n, 210) -> their 6-bit values (n, 256) as uint8 0..63."""
    n = b.shape[0]
    ql = b[:, :128].reshape(n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 0x0F).reshape(n, QK_K)
    qh = b[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    return ql | ((qh & 3).reshape(n, QK_K) << 4)


def dq_q6_k(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d = _per(_f16(b, 208) * b[:, 192:208].view(np.int8).astype(F32), 16)
    q = (q6_k_values(b).astype(np.int8) - np.int8(32)).astype(F32)
    return (d * q.reshape(n, 16, 16)).reshape(n, QK_K)


def dq_iq4_xs(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    sh = np.ascontiguousarray(b[:, 2:4]).view(np.uint16)  # (n, 1)
    hi = ((sh >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)  # (n, 8)
    lo = np.stack([b[:, 4:8] & 0x0F, b[:, 4:8] >> 4], axis=2).reshape(n, 8)
    ls = ((lo | (hi << 4)).astype(np.int8) - np.int8(32)).astype(F32)
    dl = _per(_f16(b, 0) * ls, 32)
    qs = b[:, 8:136].reshape(n, 8, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # (n, 8, 32)
    return (dl * KVALUES[q].astype(F32)).reshape(n, QK_K)


# type -> (weights per block, bytes per block, dequantizer); merged into quants.BLOCKS
BLOCKS = {"Q2_K": (256, 84, dq_q2_k), "Q3_K": (256, 110, dq_q3_k), "Q4_K": (256, 144, dq_q4_k),
          "Q5_K": (256, 176, dq_q5_k), "Q6_K": (256, 210, dq_q6_k),
          "IQ4_XS": (256, 136, dq_iq4_xs)}
