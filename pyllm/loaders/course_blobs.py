"""The OS course's asset files other than CFG.BIN (course_lab.md section 3): the layer and
embedding blobs (qmat and vector items in file order), ROP.BIN's RoPE table and the base
it was computed with, the token lists PMT.BIN / EXP.BIN, INFO.TXT's `key=value` lines.

A qmat is `rows` f32 scales, then rows x cols int8 (row-major): w[r][c] = scale[r] * q[r][c].
Each reader checks what the course runtime checks, with its error text (`CourseFormatError`);
the packers are the writer half that pyllm/export.py uses.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from pyllm.loaders.course_config import F32, CourseConfig, CourseFormatError

LAYER_FULL, LAYER_LINEAR = 0, 1  # LTY.BIN's layer kinds
TOKEN_LIST_MAX = 255  # PMT.BIN / EXP.BIN entries (LLM_REQUEST_TOKEN_MAX)
ROPE_TOL = 1e-4  # ROP.BIN vs the table of its base theta: max |diff| of cos/sin

# (name, "vec" | "qmat", shape); a qmat's shape is (rows, cols)
Layout = list[tuple[str, str, tuple[int, ...]]]


def layer_layout(cfg: CourseConfig, kind: int) -> Layout:
    """The items of a layer blob, in file order (parse_full_layer_blob /
    parse_linear_layer_blob)."""
    D, F = cfg.dim, cfg.hidden_dim
    out: Layout = [("input_norm", "vec", (D,)), ("post_norm", "vec", (D,))]
    if kind == LAYER_FULL:
        if cfg.qk_norm:
            out += [("q_norm", "vec", (cfg.head_dim,)), ("k_norm", "vec", (cfg.head_dim,))]
        out += [("q_proj", "qmat", (cfg.q_rows, D)), ("k_proj", "qmat", (cfg.kv_dim, D)),
                ("v_proj", "qmat", (cfg.kv_dim, D)), ("o_proj", "qmat", (D, cfg.attn_out_dim))]
    else:
        Hv, C = cfg.linear_num_v_heads, cfg.conv_dim
        out += [("conv_weight", "vec", (C, cfg.linear_conv_kernel)), ("dt_bias", "vec", (Hv,)),
                ("a_log", "vec", (Hv,)), ("norm", "vec", (cfg.linear_value_head_dim,)),
                ("qkv_proj", "qmat", (C, D)), ("z_proj", "qmat", (cfg.value_dim, D)),
                ("a_proj", "qmat", (Hv, D)), ("b_proj", "qmat", (Hv, D)),
                ("out_proj", "qmat", (D, cfg.value_dim))]
    return out + [("gate_proj", "qmat", (F, D)), ("up_proj", "qmat", (F, D)),
                  ("down_proj", "qmat", (D, F))]


def item_bytes(kind: str, shape: tuple[int, ...]) -> int:
    n = int(np.prod(shape))
    return 4 * n if kind == "vec" else 4 * shape[0] + n


def blob_bytes(layout: Layout) -> int:
    return sum(item_bytes(k, s) for _, k, s in layout)


def parse_blob(buf: np.ndarray, layout: Layout) -> dict[str, Any]:
    """Views into `buf` (uint8): vec -> f32 array of its shape, qmat -> (scale, q)."""
    out: dict[str, Any] = {}
    off = 0
    for name, kind, shape in layout:
        n = int(np.prod(shape))
        if kind == "vec":
            out[name] = np.frombuffer(buf, F32, n, off).reshape(shape)
            off += 4 * n
        else:
            rows, cols = shape
            scale = np.frombuffer(buf, F32, rows, off)
            q = np.frombuffer(buf, np.int8, rows * cols, off + 4 * rows).reshape(rows, cols)
            out[name] = (scale, q)
            off += 4 * rows + rows * cols
    return out


def pack_blob(items: dict[str, Any], layout: Layout) -> list[bytes | np.ndarray]:
    """Pieces of a blob, in order (vec: float array; qmat: (scale, q)); shapes are checked."""
    out: list[bytes | np.ndarray] = []
    for name, kind, shape in layout:
        v = items[name]
        if kind == "vec":
            a = np.ascontiguousarray(v, dtype="<f4")
            if a.shape != shape:
                raise ValueError(f"{name}: shape {a.shape}, expected {shape}")
            out.append(a)
        else:
            scale, q = (np.ascontiguousarray(x) for x in v)
            if q.shape != shape or scale.shape != (shape[0],) or q.dtype != np.int8:
                raise ValueError(f"{name}: qmat {q.shape} {q.dtype}, expected {shape} int8")
            out += [scale.astype("<f4"), q]
    return out


def emb_layout(cfg: CourseConfig) -> Layout:
    return [("emb", "qmat", (cfg.vocab_size, cfg.dim))]


def layer_name(i: int) -> str:
    """L00.BIN ... L99.BIN, L100.BIN (make_layer_path)."""
    return f"L{i:02d}.BIN"


def u32_list(ids: list[int]) -> bytes:
    """PMT.BIN / EXP.BIN: u32 count, then the ids."""
    return struct.pack(f"<I{len(ids)}I", len(ids), *ids)


def rope_table(theta: float, rotary_dim: int, seq: int) -> np.ndarray:
    """ROP.BIN's table (seq, rotary_dim) f32: cos of pos * theta^(-2i/rotary_dim) for
    i < rotary_dim/2, then the sines (computed in float64)."""
    half = rotary_dim // 2
    inv = np.float64(theta) ** (-np.arange(half, dtype=np.float64) * 2 / rotary_dim)
    ang = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(F32)


def rope_theta(table: np.ndarray, cfg: CourseConfig, where: str) -> tuple[float, str]:
    """The base theta that ROP.BIN was computed with: CFG.BIN's if the table matches it,
    else the one its own angles give (the runtime never reads CFG's theta, so the table is
    the truth). Returns (theta, "CFG.BIN" | "ROP.BIN"); raises if the table is not a RoPE
    table of any base within ROPE_TOL."""
    seq, rd = table.shape
    half = rd // 2

    def dev(theta: float) -> float:
        return float(np.abs(rope_table(theta, rd, seq) - table).max()) if theta > 0 else np.inf

    if not np.all(np.isfinite(table)):
        raise CourseFormatError(where, "ROP.BIN holds non-finite values (damaged file)")
    d_cfg = dev(cfg.rope_theta)
    if d_cfg <= ROPE_TOL:
        return float(cfg.rope_theta), "CFG.BIN"
    theta = float("nan")
    if seq > 1 and half > 1:
        # the angle of frequency 1 at position 1, then refined at the last position
        # (angles wrap: unwrap with the first estimate)
        a1 = math.atan2(float(table[1, half + 1]), float(table[1, 1]))
        if a1 > 0:
            p = seq - 1
            ap = math.atan2(float(table[p, half + 1]), float(table[p, 1]))
            ap += 2 * math.pi * round((p * a1 - ap) / (2 * math.pi))
            theta = (ap / p) ** (-rd / 2)
    d_est = dev(theta) if math.isfinite(theta) else np.inf
    if d_est <= ROPE_TOL:
        return theta, "ROP.BIN"
    raise CourseFormatError(
        where, f"ROP.BIN is not a RoPE table cos|sin(pos * theta^(-2i/{rd})) of any base "
        f"theta (off by {min(d_cfg, d_est):.3g} from CFG.BIN's theta {cfg.rope_theta:g})")


def parse_u32_list(raw: np.ndarray, name: str, where: str, vocab: int) -> list[int]:
    """PMT.BIN / EXP.BIN -> ids (1 <= count <= 255, every id < vocab)."""
    b = bytes(raw)
    count = struct.unpack_from("<I", b)[0] if len(b) >= 4 else -1
    if count < 1 or count > TOKEN_LIST_MAX or len(b) != 4 + 4 * count:
        raise CourseFormatError(where, f"bad {name} ({len(b)} bytes: expected a u32 count "
                                f"1..{TOKEN_LIST_MAX}, then count u32 token ids)")
    ids = list(struct.unpack_from(f"<{count}I", b, 4))
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise CourseFormatError(where, f"{name}: token {ids.index(bad[0])} out of range "
                                f"({bad[0]} >= vocab {vocab})")
    return ids


def parse_info(text: str) -> dict[str, str]:
    """`key=value` lines of INFO.TXT (other lines are ignored)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out

