"""Qwen3.5's weights: what each layer holds (in brackets: Qwen3.5-0.8B shapes), the tensors
a checkpoint must have, and their fusing into the matrices the forward pass runs
(pyllm/models/qwen35.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pyllm.errors import FormatError
from pyllm.models.qwen35_config import LINEAR, Qwen35Config

if TYPE_CHECKING:
    from pyllm.backend.linear import Linear
    from pyllm.backend.ops import Ops
    from pyllm.backend.tensors import Embedding
    from pyllm.loaders import Checkpoint


@dataclass
class DeltaNetWeights:
    """One Gated DeltaNet mixer (in brackets: 0.8B shapes)."""

    in_proj: Linear  # fused [in_proj_qkv | in_proj_z | in_proj_b | in_proj_a]  (C+Vd+2Hv, D)
    #                  [6144 + 2048 + 16 + 16 = 8224, 1024]
    conv: np.ndarray  # conv1d taps, (Kc, C) [4, 6144]; tap Kc-1 multiplies the current token
    A_log: np.ndarray  # (Hv,) log of the decay rate A
    dt_bias: np.ndarray  # (Hv,) added to `a` before softplus
    norm: np.ndarray  # (dv,) plain-weight gated RMSNorm over each value head [128]
    out_proj: Linear  # (D, Vd) [1024, 2048]


@dataclass
class AttentionWeights:
    """One gated full-attention mixer."""

    qkv: Linear  # fused [q_proj | k_proj | v_proj]  (2*H*hd + 2*KV*hd, D) [4096+512+512, 1024]
    #              q_proj rows are per head [query(hd) | gate(hd)], interleaved head by head
    q_norm: np.ndarray  # (hd,) (1+w) RMSNorm on each query head [256]
    k_norm: np.ndarray  # (hd,) (1+w) RMSNorm on each key head [256]
    o_proj: Linear  # (D, H*hd) [1024, 2048]


@dataclass
class LayerWeights:
    kind: str  # LINEAR or FULL
    input_norm: np.ndarray  # (D,) (1+w) RMSNorm before the mixer
    mixer: DeltaNetWeights | AttentionWeights
    post_norm: np.ndarray  # (D,) (1+w) RMSNorm before the MLP
    gate_up: Linear  # fused [gate_proj | up_proj]  (2F, D) [7168, 1024]
    down: Linear  # (D, F) [1024, 3584]


@dataclass
class Qwen35Weights:
    embed: Embedding  # token embedding, (V, D) [248320, 1024]; rows are looked up
    layers: list[LayerWeights]
    norm: np.ndarray  # (D,) final (1+w) RMSNorm
    head: Linear  # LM head (V, D): the embedding itself when tied


# tensor-name suffixes (after the model prefix) with their shapes; C = conv channels
def tensor_table(cfg: Qwen35Config) -> dict[str, tuple[int, ...]]:
    """Every tensor the text decoder needs, with its expected shape."""
    D, F = cfg.hidden_size, cfg.intermediate_size
    H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    Hv, C = cfg.lin_v_heads, cfg.conv_dim
    t: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, D),
                                     "norm.weight": (D,)}
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        t[p + "input_layernorm.weight"] = (D,)
        t[p + "post_attention_layernorm.weight"] = (D,)
        t[p + "mlp.gate_proj.weight"] = (F, D)
        t[p + "mlp.up_proj.weight"] = (F, D)
        t[p + "mlp.down_proj.weight"] = (D, F)
        if kind == LINEAR:
            a = p + "linear_attn."
            t[a + "in_proj_qkv.weight"] = (C, D)
            t[a + "in_proj_z.weight"] = (cfg.value_dim, D)
            t[a + "in_proj_b.weight"] = (Hv, D)
            t[a + "in_proj_a.weight"] = (Hv, D)
            t[a + "conv1d.weight"] = (C, 1, cfg.conv_kernel)
            t[a + "A_log"] = (Hv,)
            t[a + "dt_bias"] = (Hv,)
            t[a + "norm.weight"] = (cfg.lin_v_dim,)
            t[a + "out_proj.weight"] = (D, cfg.value_dim)
        else:
            a = p + "self_attn."
            t[a + "q_proj.weight"] = (2 * H * hd, D)
            t[a + "k_proj.weight"] = (KV * hd, D)
            t[a + "v_proj.weight"] = (KV * hd, D)
            t[a + "o_proj.weight"] = (D, H * hd)
            t[a + "q_norm.weight"] = (hd,)
            t[a + "k_norm.weight"] = (hd,)
    return t


def text_prefix(ckpt: Checkpoint) -> str:
    """'model.language_model.' for multimodal checkpoints, else 'model.'."""
    if any(n.startswith("model.language_model.") for n in ckpt.tensors):
        return "model.language_model."
    return "model."


def check_tensors(ckpt: Checkpoint, cfg: Qwen35Config,
                  types: tuple[str, ...] = ("F32", "F16", "BF16")) -> str:
    """Check that every needed tensor is present with the right shape and one of `types`
    (an HF folder's float types; a GGUF file's types, qwen35_gguf.py); returns the name
    prefix. model.visual.* and mtp.* are ignored."""
    prefix = text_prefix(ckpt)
    table = tensor_table(cfg)
    if not cfg.tie_embeddings:
        table["lm_head.weight"] = (cfg.vocab_size, cfg.hidden_size)
    for suffix, shape in table.items():
        name = suffix if suffix == "lm_head.weight" else prefix + suffix
        t = ckpt.tensors.get(name)
        if t is None:
            raise FormatError(f"{ckpt.path}: required tensor '{name}' is missing")
        if tuple(t.shape) != shape:
            raise FormatError(f"{ckpt.path}: tensor '{name}' has shape {list(t.shape)}, "
                              f"expected {list(shape)} for this config")
        if t.type not in types:
            raise FormatError(f"{ckpt.path}: tensor '{name}' is {t.type}, expected "
                              f"{', '.join(types)}")
    return prefix


def build_weights(ckpt: Checkpoint, cfg: Qwen35Config, prefix: str, ops: Ops) -> Qwen35Weights:
    """Turn checkpoint tensors into model weights, fusing matrices that read the same input
    (one matrix product instead of four) and handing each to `ops` for its format."""

    def raw(suffix: str) -> Any:
        return ckpt.tensors[prefix + suffix]

    def vec(suffix: str) -> np.ndarray:
        from pyllm.backend.tensors import tensor_f32

        return np.ascontiguousarray(tensor_f32(raw(suffix)))

    def fused(name: str, *suffixes: str) -> Linear:
        return ops.linear(name, [raw(s) for s in suffixes])

    layers = []
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        if kind == LINEAR:
            a = p + "linear_attn."
            mixer: DeltaNetWeights | AttentionWeights = DeltaNetWeights(
                in_proj=fused(a + "in_proj", a + "in_proj_qkv.weight", a + "in_proj_z.weight",
                              a + "in_proj_b.weight", a + "in_proj_a.weight"),
                conv=np.ascontiguousarray(vec(a + "conv1d.weight")[:, 0, :].T),
                A_log=vec(a + "A_log"), dt_bias=vec(a + "dt_bias"), norm=vec(a + "norm.weight"),
                out_proj=fused(a + "out_proj", a + "out_proj.weight"))
        else:
            a = p + "self_attn."
            mixer = AttentionWeights(
                qkv=fused(a + "qkv", a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                q_norm=vec(a + "q_norm.weight"), k_norm=vec(a + "k_norm.weight"),
                o_proj=fused(a + "o_proj", a + "o_proj.weight"))
        layers.append(LayerWeights(
            kind=kind, input_norm=vec(p + "input_layernorm.weight"), mixer=mixer,
            post_norm=vec(p + "post_attention_layernorm.weight"),
            gate_up=fused(p + "mlp.gate_up", p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
            down=fused(p + "mlp.down", p + "mlp.down_proj.weight")))
    embed = ops.embedding(raw("embed_tokens.weight"))
    head_src = raw("embed_tokens.weight") if cfg.tie_embeddings else ckpt.tensors["lm_head.weight"]
    head = ops.linear("lm_head", [head_src])
    return Qwen35Weights(embed=embed, layers=layers, norm=vec("norm.weight"), head=head)
