"""CFG.BIN of the OS course's model assets (course_lab.md section 3): the config, its
v1 / v2 / legacy forms, the runtime's config checks, and the error every course check raises.

CFG.BIN is "CFG1", then version 1 (48 bytes, SmolLM only) or 2 (84 bytes), little-endian;
without it the runtime uses SmolLM2-135M's values (`CourseConfig.legacy`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields

import numpy as np

from pyllm.errors import FormatError

F32 = np.float32
CFG_MAGIC = 0x31474643  # "CFG1"
CFG_V1_BYTES, CFG_V2_BYTES = 48, 84
KIND_SMOL, KIND_QWEN = 0, 1
KIND_NAMES = {KIND_SMOL: "SmolLM", KIND_QWEN: "Qwen3.5"}
FOLDERS = {KIND_SMOL: "SMOL", KIND_QWEN: "QWEN"}  # the folder each kind lives in (/AI/SMOL)
FLAG_ATTN_GATE, FLAG_QK_NORM = 0x1, 0x2


class CourseFormatError(FormatError):
    """A course asset the course's runtime would refuse; the message ends with its text."""

    def __init__(self, where: str, text: str) -> None:
        self.where, self.text = where, text
        super().__init__(f"{where}: {text}")


def kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, "unknown-model")


@dataclass(frozen=True)
class CourseConfig:
    """CFG.BIN (v1, v2, or the legacy defaults), with the derived sizes of course_lab.md 3."""

    model_kind: int
    flags: int
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int
    runtime_seq_len: int
    rms_eps: float
    rope_theta: float
    rope_rotary_dim: int
    linear_num_k_heads: int = 0
    linear_num_v_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    version: int = 2  # 0 = no CFG.BIN (legacy defaults)

    @classmethod
    def legacy(cls) -> CourseConfig:
        """The defaults the runtime uses without CFG.BIN (SmolLM2-135M)."""
        return cls(KIND_SMOL, 0, 576, 1536, 30, 9, 3, 64, 49152, 2048, 256,
                   float(F32(1e-5)), 100000.0, 64, version=0)

    @property
    def attn_gate(self) -> bool:
        return bool(self.flags & FLAG_ATTN_GATE)

    @property
    def qk_norm(self) -> bool:
        return bool(self.flags & FLAG_QK_NORM)

    @property
    def attn_out_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def q_rows(self) -> int:
        return self.attn_out_dim * (2 if self.attn_gate else 1)

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def key_dim(self) -> int:
        return self.linear_num_k_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_v_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def validate(self, where: str) -> None:
        """The runtime's config checks (validate_cfg), in its order."""
        core = (self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads,
                self.head_dim, self.vocab_size, self.seq_len, self.runtime_seq_len)
        if min(core) <= 0:
            raise CourseFormatError(where, "invalid model config")
        if self.head_dim % 2:
            raise CourseFormatError(where, "head_dim must be even for RoPE")
        if self.n_heads % self.n_kv_heads:
            raise CourseFormatError(where, "head/kv-head mismatch")
        if self.runtime_seq_len > self.seq_len:
            raise CourseFormatError(where, "runtime_seq_len exceeds seq_len")
        rd = self.rope_rotary_dim
        if rd <= 0 or rd > self.head_dim or rd % 2:
            raise CourseFormatError(where, "invalid rotary dimension")
        lin = (self.linear_num_k_heads, self.linear_num_v_heads, self.linear_key_head_dim,
               self.linear_value_head_dim, self.linear_conv_kernel)
        if min(lin) < 0:
            raise CourseFormatError(where, "invalid linear config")
        if any(lin):
            if min(lin) <= 0:
                raise CourseFormatError(where, "incomplete linear config")
            if self.linear_num_v_heads % self.linear_num_k_heads:
                raise CourseFormatError(where, "linear head mismatch")


_V1 = struct.Struct("<II8iff")  # magic, version, dim .. runtime_seq_len (as int32), eps, theta
_V2 = struct.Struct("<IIII9iffi5i")


def parse_cfg(raw: bytes | np.ndarray | None, where: str) -> CourseConfig:
    """CFG.BIN bytes (None when absent) -> a validated config (load_model_cfg's checks).
    Dimensions are read as int32 like the runtime does, so a huge u32 is 'invalid'."""
    if raw is None:
        cfg = CourseConfig.legacy()
        cfg.validate(where)
        return cfg
    raw = bytes(raw)
    if len(raw) < 8:
        raise CourseFormatError(where, f"bad CFG.BIN size ({len(raw)})")
    magic, version = struct.unpack_from("<II", raw)
    if magic != CFG_MAGIC:
        raise CourseFormatError(where, "unsupported CFG.BIN header")
    if version == 1:
        if len(raw) != CFG_V1_BYTES:
            raise CourseFormatError(where, f"bad CFG.BIN v1 size ({len(raw)})")
        _, _, dim, hidden, layers, heads, kv, vocab, seq, rt_seq, eps, theta = _V1.unpack(raw)
        hd = dim // heads if heads > 0 else 0
        cfg = CourseConfig(KIND_SMOL, 0, dim, hidden, layers, heads, kv, hd, vocab, seq,
                           rt_seq, eps, theta, hd, version=1)
    elif version == 2:
        if len(raw) != CFG_V2_BYTES:
            raise CourseFormatError(where, f"bad CFG.BIN v2 size ({len(raw)})")
        v = _V2.unpack(raw)
        cfg = CourseConfig(*v[2:], version=2)
    else:
        raise CourseFormatError(where, f"unsupported CFG.BIN version {version}")
    cfg.validate(where)
    return cfg


def pack_cfg(cfg: CourseConfig, version: int = 2) -> bytes:
    """The CFG.BIN bytes of `cfg` (version 1 only for plain SmolLM configs)."""
    if version == 1:
        if cfg.model_kind != KIND_SMOL or cfg.flags or cfg.head_dim * cfg.n_heads != cfg.dim \
                or cfg.rope_rotary_dim != cfg.head_dim or cfg.conv_dim:
            raise ValueError("CFG.BIN v1 only describes SmolLM configs (no flags, "
                             "head_dim = dim / n_heads, full rotary, no linear layers)")
        return _V1.pack(CFG_MAGIC, 1, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads,
                        cfg.n_kv_heads, cfg.vocab_size, cfg.seq_len, cfg.runtime_seq_len,
                        cfg.rms_eps, cfg.rope_theta)
    vals = [getattr(cfg, f.name) for f in fields(cfg) if f.name != "version"]
    return _V2.pack(CFG_MAGIC, 2, *vals)

