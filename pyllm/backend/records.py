"""Which C record each stored tensor type becomes on the fast path, and the repacking.

One table, `RECORD_OF`: a GGUF type -> the record kind the C products run, and how it gets
there. Measured reasons are in docs/ARCHITECTURE.md ("GGUF types on the fast path"); the
rule behind them: a decode step streams every weight once, so a type is kept as compact as
it is stored whenever a kernel can read it, and otherwise goes to Q8X16 (8.5 bits a weight)
exactly when its values are int8 times one f16 scale per 32 columns, else requantized.

    Q4_1            Q4X16  as stored
    Q4_0            Q4X16  exact: w = (q - 8) d = q d + m with m = -8 d (f16, exact)
    Q4_K            Q4K16  as stored (kquant.h)
    Q6_K            Q6K16  as stored
    Q5_0            Q5X16  as stored (quant.h)
    Q8_0            Q8X16  as stored
    IQ4_NL          Q8X16  exact: the IQ4_NL levels are int8, the f16 d kept
    anything else   Q8X16  requantized from its float values per 32 columns (Q5_1, Q2_K,
                           Q3_K, Q5_K, IQ4_XS, F32/F16/BF16)

A fused matrix whose parts go to different records (Q4_K_M stores a DeltaNet layer's qkv
rows as Q6_K and its z/b/a rows as Q4_K) becomes PYLLM_PARTS: one sub-matrix per run of
parts of one kind (quant.h).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.backend.tensors import tensor_f32
from pyllm.kquants import KVALUES
from pyllm.loaders.gguf import GGML_TYPE_IDS
from pyllm.quants import BLOCK_BYTES, nibbles

F32 = np.float32
RECORD_OF = {"Q4_1": "PYLLM_Q4X16", "Q4_0": "PYLLM_Q4X16", "Q4_K": "PYLLM_Q4K16",
             "Q6_K": "PYLLM_Q6K16", "Q8_0": "PYLLM_Q8X16", "Q5_0": "PYLLM_Q5X16",
             "IQ4_NL": "PYLLM_Q8X16"}
KIND_ALIGN = {"PYLLM_Q4K16": 256, "PYLLM_Q6K16": 256}  # columns a record kind needs


def record_kind(t: Any, cols: int) -> str:
    """The record kind a tensor's rows go to (RECORD_OF, else requantized to Q8X16)."""
    kind = RECORD_OF.get(t.type, "PYLLM_Q8X16")
    return kind if cols % KIND_ALIGN.get(kind, 32) == 0 else "PYLLM_Q8X16"


def plan(parts: Sequence[Any], cols: int) -> list[tuple[str, list[Any]]] | None:
    """Runs of consecutive parts of one record kind: [(kind, parts)], or None when the rows
    cannot be split so (a run other than the last would not end on a 16-row group)."""
    runs: list[tuple[str, list[Any]]] = []
    for t in parts:
        kind = record_kind(t, cols)
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(t)
        else:
            runs.append((kind, [t]))
    for i, (_kind, ts) in enumerate(runs):
        last_run = i == len(runs) - 1
        for j, t in enumerate(ts):
            if t.shape[0] % 16 and not (last_run and j == len(ts) - 1):
                return None
    return runs


def _as_q8_0(t: Any) -> np.ndarray | None:
    """Q8_0 blocks holding exactly the values of a Q8_0 / Q5_0 / IQ4_NL tensor, else None."""
    raw = np.ascontiguousarray(t.raw).reshape(-1, BLOCK_BYTES.get(t.type, 1))
    if t.type == "Q8_0":
        return raw
    if t.type not in ("Q5_0", "IQ4_NL"):
        return None
    out = np.empty((raw.shape[0], 34), np.uint8)
    out[:, :2] = raw[:, :2]  # the f16 d, unchanged
    if t.type == "Q5_0":
        bits = np.unpackbits(np.ascontiguousarray(raw[:, 2:6]), axis=1, bitorder="little")
        q = (nibbles(raw[:, 6:22]) | (bits << 4)).astype(np.int8) - np.int8(16)
    else:
        q = KVALUES[nibbles(raw[:, 2:18])]
    out[:, 2:] = q.view(np.uint8)
    return out


