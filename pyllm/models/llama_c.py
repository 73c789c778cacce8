"""The C forward pass of Llama (pyllm/kernels/llama.c) bound to a model's weights.

`LlamaModel` uses it when its Ops made C records (the "c" backend): the same stages as
`forward_numpy` in llama.py, for every row of a batch in one call. The weights come from
a GGUF file or from course assets alike; only the embedding differs: a whole table the C
code reads (GGUF Q8_0 blocks, or float32), or, for an embedding without one (the course's
int8 rows), the rows of each call (pyllm.backend.tensors.call_rows).

This module does not import llama.py (llama.py builds it): `cfg` is a LlamaConfig, `w`
LlamaWeights, the states LlamaState.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.kernels import require_c_kernels
from pyllm.backend.tensors import call_rows
from pyllm.errors import ContextOverflowError, FormatError
from pyllm.models.base import ModelState, out_rows, with_greedy

F32 = np.float32
EMBED_FIELDS = {"Q8_0": "embd_q8_0", "F32": "embd_f32"}  # the table types llama.c reads


class LlamaC:
    """Holds the cffi struct pyllm_llama and every array it points to."""

    def __init__(self, cfg: Any, w: Any, where: str) -> None:
        from pyllm.kernels.cstructs import ptr

        ffi, lib = require_c_kernels()
        self.ffi, self.lib, self.cfg, self.w = ffi, lib, cfg, w
        L = cfg.n_layers
        self.qmats = {f: ffi.new("struct pyllm_qmat[]", L) for f in ("wqkv", "wo", "wgu", "wdown")}
        for i, lw in enumerate(w.layers):
            for f in self.qmats:
                self.qmats[f][i] = _records(getattr(lw, f), f"blk.{i}.{f}", where).c[0]
        self.qmats["head"] = _records(w.head, "head", where).c
        self.attn_norm = np.stack([np.asarray(lw.attn_norm, F32) for lw in w.layers])
        self.ffn_norm = np.stack([np.asarray(lw.ffn_norm, F32) for lw in w.layers])
        self.out_norm = np.ascontiguousarray(w.out_norm, F32)
        m = ffi.new("struct pyllm_llama *")
        m.dim, m.hidden, m.n_layers = cfg.dim, cfg.hidden, L
        m.n_heads, m.n_kv_heads, m.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        m.vocab, m.eps, m.theta = cfg.vocab_size, cfg.norm_eps, cfg.rope_theta
        table = w.embed.c_table(tuple(EMBED_FIELDS))
        self.no_rows = np.zeros((1, cfg.dim), F32)
        self.per_call = table is None  # the rows of each call go in as a small f32 table
        if table is None:
            self.embd = self.no_rows
            m.embd_f32 = ptr(self.no_rows, "float *")
        else:
            kind, self.embd = table
            ctype = "float *" if kind == "F32" else "uint8_t *"
            setattr(m, EMBED_FIELDS[kind], ptr(self.embd, ctype))
        m.attn_norm, m.ffn_norm = ptr(self.attn_norm, "float *"), ptr(self.ffn_norm, "float *")
        m.out_norm = ptr(self.out_norm, "float *")
        m.wqkv, m.wo, m.wgu = self.qmats["wqkv"], self.qmats["wo"], self.qmats["wgu"]
        m.wdown, m.head = self.qmats["wdown"], self.qmats["head"]
        self.m = m

    def forward(self, batch: list[tuple[ModelState, np.ndarray]], all_rows: bool = False,
                n_out: Sequence[int] | None = None) -> np.ndarray:
        """One C call for the whole batch; logits of each item's last row, of every row
        (`all_rows`), or of the last n_out[i] rows of item i (Model.step)."""
        if not self.per_call:
            return self._forward(batch, all_rows, n_out)
        rows, remapped = call_rows(self.w.embed, batch)
        self.m.embd_f32 = self.ffi.cast("float *", rows.ctypes.data)
        try:
            return self._forward(remapped, all_rows, n_out)
        finally:
            self.m.embd_f32 = self.ffi.cast("float *", self.no_rows.ctypes.data)

    def _forward(self, batch: list[tuple[Any, np.ndarray]], all_rows: bool,
                 n_out: Sequence[int] | None) -> np.ndarray:
        ffi, lib = self.ffi, self.lib
        seqs = ffi.new("struct pyllm_seq[]", len(batch))
        toks, pos, seq = [], [], []
        for s_i, (state, t) in enumerate(batch):
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
        tk, ps, sq = np.concatenate(toks), np.concatenate(pos), np.concatenate(seq)
        orow = out_rows([len(t) for t in toks], all_rows, n_out)
        logits = np.empty((len(orow), self.cfg.vocab_size), F32)
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


def _records(lin: Any, name: str, where: str) -> Any:
    """The QMat of a matrix llama.c can take: C records of whole 16-row groups."""
    qm = getattr(lin, "qm", None)
    if qm is None or qm.rows != lin.shape[0]:
        raise FormatError(f"{where}: matrix '{name}' {lin.shape} does not fit the fast path's "
                          "16x32 blocks")
    return qm
