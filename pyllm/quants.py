"""Block layouts of the quantised types we read, and their numpy reference dequantizers.

Q4_1 block: 32 weights in 20 bytes = f16 d, f16 m, u8 qs[16]; weight j is (q_j * d + m) where
q_j is the low nibble of qs[j] for j < 16 and the high nibble of qs[j - 16] for j >= 16.
Q8_0 block: 32 weights in 34 bytes = f16 d, i8 qs[32]; weight j is qs[j] * d.
These functions are the reference the C kernels are tested against (bit-identical f32 results).
"""

from __future__ import annotations

import numpy as np

from pyllm.errors import UnsupportedTensorTypeError

QK = 32  # weights per block (Q4_1, Q8_0)
BLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}

Q4_1_BLOCK = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)])
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
assert Q4_1_BLOCK.itemsize == 20 and Q8_0_BLOCK.itemsize == 34


def dequant_q4_1(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 bytes -> float32 array of `shape`."""
    b = raw.view(Q4_1_BLOCK)
    d = b["d"].astype(np.float32)[:, None]
    m = b["m"].astype(np.float32)[:, None]
    qs = b["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)  # (blocks, 32)
    return (q * d + m).reshape(shape)


def dequant_q8_0(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 bytes -> float32 array of `shape`."""
    b = raw.view(Q8_0_BLOCK)
    return (b["qs"].astype(np.float32) * b["d"].astype(np.float32)[:, None]).reshape(shape)


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 (as uint16 bits) -> float32: the bf16 bits are the top half of the f32."""
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def dequantize(type_: str, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Any supported stored type -> float32 array of `shape` (a copy)."""
    if type_ == "Q4_1":
        return dequant_q4_1(raw, shape)
    if type_ == "Q8_0":
        return dequant_q8_0(raw, shape)
    if type_ == "F32":
        return raw.view(np.float32).reshape(shape).copy()
    if type_ == "F16":
        return raw.view(np.float16).astype(np.float32).reshape(shape)
    if type_ == "BF16":
        return bf16_to_f32(raw).reshape(shape)
    raise UnsupportedTensorTypeError(f"tensor type {type_} cannot be dequantized")
