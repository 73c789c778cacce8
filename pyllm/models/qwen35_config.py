"""Qwen3.5's text-decoder hyperparameters, read from an HF config.json (pyllm/models/qwen35.py
is the model; qwen35_gguf.py reads the same values from a GGUF file's keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyllm.errors import FormatError, UnsupportedArchitectureError

LINEAR, FULL = "linear_attention", "full_attention"  # the two layer kinds (layer_types)


@dataclass(frozen=True)
class Qwen35Config:
    """The text decoder's hyperparameters (values in brackets: Qwen3.5-0.8B)."""

    vocab_size: int  # V, rows of the embedding and of the tied LM head [248320]
    hidden_size: int  # D, width of the residual stream [1024]
    intermediate_size: int  # F, SwiGLU hidden width [3584]
    layer_types: tuple[str, ...]  # "linear_attention" (GDN) or "full_attention" per layer [24]
    n_heads: int  # H, query heads of full attention [8]
    n_kv_heads: int  # KV, key/value heads of full attention (GQA) [2]
    head_dim: int  # hd, width of one full-attention head [256]
    rotary_dim: int  # leading dims of each head that RoPE rotates [64 = 0.25 * 256]
    rope_theta: float  # RoPE base [1e7]
    lin_k_heads: int  # Hk, DeltaNet query/key heads [16]
    lin_v_heads: int  # Hv, DeltaNet value heads (>= Hk, a multiple of it) [16]
    lin_k_dim: int  # dk, DeltaNet key head width [128]
    lin_v_dim: int  # dv, DeltaNet value head width [128]
    conv_kernel: int  # Kc, taps of the causal depthwise conv before the DeltaNet [4]
    rms_eps: float  # epsilon of every RMSNorm [1e-6]
    tie_embeddings: bool  # LM head = embedding (no lm_head.weight) [True]
    max_position: int  # trained context [262144]
    eos_ids: tuple[int, ...]  # ids that end generation [248046 <|im_end|>, 248044 <|endoftext|>]
    # DeltaNet value heads in GGUF's tiled order (value head h reads q/k head h % Hk) rather
    # than HF's grouped order (h // (Hv / Hk)); the same for 0.8B, where Hv == Hk
    v_tiled: bool = False

    @property
    def n_layers(self) -> int:
        return len(self.layer_types)

    @property
    def key_dim(self) -> int:  # Hk * dk [2048]
        return self.lin_k_heads * self.lin_k_dim

    @property
    def value_dim(self) -> int:  # Hv * dv [2048]
        return self.lin_v_heads * self.lin_v_dim

    @property
    def conv_dim(self) -> int:  # channels through the conv: q, k and v [6144]
        return 2 * self.key_dim + self.value_dim

    @classmethod
    def from_hf(cls, conf: dict[str, Any], where: str = "config.json") -> Qwen35Config:
        """From an HF config.json: text-only (`qwen3_5_text`) or multimodal (`qwen3_5`, whose
        decoder settings sit under `text_config`)."""
        top = conf
        if conf.get("model_type") == "qwen3_5" or "text_config" in conf:
            conf = conf.get("text_config") or {}
        try:
            n_layers = int(conf["num_hidden_layers"])
            interval = int(conf.get("full_attention_interval", 4))
            types = conf.get("layer_types") or [
                FULL if (i + 1) % interval == 0 else LINEAR for i in range(n_layers)]
            rope = conf.get("rope_parameters") or {}
            theta = float(rope.get("rope_theta", conf.get("rope_theta", 1e7)))
            factor = float(rope.get("partial_rotary_factor",
                                    conf.get("partial_rotary_factor", 0.25)))
            head_dim = int(conf.get("head_dim")
                           or conf["hidden_size"] // conf["num_attention_heads"])
            eos = conf.get("eos_token_id", top.get("eos_token_id"))
            eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
            if conf.get("vocab_size", 0) >= 248044 and 248046 not in eos_ids:
                eos_ids = (248046, *eos_ids)  # the Qwen3.5 vocabulary: stop on <|im_end|> too
            tie = conf.get("tie_word_embeddings", top.get("tie_word_embeddings", False))
            cfg = cls(
                vocab_size=int(conf["vocab_size"]), hidden_size=int(conf["hidden_size"]),
                intermediate_size=int(conf["intermediate_size"]), layer_types=tuple(types),
                n_heads=int(conf["num_attention_heads"]),
                n_kv_heads=int(conf["num_key_value_heads"]), head_dim=head_dim,
                rotary_dim=int(head_dim * factor), rope_theta=theta,
                lin_k_heads=int(conf["linear_num_key_heads"]),
                lin_v_heads=int(conf["linear_num_value_heads"]),
                lin_k_dim=int(conf["linear_key_head_dim"]),
                lin_v_dim=int(conf["linear_value_head_dim"]),
                conv_kernel=int(conf.get("linear_conv_kernel_dim", 4)),
                rms_eps=float(conf.get("rms_norm_eps", 1e-6)), tie_embeddings=bool(tie),
                max_position=int(conf.get("max_position_embeddings", 262144)), eos_ids=eos_ids)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{where}: incomplete Qwen3.5 config ({exc!r} missing or bad)") \
                from None
        bad = [t for t in cfg.layer_types if t not in (LINEAR, FULL)]
        if bad or len(cfg.layer_types) != n_layers:
            raise FormatError(f"{where}: layer_types must list {n_layers} entries of "
                              f"'{LINEAR}'/'{FULL}'")
        if cfg.lin_v_heads % cfg.lin_k_heads or cfg.n_heads % cfg.n_kv_heads:
            raise FormatError(f"{where}: head counts must divide (linear {cfg.lin_v_heads}/"
                              f"{cfg.lin_k_heads}, attention {cfg.n_heads}/{cfg.n_kv_heads})")
        if conf.get("attn_output_gate") is False or conf.get("attention_bias"):
            raise UnsupportedArchitectureError(f"{where}: only attn_output_gate=true and "
                                               "attention_bias=false are implemented")
        return cfg


def check_architecture(conf: dict[str, Any], where: str) -> None:
    mt = conf.get("model_type")
    if mt not in ("qwen3_5", "qwen3_5_text"):
        archs = ", ".join(conf.get("architectures") or []) or "?"
        raise UnsupportedArchitectureError(
            f"{where}: model_type '{mt}' ({archs}) is not Qwen3.5 (expected qwen3_5 or "
            "qwen3_5_text)")
