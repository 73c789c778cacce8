"""Block layouts of the GGUF quantised types we read, and their numpy reference dequantizers.

The 32-weight blocks (llama.cpp's "legacy" types and IQ4_NL) are here; the 256-weight
super-blocks of the K-quants and IQ4_XS are in kquants.py. Every dequantizer gives the same
float32 bits as gguf-py's `gguf.quants.dequantize` (tests/test_quants.py): each weight is
one product of exact factors (an f16 scale times small integers fits in float32's 24-bit
mantissa), rounded at most once by the offset added last, in the same order as there.

  Q4_0   18 B: f16 d, u8 qs[16]              w = (q - 8) * d
  Q4_1   20 B: f16 d, f16 m, u8 qs[16]       w = q * d + m
  Q5_0   22 B: f16 d, u32 qh, u8 qs[16]      w = (q - 16) * d, q = nibble | bit << 4
  Q5_1   24 B: f16 d, f16 m, u32 qh, qs[16]  w = q * d + m
  Q8_0   34 B: f16 d, i8 qs[32]              w = q * d
  IQ4_NL 18 B: f16 d, u8 qs[16]              w = KVALUES[q] * d (a non-uniform 4-bit grid)

In a 4-bit block, weight j < 16 is the low nibble of qs[j] and weight j >= 16 the high nibble
of qs[j - 16]; the fifth bit of weight j is bit j of qh.
These functions are the reference the C kernels are tested against.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pyllm import kquants
from pyllm.errors import UnsupportedTensorTypeError
from pyllm.kquants import KVALUES

F32 = np.float32
QK = 32  # weights per block (the 32-blocks, and the int8 activations' blocks)

Q4_1_BLOCK = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)])
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
assert Q4_1_BLOCK.itemsize == 20 and Q8_0_BLOCK.itemsize == 34

# IQ4_NL's 16 levels (llama.cpp's kvalues_iq4nl), also IQ4_XS's

def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """The f16 at byte `at` of each block (n, bytes) as float32, shaped (n, 1)."""
    return np.ascontiguousarray(b[:, at:at + 2]).view(np.float16).astype(F32)


def nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes -> (n, 32) 4-bit values: low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(b: np.ndarray, at: int) -> np.ndarray:
    """The 32 bits of the little-endian u32 at byte `at`, as (n, 32) values 0/1."""
    return np.unpackbits(np.ascontiguousarray(b[:, at:at + 4]), axis=1, bitorder="little")


def dq_q4_0(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * (nibbles(b[:, 2:18]).astype(np.int8) - np.int8(8)).astype(F32)


def dq_q4_1(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * nibbles(b[:, 4:20]).astype(F32) + _f16(b, 2)


def dq_q5_0(b: np.ndarray) -> np.ndarray:
    q = nibbles(b[:, 6:22]) | (_fifth_bits(b, 2) << 4)
    return _f16(b, 0) * (q.astype(np.int8) - np.int8(16)).astype(F32)


def dq_q5_1(b: np.ndarray) -> np.ndarray:
    q = nibbles(b[:, 8:24]) | (_fifth_bits(b, 4) << 4)
    return _f16(b, 0) * q.astype(F32) + _f16(b, 2)


def dq_q8_0(b: np.ndarray) -> np.ndarray:
    return b[:, 2:34].view(np.int8).astype(F32) * _f16(b, 0)


def dq_iq4_nl(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * KVALUES[nibbles(b[:, 2:18])].astype(F32)


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 (as uint16 bits) -> float32: the bf16 bits are the top half of the f32."""
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _block_table() -> dict[str, tuple[int, int, Callable[[np.ndarray], np.ndarray]]]:

    return {"Q4_0": (32, 18, dq_q4_0), "Q4_1": (32, 20, dq_q4_1), "Q5_0": (32, 22, dq_q5_0),
            "Q5_1": (32, 24, dq_q5_1), "Q8_0": (32, 34, dq_q8_0),
            "IQ4_NL": (32, 18, dq_iq4_nl), **kquants.BLOCKS}


# stored block type -> (weights per block, bytes per block, dequantizer of (n, bytes) blocks)
BLOCKS = _block_table()
BLOCK_BYTES = {t: nb for t, (_, nb, _) in BLOCKS.items()}
BLOCK_SIZE = {t: k for t, (k, _, _) in BLOCKS.items()}


def row_bytes(type_: str, cols: int) -> int:
    """Bytes of one stored row of `cols` weights of a block type."""
    return cols // BLOCK_SIZE[type_] * BLOCK_BYTES[type_]


def dequant_blocks(type_: str, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The bytes of whole blocks of a block type -> float32 array of `shape`."""
    k, nb, fn = BLOCKS[type_]
    b = np.ascontiguousarray(raw).reshape(-1, nb)
    return fn(b).reshape(shape)


def dequant_q4_1(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 bytes -> float32 array of `shape`."""
    return dequant_blocks("Q4_1", raw, shape)


def dequant_q8_0(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 bytes -> float32 array of `shape`."""
    return dequant_blocks("Q8_0", raw, shape)


def dequantize(type_: str, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Any supported stored type -> float32 array of `shape` (a copy)."""
    if type_ in BLOCKS:
        return dequant_blocks(type_, raw, shape)
    if type_ == "F32":
        return raw.view(np.float32).reshape(shape).copy()
    if type_ == "F16":
        return raw.view(np.float16).astype(np.float32).reshape(shape)
    if type_ == "BF16":
        return bf16_to_f32(raw).reshape(shape)
    raise UnsupportedTensorTypeError(f"tensor type {type_} cannot be dequantized")
