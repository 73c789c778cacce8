"""Llama architecture (SmolLM2-135M): config, weights, KV cache, forward pass.

Read top to bottom: `LlamaConfig` (from GGUF metadata), `LlamaState` (the KV cache), the weights
(fused matrices made by the backend's Ops, pyllm/backend/: the model never looks at their format),
then `forward_numpy` - the whole model in readable numpy, one comment per stage - and `LlamaModel`,
which runs either that or the same stages in C (llama_c.py -> pyllm/kernels/llama.c) for many rows
at once.

Backends (`backend=`):
  "c"          fast path: weights repacked from the GGUF blocks (Q4_1 -> Q4X16, Q8_0 head -> Q8X16),
               activations quantized to int8 per 32-block (like llama.cpp), f32 KV cache.
  "numpy-q8"   the numpy twin of the fast path (same arithmetic; used when the C build is missing).
  "numpy-f32"  the exact path: every weight dequantized to f32, f32 activations (the reference).
  "auto"       "c" when the extension is built, else "numpy-q8".

RoPE: GGUF stores the Q/K rows of each head permuted for the interleaved convention, so here
adjacent pairs (x[2i], x[2i+1]) are rotated by pos * theta^(-2i/head_dim) (smollm2.md, "the RoPE
trap").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyllm import naming
from pyllm.backend import hugepages
from pyllm.backend.ops import Ops, make_ops
from pyllm.backend.tensors import tensor_f32
from pyllm.backend.threads import blas_threads, default_threads, set_blas_threads
from pyllm.errors import FormatError, UnsupportedArchitectureError
from pyllm.loaders import Checkpoint
from pyllm.loaders.gguf import file_type_name, open_gguf, tensor_array
from pyllm.models.base import Model, ModelInfo, ModelState, out_counts
from pyllm.models.llama_c import LlamaC
from pyllm.tokenizers.base import Tokenizer

Trace = Any  # callable(name: str, layer: int, x: np.ndarray) or None


@dataclass
class LlamaConfig:
    dim: int  # model width (576)
    hidden: int  # SwiGLU width (1536)
    n_layers: int  # transformer blocks (30)
    n_heads: int  # query heads (9)
    n_kv_heads: int  # key/value heads (3): grouped-query attention
    vocab_size: int  # 49152
    max_context: int  # trained context (8192)
    rope_theta: float  # RoPE base (1e5)
    norm_eps: float  # RMSNorm epsilon (1e-5)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @classmethod
    def from_gguf(cls, meta: dict[str, Any], path: str) -> LlamaConfig:
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise UnsupportedArchitectureError(f"{path}: architecture '{arch}' is not llama")

        def get(key: str) -> Any:
            v = meta.get(f"llama.{key}")
            if v is None:
                raise FormatError(f"{path}: GGUF metadata lacks llama.{key}")
            return v

        tokens = meta.get("tokenizer.ggml.tokens")
        vocab = meta.get("llama.vocab_size") or (len(tokens) if tokens is not None else None)
        if vocab is None:
            raise FormatError(f"{path}: GGUF metadata gives no vocabulary size")
        n_heads = int(get("attention.head_count"))
        dim = int(get("embedding_length"))
        rope_dims = int(meta.get("llama.rope.dimension_count", dim // n_heads))
        if rope_dims != dim // n_heads or meta.get("llama.rope.scaling.type") not in (None, "none"):
            raise UnsupportedArchitectureError(f"{path}: partial or scaled RoPE is not supported")
        return cls(dim=dim, hidden=int(get("feed_forward_length")),
                   n_layers=int(get("block_count")), n_heads=n_heads,
                   n_kv_heads=int(meta.get("llama.attention.head_count_kv", n_heads)),
                   vocab_size=int(vocab), max_context=int(get("context_length")),
                   rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
                   norm_eps=float(get("attention.layer_norm_rms_epsilon")))


KV_BLOCK = 64  # = PYLLM_KV_BLOCK in pyllm/kernels/ops.h (checked when the kernels load)


class LlamaState(ModelState):
    """KV cache of one sequence, float32, paged by blocks of KV_BLOCK positions with the block
    outermost, so a new position touches only its block (pyllm/kernels/ops.h):
      k (blocks, n_layers, n_kv_heads, head_dim, KV_BLOCK)   keys transposed within a block
      v (blocks, n_layers, n_kv_heads, KV_BLOCK, head_dim)
    Only positions < pos are ever read."""

    def __init__(self, cfg: LlamaConfig, capacity: int) -> None:
        super().__init__(capacity)
        blocks = -(-capacity // KV_BLOCK)
        shape = (blocks, cfg.n_layers, cfg.n_kv_heads)
        # one mapping on 2 MB pages: every decode step touches each layer's slice
        self.k, self.v = hugepages.zeros_pair(shape + (cfg.head_dim, KV_BLOCK),
                                              shape + (KV_BLOCK, cfg.head_dim))

    @property
    def cap_rounded(self) -> int:
        return self.k.shape[0] * KV_BLOCK

    def fits(self, capacity: int) -> bool:
        return capacity <= self.cap_rounded

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def write(self, layer: int, pos: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v (n, n_kv_heads, head_dim) of positions pos (n,)."""
        self.k[pos // KV_BLOCK, layer, :, :, pos % KV_BLOCK] = k
        self.v[pos // KV_BLOCK, layer, :, pos % KV_BLOCK, :] = v

    def save_rows(self, start: int, end: int) -> dict[str, np.ndarray]:
        """k, v of positions [start, end): (n, n_layers, n_kv_heads, head_dim) each; one
        whole cache block is one contiguous copy."""
        if start % KV_BLOCK == 0 and end - start == KV_BLOCK:
            b = start // KV_BLOCK
            return {"kb": self.k[b].copy(), "vb": self.v[b].copy()}
        pos = np.arange(start, end)
        return {"k": self.k[pos // KV_BLOCK, :, :, :, pos % KV_BLOCK],
                "v": self.v[pos // KV_BLOCK, :, :, pos % KV_BLOCK, :]}

    def load_rows(self, start: int, rows: dict[str, np.ndarray]) -> None:
        if "kb" in rows:
            if start % KV_BLOCK:
                raise ValueError(f"a whole KV block cannot go at position {start}")
            self.k[start // KV_BLOCK], self.v[start // KV_BLOCK] = rows["kb"], rows["vb"]
            return
        pos = np.arange(start, start + len(rows["k"]))
        self.k[pos // KV_BLOCK, :, :, :, pos % KV_BLOCK] = rows["k"]
        self.v[pos // KV_BLOCK, :, :, pos % KV_BLOCK, :] = rows["v"]

    def keys(self, layer: int, n: int) -> np.ndarray:
        """Keys of positions < n: (n_kv_heads, head_dim, n)."""
        k = self.k[:, layer].transpose(1, 2, 0, 3)  # (nkv, hd, blocks, B)
        return k.reshape(k.shape[0], k.shape[1], -1)[:, :, :n]

    def values(self, layer: int, n: int) -> np.ndarray:
        """Values of positions < n: (n_kv_heads, n, head_dim)."""
        v = self.v[:, layer].transpose(1, 0, 2, 3)  # (nkv, blocks, B, hd)
        return v.reshape(v.shape[0], -1, v.shape[3])[:, :n]


# ---------------------------------------------------------------- weights

@dataclass
class LayerWeights:
    attn_norm: np.ndarray  # (dim,)
    wqkv: Any  # Linear dim -> dim + 2 kv_dim: [q | k | v] (q, k rows permuted per head for
    #            interleaved RoPE)
    wo: Any  # Linear dim -> dim
    ffn_norm: np.ndarray  # (dim,)
    wgu: Any  # Linear dim -> 2 hidden: [gate | up]
    wdown: Any  # Linear hidden -> dim


@dataclass
class LlamaWeights:
    embed: Any  # row lookup: .rows(ids) -> (n, dim) f32 (pyllm.backend.tensors.Embedding)
    layers: list[LayerWeights]
    out_norm: np.ndarray  # (dim,)
    head: Any  # Linear dim -> vocab (tied: the embedding)


def build_weights(ck: Checkpoint, cfg: LlamaConfig, ops: Ops) -> LlamaWeights:
    """The GGUF tensors as model weights: matrices that read the same input fused (one
    product instead of three), each made by `ops` in its backend's format."""

    def vec(name: str) -> np.ndarray:
        return tensor_f32(tensor_array(ck, name))

    def fused(name: str, *names: str) -> Any:
        return ops.linear(name, [tensor_array(ck, n) for n in names])

    layers = []
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=vec(p + "attn_norm.weight"),
            wqkv=fused(p + "wqkv", p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
            wo=fused(p + "wo", p + "attn_output.weight"), ffn_norm=vec(p + "ffn_norm.weight"),
            wgu=fused(p + "wgu", p + "ffn_gate.weight", p + "ffn_up.weight"),
            wdown=fused(p + "wdown", p + "ffn_down.weight")))
    head_name = "output.weight" if "output.weight" in ck.tensors else "token_embd.weight"
    return LlamaWeights(ops.embedding(tensor_array(ck, "token_embd.weight")), layers,
                        vec("output_norm.weight"), fused("head", head_name))


# ---------------------------------------------------------------- the forward pass (numpy)

def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """Rotate adjacent pairs of x (n, heads, head_dim) by pos * theta^(-2i/head_dim)."""
    hd = x.shape[-1]
    freq = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)  # (hd/2,)
    ang = pos[:, None].astype(np.float64) * freq  # (n, hd/2)
    cos, sin = np.cos(ang).astype(np.float32)[:, None], np.sin(ang).astype(np.float32)[:, None]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def forward_numpy(cfg: LlamaConfig, w: LlamaWeights, tokens: np.ndarray, state: LlamaState,
                  trace: Trace = None, all_logits: bool = False) -> np.ndarray:
    """Run `tokens` (n,) at positions state.pos..; return the logits (vocab,) of the last one
    (or (n, vocab) of every one with all_logits)."""
    n, p0 = len(tokens), state.pos
    hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    pos = np.arange(p0, p0 + n)
    x = w.embed.rows(tokens)  # (n, dim)
    for i, lw in enumerate(w.layers):
        # attention input: RMSNorm
        h = rmsnorm(x, lw.attn_norm, cfg.norm_eps)
        if trace:
            trace("attn_norm", i, h)
        # projections: q (n, nh, hd), k and v (n, nkv, hd)
        qkv = lw.wqkv(h)
        q = qkv[:, :cfg.dim].reshape(n, nh, hd)
        k = qkv[:, cfg.dim:cfg.dim + cfg.kv_dim].reshape(n, nkv, hd)
        v = qkv[:, cfg.dim + cfg.kv_dim:].reshape(n, nkv, hd)
        # RoPE on q and k (interleaved pairs)
        q, k = rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta)
        # append k, v to the cache, then read back every position so far
        state.write(i, pos, k, v)
        keys, vals = state.keys(i, p0 + n), state.values(i, p0 + n)  # (nkv, hd, T), (nkv, T, hd)
        # grouped-query attention: query head j uses kv head j // (nh // nkv)
        qg = q.reshape(n, nkv, nh // nkv, hd)
        scores = np.einsum("ngqd,gdt->ngqt", qg, keys) / np.float32(np.sqrt(hd))
        causal = pos[:, None] >= np.arange(p0 + n)[None, :]  # (n, T): row i sees t <= pos[i]
        scores = np.where(causal[:, None, None, :], scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        att = np.einsum("ngqt,gtd->ngqd", scores, vals).reshape(n, cfg.dim)
        if trace:
            trace("attn_out", i, att)
        # output projection and residual
        x = x + lw.wo(att)
        # feed-forward: RMSNorm, SwiGLU = down(silu(gate) * up), residual
        h = rmsnorm(x, lw.ffn_norm, cfg.norm_eps)
        gu = lw.wgu(h)
        g, u = gu[:, :cfg.hidden], gu[:, cfg.hidden:]
        x = x + lw.wdown(g / (1.0 + np.exp(-g)) * u)
        if trace:
            trace("layer_out", i, x)
    # final norm and the LM head (on the last position only, unless all are wanted)
    state.pos += n
    if all_logits:
        return w.head(rmsnorm(x, w.out_norm, cfg.norm_eps)).astype(np.float32)
    last = rmsnorm(x[-1:], w.out_norm, cfg.norm_eps)
    return w.head(last)[0].astype(np.float32)


# ---------------------------------------------------------------- the model

class LlamaModel(Model):
    """A Llama model from its weights (built by `from_gguf`, or from course assets by
    pyllm/models/course_model.py); see the module docstring for the backends. `fast` is the C
    forward pass over the same weights (llama_c.py), None on the numpy paths."""

    def __init__(self, cfg: LlamaConfig, w: LlamaWeights, info: ModelInfo, fast: LlamaC | None,
                 tokenizer: Callable[[], Tokenizer]) -> None:
        self.cfg, self.w, self.info, self.fast = cfg, w, info, fast
        if fast is not None:  # the KV cache layout is shared with llama.c
            assert fast.lib.PYLLM_KV_BLOCK == KV_BLOCK
        self.backend = "c" if fast is not None else info.backend
        self._load_tokenizer = tokenizer
        self._tok: Tokenizer | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tok is None:
            self._tok = self._load_tokenizer()
        return self._tok

    def new_state(self, capacity: int | None = None) -> LlamaState:
        cap = min(capacity or self.cfg.max_context, self.cfg.max_context)
        return LlamaState(self.cfg, cap)

    def prefill(self, tokens: Any, state: ModelState) -> np.ndarray:
        toks = self.check_prompt(tokens, state=state)
        return np.asarray(self.step([(state, toks)])[0])

    def decode(self, token: int, state: ModelState) -> np.ndarray:
        toks = self.check_prompt([token], state=state)
        return np.asarray(self.step([(state, toks)])[0])

    def step(self, batch: list[tuple[ModelState, np.ndarray]],
             n_out: Sequence[int] | None = None) -> np.ndarray:
        if self.fast is not None:
            return self.fast.forward(batch, n_out=n_out)
        counts = out_counts([len(t) for _, t in batch], n_out)
        out = np.empty((sum(counts), self.cfg.vocab_size), np.float32)
        at = 0
        for (state, toks), n in zip(batch, counts, strict=True):
            assert isinstance(state, LlamaState)
            if n == 1:
                out[at] = forward_numpy(self.cfg, self.w, np.asarray(toks), state)
            else:
                out[at:at + n] = forward_numpy(self.cfg, self.w, np.asarray(toks), state,
                                               all_logits=True)[-n:]
            at += n
        return out

    def logits_all(self, tokens: Any, state: ModelState) -> np.ndarray:
        """Consume tokens like prefill, but return the logits of every position (n, vocab)."""
        toks = self.check_prompt(tokens, state=state)
        assert isinstance(state, LlamaState)
        if self.fast is not None:
            return self.fast.forward([(state, toks)], all_rows=True)
        return forward_numpy(self.cfg, self.w, toks, state, all_logits=True)

    def forward_traced(self, tokens: Any, state: LlamaState, trace: Trace) -> np.ndarray:
        """The numpy forward with a trace hook (tests compare stages with transformers)."""
        if self.fast is not None:
            raise ValueError("tracing needs a numpy backend")
        return forward_numpy(self.cfg, self.w, np.asarray(tokens), state, trace)


def open_backend(backend: str, n_threads: int, fallback: str = "numpy-q8",
                 **ops_opts: Any) -> Ops:
    """The Ops of a Llama load (pyllm.backend.ops.make_ops; "auto" falls back to `fallback`
    without the C kernels), with the cores given to the pool that will use them: the C pool
    on the fast paths, OpenBLAS on the numpy paths."""
    ops = make_ops(backend, n_threads=n_threads, fallback=fallback, **ops_opts)
    set_blas_threads(1 if ops.c_kernels else n_threads)
    return ops


def _fingerprint(ck: Checkpoint) -> str:
    """The repack cache's key of a GGUF file: its header (metadata + tensor table), size and
    modification time, so a changed file never reuses stale records."""
    import hashlib

    st = os.stat(ck.path)
    head = ck.keepalive[0][:min(st.st_size, 4 << 20)]  # header bytes (the mmap)
    h = hashlib.sha256(f"{st.st_size}|{st.st_mtime_ns}|".encode())
    h.update(head)
    return h.hexdigest()


# ---------------------------------------------------------------- registry entry points

def from_gguf(path: Path, *, name: str, synthetic: bool = False, backend: str = "auto",
              n_threads: int | None = None, cache: bool | None = None) -> LlamaModel:
    """Load a Llama GGUF file ready to run (see registry.load).

    cache: keep the repacked weights in paths.cache_dir() (default: on, unless the
    environment sets PYLLM_CACHE=0).
    """
    import hashlib

    t0 = time.perf_counter()
    ck = open_gguf(path)
    cfg = LlamaConfig.from_gguf(ck.metadata, str(path))
    if cache is None:
        cache = os.environ.get("PYLLM_CACHE", "1") != "0"
    n_threads = n_threads or default_threads()
    tag = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]
    ops = open_backend(backend, n_threads, cache_key=_fingerprint(ck) if cache else None,
                       cache_name=f"llama-{tag}", records="q4x16")
    w = build_weights(ck, cfg, ops)
    ops.finish()
    fast = LlamaC(cfg, w, str(path)) if ops.c_kernels else None
    meta = ck.metadata
    eos = meta.get("tokenizer.ggml.eos_token_id")
    bos = meta.get("tokenizer.ggml.bos_token_id")
    info = ModelInfo(
        name=name, title=naming.from_gguf(meta, ck.path), arch="llama",
        vocab_size=cfg.vocab_size, max_context=cfg.max_context, n_layers=cfg.n_layers,
        model_width=cfg.dim, ffn_width=cfg.hidden, n_params=sum(t.n_elements for t in ck.tensors.values()),
        weight_bytes=int(ops.weight_bytes), load_seconds=0.0, synthetic=synthetic,
        path=ck.path, weight_format=file_type_name(ck),
        backend=ops.backend, n_threads=n_threads if ops.c_kernels else blas_threads(),
        bos_id=int(bos) if bos is not None else None,
        eos_ids=(int(eos),) if eos is not None else (),
        extra={"n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
               "head_dim": cfg.head_dim, "rope_theta": cfg.rope_theta,
               "kv_bytes_per_token": 2 * cfg.n_layers * cfg.kv_dim * 4,
               "gguf_name": str(meta.get("general.name", "")),
               "repack_cache": ops.cache_status, "repack_s": ops.repack_s})
    model = LlamaModel(cfg, w, info, fast, lambda: tokenizer_from_gguf(Path(ck.path), ck))
    model.ck = ck  # keeps the mapped file alive (the embedding rows are read from it)
    model.info.load_seconds = time.perf_counter() - t0
    return model


def tokenizer_from_gguf(path: Path, ck: Checkpoint | None = None) -> Tokenizer:
    """The tokenizer: a tokenizer.json next to the file if there is one, else the GGUF vocab."""
    from pyllm.tokenizers.bpe import BPETokenizer

    for cand in (path.with_suffix(".tokenizer.json"), path.parent / "tokenizer.json"):
        if path.is_file() and cand.exists():
            return BPETokenizer.from_json(cand)
    ck = ck or open_gguf(path)
    return BPETokenizer.from_gguf_metadata(ck.metadata, str(path))
