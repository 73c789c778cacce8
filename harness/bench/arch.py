"""The architecture table: the shapes of each benchmarked model, read from its own config.

`Shapes` puts SmolLM2 (llama: every layer softmax attention) and Qwen3.5 (qwen3_5: Gated
DeltaNet layers with a fixed recurrent state, plus a few gated full-attention layers) on one
footing, so the roofline (FLOPs and bytes per token) and the table are computed the same way
for both. Cache sizes are those of pyllm's float32 caches (pyllm/models/*.py `*State`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

F32_BYTES = 4  # the engine keeps KV caches and recurrent state in float32


@dataclass(frozen=True)
class Shapes:
    """Hyperparameters that decide compute and memory traffic (one decoder-only LM)."""

    arch: str  # "llama" | "qwen3_5"
    vocab: int  # V: embedding rows = LM head rows
    dim: int  # D: residual stream width
    ffn: int  # F: SwiGLU hidden width
    n_layers: int
    n_attn: int  # layers with softmax attention (a KV cache that grows per token)
    n_heads: int  # query heads of softmax attention
    n_kv_heads: int  # key/value heads (GQA)
    head_dim: int
    q_gate: bool = False  # q_proj also produces a sigmoid output gate (Qwen3.5: 2x rows)
    n_lin: int = 0  # Gated DeltaNet layers (fixed-size recurrent state)
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 0

    @property
    def attn_width(self) -> int:  # H * hd: width of the attention output
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:  # KV * hd
        return self.n_kv_heads * self.head_dim

    @property
    def conv_dim(self) -> int:  # DeltaNet q, k, v channels through the causal conv
        return 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes added per context token (K and V of every attention layer)."""
        return self.n_attn * 2 * self.kv_dim * F32_BYTES

    @property
    def state_bytes(self) -> int:
        """Recurrent state per sequence, independent of length (DeltaNet S + conv rows)."""
        per = (self.lin_v_heads * self.lin_k_dim * self.lin_v_dim
               + (self.conv_kernel - 1) * self.conv_dim)
        return self.n_lin * per * F32_BYTES

    @property
    def layer_mix(self) -> str:
        if self.n_lin:
            return f"{self.n_lin} Gated DeltaNet + {self.n_attn} gated attention"
        return f"{self.n_attn} attention (GQA)"


def shapes_of(model: Any) -> Shapes:
    """Shapes of a loaded pyllm model (its `cfg`), by architecture."""
    arch, cfg = model.info.arch, model.cfg
    if arch == "llama":
        return Shapes(arch=arch, vocab=cfg.vocab_size, dim=cfg.dim, ffn=cfg.hidden,
                      n_layers=cfg.n_layers, n_attn=cfg.n_layers, n_heads=cfg.n_heads,
                      n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim)
    if arch == "qwen3_5":
        n_lin = sum(1 for t in cfg.layer_types if t == "linear_attention")
        return Shapes(arch=arch, vocab=cfg.vocab_size, dim=cfg.hidden_size,
                      ffn=cfg.intermediate_size, n_layers=cfg.n_layers,
                      n_attn=cfg.n_layers - n_lin, n_heads=cfg.n_heads,
                      n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, q_gate=True,
                      n_lin=n_lin, lin_k_heads=cfg.lin_k_heads, lin_v_heads=cfg.lin_v_heads,
                      lin_k_dim=cfg.lin_k_dim, lin_v_dim=cfg.lin_v_dim,
                      conv_kernel=cfg.conv_kernel)
    raise ValueError(f"no shapes for architecture '{arch}'")


@dataclass
class ArchRow:
    """One line of the architecture table."""

    model: str  # label, "(synthetic weights)" included
    arch: str
    params: int
    layers: int
    layer_mix: str
    hidden: int
    ffn: int
    heads: str  # "9 q / 3 kv x 64"
    vocab: int
    kv_bytes_per_token: int
    state_bytes: int
    weight_format: str
    weight_bytes: int  # read per decode step, as the engine stores them
    file_bytes: int  # on disk (checkpoint)
    synthetic: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def arch_row(model: Any, file_bytes: int) -> ArchRow:
    s, info = shapes_of(model), model.info
    return ArchRow(model=info.label, arch=info.arch, params=info.n_params, layers=s.n_layers,
                   layer_mix=s.layer_mix, hidden=s.dim, ffn=s.ffn,
                   heads=f"{s.n_heads} q / {s.n_kv_heads} kv x {s.head_dim}"
                   + (f"; DeltaNet {s.lin_v_heads} x {s.lin_k_dim}" if s.n_lin else ""),
                   vocab=s.vocab, kv_bytes_per_token=s.kv_bytes_per_token,
                   state_bytes=s.state_bytes, weight_format=info.weight_format,
                   weight_bytes=info.weight_bytes, file_bytes=file_bytes,
                   synthetic=info.synthetic)
