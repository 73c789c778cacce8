"""Llama architecture (SmolLM2-135M): config, weights, KV cache, forward pass.

Read top to bottom: `LlamaConfig` (from GGUF metadata), the weights in two forms (dense f32 for the
exact numpy path, repacked int4/int8 records for the fast C path), `LlamaState` (the KV cache), then
`forward_numpy` - the whole model in readable numpy, one comment per stage - and `LlamaModel`, which
runs either that or the same stages in C (pyllm/kernels/llama.c) for many rows at once.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyllm import naming
from pyllm.errors import (
    ContextOverflowError,
    FormatError,
    PyllmError,
    UnsupportedArchitectureError,
)
from pyllm.loaders import Checkpoint
from pyllm.loaders.gguf import open_gguf, tensor_array
from pyllm.models.base import Model, ModelInfo, ModelState, with_greedy
from pyllm.quants import dequantize
from pyllm.threads import blas_threads, set_blas_threads
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
        self.k = np.empty(shape + (cfg.head_dim, KV_BLOCK), np.float32)
        self.v = np.empty(shape + (KV_BLOCK, cfg.head_dim), np.float32)

    @property
    def cap_rounded(self) -> int:
        return self.k.shape[0] * KV_BLOCK

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def write(self, layer: int, pos: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v (n, n_kv_heads, head_dim) of positions pos (n,)."""
        self.k[pos // KV_BLOCK, layer, :, :, pos % KV_BLOCK] = k
        self.v[pos // KV_BLOCK, layer, :, pos % KV_BLOCK, :] = v

    def keys(self, layer: int, n: int) -> np.ndarray:
        """Keys of positions < n: (n_kv_heads, head_dim, n)."""
        k = self.k[:, layer].transpose(1, 2, 0, 3)  # (nkv, hd, blocks, B)
        return k.reshape(k.shape[0], k.shape[1], -1)[:, :, :n]

    def values(self, layer: int, n: int) -> np.ndarray:
        """Values of positions < n: (n_kv_heads, n, head_dim)."""
        v = self.v[:, layer].transpose(1, 0, 2, 3)  # (nkv, blocks, B, hd)
        return v.reshape(v.shape[0], -1, v.shape[3])[:, :n]


# ---------------------------------------------------------------- weights of the numpy paths

class DenseLinear:
    """y = x W^T with W (out, in) float32: the exact path."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w.T

    @property
    def nbytes(self) -> int:
        return self.w.nbytes


class TwinLinear:
    """The numpy twin of the C int8 matmul, on the GGUF blocks (fallback path)."""

    def __init__(self, type_: str, raw: np.ndarray, rows: int, cols: int) -> None:
        from pyllm.kernels import twins

        self.fn = twins.qmatmul_q4_1 if type_ == "Q4_1" else twins.qmatmul_q8_0
        self.raw, self.rows, self.cols = raw, rows, cols
        if type_ not in ("Q4_1", "Q8_0"):
            raise FormatError(f"numpy-q8 backend reads Q4_1/Q8_0 tensors, not {type_}")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.fn(self.raw, self.rows, self.cols, x)

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes


@dataclass
class LayerWeights:
    attn_norm: np.ndarray  # (dim,)
    wq: Any  # Linear dim -> dim (rows permuted per head for interleaved RoPE)
    wk: Any  # Linear dim -> kv_dim (same permutation)
    wv: Any  # Linear dim -> kv_dim
    wo: Any  # Linear dim -> dim
    ffn_norm: np.ndarray  # (dim,)
    w_gate: Any  # Linear dim -> hidden
    w_up: Any  # Linear dim -> hidden
    w_down: Any  # Linear hidden -> dim


@dataclass
class NumpyWeights:
    token_embd: np.ndarray  # (vocab, dim) f32, dequantized on demand per token
    layers: list[LayerWeights]
    out_norm: np.ndarray  # (dim,)
    head: Any  # Linear dim -> vocab (tied: the embedding)


def _embed_rows(ck: Checkpoint, tokens: np.ndarray) -> np.ndarray:
    t = ck.get("token_embd.weight")
    if t.type in ("Q4_1", "Q8_0"):
        from pyllm.quants import BLOCK_BYTES

        row_bytes = t.shape[1] // 32 * BLOCK_BYTES[t.type]
        raw = t.raw.reshape(t.shape[0], row_bytes)[tokens]
        return dequantize(t.type, raw.reshape(-1), (len(tokens), t.shape[1]))
    return dequantize(t.type, t.raw, t.shape)[tokens]


def _load_numpy(ck: Checkpoint, cfg: LlamaConfig, exact: bool) -> NumpyWeights:
    def vec(name: str) -> np.ndarray:
        t = tensor_array(ck, name)
        return dequantize(t.type, t.raw, t.shape)

    def lin(name: str) -> Any:
        t = tensor_array(ck, name)
        if exact or t.type not in ("Q4_1", "Q8_0"):
            return DenseLinear(dequantize(t.type, t.raw, t.shape))
        return TwinLinear(t.type, t.raw, *t.shape)

    layers = []
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            vec(p + "attn_norm.weight"), lin(p + "attn_q.weight"), lin(p + "attn_k.weight"),
            lin(p + "attn_v.weight"), lin(p + "attn_output.weight"), vec(p + "ffn_norm.weight"),
            lin(p + "ffn_gate.weight"), lin(p + "ffn_up.weight"), lin(p + "ffn_down.weight")))
    head_name = "output.weight" if "output.weight" in ck.tensors else "token_embd.weight"
    return NumpyWeights(np.empty(0), layers, vec("output_norm.weight"), lin(head_name))


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


def forward_numpy(cfg: LlamaConfig, w: NumpyWeights, embed: Any, tokens: np.ndarray,
                  state: LlamaState, trace: Trace = None, all_logits: bool = False) -> np.ndarray:
    """Run `tokens` (n,) at positions state.pos..; return the logits (vocab,) of the last one
    (or (n, vocab) of every one with all_logits)."""
    n, p0 = len(tokens), state.pos
    hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    pos = np.arange(p0, p0 + n)
    x = embed(tokens)  # (n, dim)
    for i, lw in enumerate(w.layers):
        # attention input: RMSNorm
        h = rmsnorm(x, lw.attn_norm, cfg.norm_eps)
        if trace:
            trace("attn_norm", i, h)
        # projections: q (n, nh, hd), k and v (n, nkv, hd)
        q = lw.wq(h).reshape(n, nh, hd)
        k = lw.wk(h).reshape(n, nkv, hd)
        v = lw.wv(h).reshape(n, nkv, hd)
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
        g, u = lw.w_gate(h), lw.w_up(h)
        x = x + lw.w_down(g / (1.0 + np.exp(-g)) * u)
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
    """SmolLM2 and other Llama GGUF files; see the module docstring for the backends."""

    def __init__(self, ck: Checkpoint, cfg: LlamaConfig, backend: str, n_threads: int,
                 name: str, synthetic: bool, cache: bool = True) -> None:
        t0 = time.perf_counter()
        self.ck, self.cfg = ck, cfg
        self._tok: Tokenizer | None = None
        from pyllm import kernels

        if backend == "auto":
            backend = "c" if kernels.native() is not None else "numpy-q8"
        if backend == "c" and kernels.native() is None:
            raise PyllmError(f"backend 'c' requested but {kernels.NATIVE_ERROR}")
        self.backend = backend
        # one pool owns the cores: ours for the fast path, OpenBLAS for the numpy paths
        set_blas_threads(1 if backend == "c" else n_threads)
        cache_status = "off"
        if backend == "c":
            self._fast = _FastLlama(ck, cfg, n_threads, cache)
            weight_bytes = self._fast.nbytes
            backend_name = kernels.backend_name()
            if self._fast.cache is not None:
                cache_status = self._fast.cache.status
        elif backend in ("numpy-q8", "numpy-f32"):
            self._np = _load_numpy(ck, cfg, exact=backend == "numpy-f32")
            weight_bytes = sum(
                getattr(lw, f).nbytes for lw in self._np.layers
                for f in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
            ) + self._np.head.nbytes
            backend_name = backend
        else:
            raise PyllmError(f"unknown backend '{backend}' (auto, c, numpy-q8, numpy-f32)")
        n_params = sum(t.n_elements for t in ck.tensors.values())
        meta = ck.metadata
        eos = meta.get("tokenizer.ggml.eos_token_id")
        bos = meta.get("tokenizer.ggml.bos_token_id")
        self.info = ModelInfo(
            name=name, title=naming.from_gguf(meta, ck.path), arch="llama",
            vocab_size=cfg.vocab_size, max_context=cfg.max_context, n_layers=cfg.n_layers,
            model_width=cfg.dim, ffn_width=cfg.hidden, n_params=n_params, weight_bytes=int(weight_bytes), load_seconds=0.0,
            synthetic=synthetic, path=ck.path, weight_format=_weight_format(ck),
            backend=backend_name, n_threads=n_threads if backend == "c" else blas_threads(),
            bos_id=int(bos) if bos is not None else None,
            eos_ids=(int(eos),) if eos is not None else (),
            extra={"n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                   "head_dim": cfg.head_dim, "rope_theta": cfg.rope_theta,
                   "kv_bytes_per_token": 2 * cfg.n_layers * cfg.kv_dim * 4,
                   "repack_cache": cache_status})
        self.build_seconds = time.perf_counter() - t0

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tok is None:
            self._tok = tokenizer_from_gguf(Path(self.ck.path), self.ck)
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

    def step(self, batch: list[tuple[ModelState, np.ndarray]]) -> np.ndarray:
        if self.backend == "c":
            return self._fast.forward(batch)
        out = np.empty((len(batch), self.cfg.vocab_size), np.float32)
        for i, (state, toks) in enumerate(batch):
            assert isinstance(state, LlamaState)
            out[i] = forward_numpy(self.cfg, self._np, self._embed, np.asarray(toks), state)
        return out

    def logits_all(self, tokens: Any, state: ModelState) -> np.ndarray:
        """Consume tokens like prefill, but return the logits of every position (n, vocab)."""
        toks = self.check_prompt(tokens, state=state)
        assert isinstance(state, LlamaState)
        if self.backend == "c":
            return self._fast.forward([(state, toks)], all_rows=True)
        return forward_numpy(self.cfg, self._np, self._embed, toks, state, all_logits=True)

    def forward_traced(self, tokens: Any, state: LlamaState, trace: Trace) -> np.ndarray:
        """The numpy forward with a trace hook (tests compare stages with transformers)."""
        if self.backend == "c":
            raise ValueError("tracing needs a numpy backend")
        return forward_numpy(self.cfg, self._np, self._embed, np.asarray(tokens), state, trace)

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        return _embed_rows(self.ck, tokens)


# ---------------------------------------------------------------- the fast path (C)

class _FastLlama:
    """Weights repacked into one aligned buffer + the C structs pointing into it."""

    def __init__(self, ck: Checkpoint, cfg: LlamaConfig, n_threads: int, cache: bool) -> None:
        from pyllm.kernels import native
        from pyllm.kernels.ops import aligned_empty, ptr

        ffi, lib = native()
        self.ffi, self.lib, self.cfg = ffi, lib, cfg
        assert lib.PYLLM_KV_BLOCK == KV_BLOCK
        lib.pyllm_set_threads(n_threads)
        L = cfg.n_layers
        head_name = "output.weight" if "output.weight" in ck.tensors else "token_embd.weight"
        # (struct field, layer, tensor names fused by stacking rows)
        mats: list[tuple[str, int, list[str]]] = []
        for i in range(L):
            p = f"blk.{i}."
            mats += [("wqkv", i, [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]),
                     ("wo", i, [p + "attn_output.weight"]),
                     ("wgu", i, [p + "ffn_gate.weight", p + "ffn_up.weight"]),
                     ("wdown", i, [p + "ffn_down.weight"])]
        mats.append(("head", 0, [head_name]))
        # sizes: each part becomes whole 16-row groups, so fused parts just follow each other
        plan = []
        total = 0
        for field, i, names in mats:
            parts = [tensor_array(ck, n) for n in names]
            cols = parts[0].shape[1]
            kind = lib.PYLLM_Q4X16 if all(t.type == "Q4_1" for t in parts) else lib.PYLLM_Q8X16
            sizes = []
            for t in parts:
                nb = lib.pyllm_qmat_bytes(kind, t.shape[0], t.shape[1])
                if nb < 0 or t.shape[1] != cols:
                    raise FormatError(f"{ck.path}: tensor '{t.name}' {t.shape} does not fit the "
                                      "fast path's 16x32 blocks")
                sizes.append(nb)
            plan.append((field, i, parts, kind, total, sizes))
            total += -(-sum(sizes) // 64) * 64
        self.nbytes = total
        self.cache = RepackCache(ck, total) if cache else None
        buf = self.cache.load() if self.cache else None
        self.repacked = buf is None
        self.buf = buf if buf is not None else aligned_empty(total)
        self.qmats = {f: ffi.new("struct pyllm_qmat[]", L) for f in ("wqkv", "wo", "wgu", "wdown")}
        self.qmats["head"] = ffi.new("struct pyllm_qmat[]", 1)
        for field, i, parts, kind, off, sizes in plan:
            at = off
            for t, nb in zip(parts, sizes, strict=True):
                if not self.repacked:  # mapped from the cache
                    break
                dst = ptr(self.buf[at:at + nb], "uint8_t *")
                rows, cols = t.shape
                if t.type == "Q4_1" and kind == lib.PYLLM_Q4X16:
                    lib.pyllm_repack_q4_1(ptr(t.raw, "uint8_t *"), rows, cols, dst)
                elif t.type == "Q8_0":
                    lib.pyllm_repack_q8_0(ptr(t.raw, "uint8_t *"), rows, cols, dst)
                else:  # any other type: quantize its f32 values per block
                    f = np.ascontiguousarray(dequantize(t.type, t.raw, t.shape), np.float32)
                    lib.pyllm_quantize_f32_q8x16(ptr(f, "float *"), rows, cols, dst)
                at += nb
            q = self.qmats[field][i]
            q.data = ptr(self.buf[off:off + 1], "uint8_t *")
            q.rows, q.cols, q.type = sum(t.shape[0] for t in parts), parts[0].shape[1], kind
        if self.repacked and self.cache is not None:
            self.cache.save(self.buf)
        # the small f32 tensors, stacked per kind
        def vecs(fmt: str) -> np.ndarray:
            return np.stack([dequantize(t.type, t.raw, t.shape) for t in
                             (tensor_array(ck, fmt.format(i)) for i in range(L))])

        self.attn_norm = vecs("blk.{}.attn_norm.weight")
        self.ffn_norm = vecs("blk.{}.ffn_norm.weight")
        on = tensor_array(ck, "output_norm.weight")
        self.out_norm = dequantize(on.type, on.raw, on.shape)
        emb = tensor_array(ck, "token_embd.weight")
        m = ffi.new("struct pyllm_llama *")
        m.dim, m.hidden, m.n_layers = cfg.dim, cfg.hidden, L
        m.n_heads, m.n_kv_heads, m.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        m.vocab, m.eps, m.theta = cfg.vocab_size, cfg.norm_eps, cfg.rope_theta
        if emb.type == "Q8_0":
            self.embd = emb.raw
            m.embd_q8_0 = ptr(emb.raw, "uint8_t *")
        else:
            self.embd = np.ascontiguousarray(dequantize(emb.type, emb.raw, emb.shape))
            m.embd_f32 = ptr(self.embd, "float *")
        m.attn_norm, m.ffn_norm = ptr(self.attn_norm, "float *"), ptr(self.ffn_norm, "float *")
        m.out_norm = ptr(self.out_norm, "float *")
        m.wqkv, m.wo, m.wgu = self.qmats["wqkv"], self.qmats["wo"], self.qmats["wgu"]
        m.wdown, m.head = self.qmats["wdown"], self.qmats["head"]
        self.m = m

    def forward(self, batch: list[tuple[ModelState, np.ndarray]],
                all_rows: bool = False) -> np.ndarray:
        """One C call for the whole batch; logits of each item's last row (or of every row)."""
        ffi, lib = self.ffi, self.lib
        seqs = ffi.new("struct pyllm_seq[]", len(batch))
        toks, pos, seq, out_rows = [], [], [], []
        for s_i, (state, t) in enumerate(batch):
            assert isinstance(state, LlamaState)
            n = len(t)
            if state.pos + n > state.capacity:
                raise ContextOverflowError(f"sequence would exceed its capacity of "
                                           f"{state.capacity} tokens")
            seqs[s_i].k = ffi.cast("float *", state.k.ctypes.data)
            seqs[s_i].v = ffi.cast("float *", state.v.ctypes.data)
            seqs[s_i].cap = state.cap_rounded
            toks.append(np.asarray(t, np.int32))
            pos.append(np.arange(state.pos, state.pos + n, dtype=np.int32))
            seq.append(np.full(n, s_i, np.int32))
            out_rows.append(sum(len(x) for x in toks) - 1)
        tk, ps, sq = np.concatenate(toks), np.concatenate(pos), np.concatenate(seq)
        orow = np.arange(len(tk), dtype=np.int32) if all_rows else np.asarray(out_rows, np.int32)
        logits = np.empty((len(orow), self.cfg.vocab_size), np.float32)
        greedy = np.empty(len(orow), np.int32)
        rc = lib.pyllm_llama_forward(
            self.m, len(tk), ffi.cast("int32_t *", tk.ctypes.data),
            ffi.cast("int32_t *", ps.ctypes.data), ffi.cast("int32_t *", sq.ctypes.data), seqs,
            len(orow), ffi.cast("int32_t *", orow.ctypes.data),
            ffi.cast("float *", logits.ctypes.data), ffi.cast("int32_t *", greedy.ctypes.data))
        if rc != 0:
            raise MemoryError("pyllm_llama_forward: out of memory")
        for state, t in batch:
            state.pos += len(t)
        return with_greedy(logits, greedy)


class RepackCache:
    """The repacked weights of a GGUF file, kept in `cache_dir()` and memory-mapped on later loads.

    Keyed by the file's identity: a hash of its header (metadata + tensor table), size and
    modification time, plus the record format version, so a changed file or a new format never
    reuses a stale cache. File layout: 4096-byte header (magic, JSON key/size), then the buffer.
    """

    MAGIC = b"PYLLMRPK"
    VERSION = 1  # bump when the Q4X16/Q8X16 records or the fusing plan change
    HEADER = 4096

    def __init__(self, ck: Checkpoint, total: int) -> None:
        import hashlib

        from pyllm.registry import cache_dir

        st = os.stat(ck.path)
        head = ck.keepalive[0][:min(st.st_size, 4 << 20)]  # header bytes (the mmap)
        h = hashlib.sha256(f"{self.VERSION}|{st.st_size}|{st.st_mtime_ns}|{total}|".encode())
        h.update(head)
        self.key, self.total = h.hexdigest(), total
        self.path = cache_dir() / f"{Path(ck.path).stem}.{self.key[:16]}.llama-q4x16"
        self.status = "miss"

    def load(self) -> np.ndarray | None:
        """The cached buffer, mapped read-only and pre-faulted, or None."""
        import json
        import mmap

        try:
            with open(self.path, "rb") as f:
                head = f.read(self.HEADER)
                meta = json.loads(head[len(self.MAGIC):].rstrip(b"\0"))
                if (not head.startswith(self.MAGIC) or meta.get("key") != self.key
                        or os.fstat(f.fileno()).st_size != self.HEADER + self.total):
                    return None
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                mm = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        self.status = "hit"
        return np.frombuffer(mm, np.uint8, count=self.total, offset=self.HEADER)

    def save(self, buf: np.ndarray) -> None:
        """Write the buffer (atomically; stale caches of the same file are removed)."""
        import json

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
            head = self.MAGIC + json.dumps({"key": self.key, "bytes": self.total}).encode()
            with open(tmp, "wb") as f:
                f.write(head.ljust(self.HEADER, b"\0"))
                f.write(memoryview(buf))
            os.replace(tmp, self.path)
            for old in self.path.parent.glob(f"{Path(self.path).name.split('.')[0]}.*.llama-q4x16"):
                if old != self.path:
                    old.unlink(missing_ok=True)
            self.status = "miss (written)"
        except OSError as exc:
            self.status = f"miss (not written: {exc.strerror})"


def _weight_format(ck: Checkpoint) -> str:
    ft = ck.metadata.get("general.file_type")
    names = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 32: "BF16"}
    return names.get(int(ft), f"file_type {ft}") if ft is not None else "mixed"


def default_threads() -> int:
    env = os.environ.get("PYLLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(os.cpu_count() or 1, 8))


# ---------------------------------------------------------------- registry entry points

def from_gguf(path: Path, *, name: str, synthetic: bool = False, backend: str = "auto",
              n_threads: int | None = None, cache: bool | None = None) -> LlamaModel:
    """Load a Llama GGUF file ready to run (see registry.load).

    cache: keep the repacked weights in registry.cache_dir() (default: on, unless the
    environment sets PYLLM_CACHE=0).
    """
    t0 = time.perf_counter()
    ck = open_gguf(path)
    cfg = LlamaConfig.from_gguf(ck.metadata, str(path))
    if cache is None:
        cache = os.environ.get("PYLLM_CACHE", "1") != "0"
    model = LlamaModel(ck, cfg, backend, n_threads or default_threads(), name, synthetic, cache)
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