def _as_q4_1(t: Any) -> np.ndarray:
    """Q4_1 blocks of a Q4_0 tensor: the same nibbles and d, m = -8 d."""
    raw = np.ascontiguousarray(t.raw).reshape(-1, BLOCK_BYTES[t.type])
    if t.type == "Q4_1":
        return raw
    out = np.empty((raw.shape[0], 20), np.uint8)
    out[:, :2] = raw[:, :2]
    d = np.ascontiguousarray(raw[:, :2]).view(np.float16)
    out[:, 2:4] = (d * np.float16(-8)).view(np.uint8)  # times a power of two: exact
    out[:, 4:] = raw[:, 2:]
    return out


def _pad_rows(blocks: np.ndarray, rows: int, padded: int) -> np.ndarray:
    """Blocks of `rows` rows followed by zero rows up to `padded` (zero blocks are zeros)."""
    if padded == rows:
        return np.ascontiguousarray(blocks)
    per_row = blocks.size // rows
    out = np.zeros(padded * per_row, np.uint8)
    out[:blocks.size] = blocks.reshape(-1)
    return out


def repack_run(lib: Any, ffi: Any, kind: str, ts: Sequence[Any], cols: int,
               dst: np.ndarray) -> None:
    """Repack the parts `ts` (one run of `plan`) into records of `kind` at dst, part after
    part; the last part's rows are padded to a 16-row group."""
    at = 0
    for t in ts:
        rows = t.shape[0]
        padded = rows + (-rows % 16)
        nb = int(lib.pyllm_qmat_bytes(getattr(lib, kind), padded, cols))
        out = ffi.cast("uint8_t *", dst[at:].ctypes.data)
        q8 = _as_q8_0(t) if kind == "PYLLM_Q8X16" else None
        if kind == "PYLLM_Q4X16":
            src = _pad_rows(_as_q4_1(t), rows, padded)
            rc = lib.pyllm_repack_q4_1(ffi.cast("uint8_t *", src.ctypes.data), padded, cols, out)
        elif kind in ("PYLLM_Q4K16", "PYLLM_Q6K16", "PYLLM_Q5X16"):
            src = _pad_rows(np.asarray(t.raw), rows, padded)
            fn = {"PYLLM_Q4K16": lib.pyllm_repack_q4_k, "PYLLM_Q6K16": lib.pyllm_repack_q6_k,
                  "PYLLM_Q5X16": lib.pyllm_repack_q5_0}[kind]
            rc = fn(ffi.cast("uint8_t *", src.ctypes.data), padded, cols, out)
        elif q8 is not None:
            src = _pad_rows(q8, rows, padded)
            rc = lib.pyllm_repack_q8_0(ffi.cast("uint8_t *", src.ctypes.data), padded, cols, out)
        elif t.type in BLOCK_BYTES:  # requantize its values per 32 columns, in C
            raw = np.ascontiguousarray(t.raw)
            rc = lib.pyllm_requant_q8x16(GGML_TYPE_IDS[t.type],
                                         ffi.cast("uint8_t *", raw.ctypes.data), rows, cols, out)
        else:  # float rows: quantize per 32 columns
            x = np.zeros((padded, cols), F32)
            x[:rows] = tensor_f32(t)
            rc = lib.pyllm_quantize_f32_q8x16(ffi.cast("float *", x.ctypes.data), padded, cols,
                                              out)
        assert rc == 0, (kind, t.type, t.shape)
        at += nb


def run_bytes(lib: Any, kind: str, ts: Sequence[Any], cols: int) -> int:
    """Bytes of the records of one run (each part padded to whole 16-row groups)."""
    k = getattr(lib, kind)
    return sum(int(lib.pyllm_qmat_bytes(k, t.shape[0] + (-t.shape[0] % 16), cols)) for t in ts)
