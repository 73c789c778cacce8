"""The C forward pass of Qwen3.5 (pyllm/kernels/qwen35.c) bound to a loaded model's weights.

`Qwen35.prefill`, `Qwen35.decode` and `Qwen35.step` use it when every matrix is C records
(the "c" backend's int8 products); it runs the same stages as `Qwen35.forward` (the
readable numpy code, which stays the reference) in one call per engine step: the prompt
chunks and decode tokens of every sequence in flight share one pass over the weights. The
embedding is a whole table the C code reads (bf16 or float32), or, for an embedding without
one (the course's int8 rows), the rows of each call.

This module does not import qwen35.py (qwen35.py builds it): `model` is a Qwen35, the
states Qwen35State.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyllm.backend.tensors import call_rows
from pyllm.models.base import out_rows

F32 = np.float32
EMBED_FIELDS = {"BF16": ("embd_bf16", "uint16_t *"), "F32": ("embd_f32", "float *")}


def supported(model: Any) -> bool:
    """True when the model's matrices are all C records shaped as the C step expects."""
    w, cfg = model.w, model.cfg
    mats = [w.head]
    for lw in w.layers:
        mats += [lw.gate_up, lw.down, *mixer_mats(lw)]
    if not all(getattr(m, "qm", None) is not None for m in mats):
        return False
    two_f = 2 * cfg.intermediate_size
    return all(lw.gate_up.qm.rows == two_f for lw in w.layers) and cfg.lin_v_dim <= 1024


def mixer_mats(lw: Any) -> tuple[Any, Any]:
    """(input projection, output projection) of a layer's token mixer."""
    if lw.kind == "linear_attention":
        return lw.mixer.in_proj, lw.mixer.out_proj
    return lw.mixer.qkv, lw.mixer.o_proj


class FastDecode:
    """Holds the cffi struct pyllm_qwen35 and every array it points to."""

    def __init__(self, model: Any) -> None:
        from pyllm.kernels import require_c_kernels

        self.ffi, self.lib = require_c_kernels()
        cfg, w = model.cfg, model.w
        self.vocab = cfg.vocab_size
        self.keep: list[Any] = []  # arrays the struct points into
        s = self.ffi.new("struct pyllm_qwen35 *")
        s.dim, s.hidden, s.n_layers, s.vocab = (cfg.hidden_size, cfg.intermediate_size,
                                                cfg.n_layers, cfg.vocab_size)
        s.eps = cfg.rms_eps
        s.kind = self._arr(np.array([0 if lw.kind == "linear_attention" else 1
                                     for lw in w.layers], np.int32), "int32_t *")
        s.slot = self._arr(np.array(model.slot, np.int32), "int32_t *")
        self._set_attention(s, cfg, w)
        self._set_deltanet(s, cfg, w)
        self._set_embedding(s, cfg, w)
        self._set_matrices(s, cfg, w)
        self.s, self.model = s, model

    def _arr(self, a: np.ndarray, ctype: str = "float *") -> Any:
        """A C pointer to `a` (made contiguous), kept alive as long as the struct."""
        a = np.ascontiguousarray(a)
        self.keep.append(a)
        return self.ffi.cast(ctype, a.ctypes.data)

    def _set_attention(self, s: Any, cfg: Any, w: Any) -> None:
        """Head shapes, RoPE frequencies and the q/k norms of the full-attention layers."""
        att = [lw for lw in w.layers if lw.kind != "linear_attention"]
        s.n_heads, s.n_kv_heads, s.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        s.rot_dim = cfg.rotary_dim
        half = cfg.rotary_dim // 2
        # the same float32 frequencies as rope_tables()
        exponent = np.arange(half, dtype=F32) * F32(2) / F32(cfg.rotary_dim)
        s.inv_freq = self._arr(F32(1) / (F32(cfg.rope_theta) ** exponent))
        one = F32(1)
        if att:
            s.q_norm = self._arr(np.stack([one + lw.mixer.q_norm for lw in att]).astype(F32))
            s.k_norm = self._arr(np.stack([one + lw.mixer.k_norm for lw in att]).astype(F32))

    def _set_deltanet(self, s: Any, cfg: Any, w: Any) -> None:
        """Head shapes, conv taps, decay rates and output norms of the DeltaNet layers."""
        lin = [lw for lw in w.layers if lw.kind == "linear_attention"]
        s.lk_heads, s.lv_heads = cfg.lin_k_heads, cfg.lin_v_heads
        s.v_tiled = int(cfg.v_tiled)
        s.lk_dim, s.lv_dim, s.conv_k = cfg.lin_k_dim, cfg.lin_v_dim, cfg.conv_kernel
        if lin:
            s.conv_w = self._arr(np.stack([lw.mixer.conv for lw in lin]).astype(F32))
            s.neg_a = self._arr(np.stack([-np.exp(lw.mixer.A_log) for lw in lin]).astype(F32))
            s.dt_bias = self._arr(np.stack([lw.mixer.dt_bias for lw in lin]).astype(F32))
            s.gnorm = self._arr(np.stack([lw.mixer.norm for lw in lin]).astype(F32))

    def _set_embedding(self, s: Any, cfg: Any, w: Any) -> None:
        """The embedding table (or the per-call rows) and every layer's (1 + w) norms."""
        table = w.embed.c_table(tuple(EMBED_FIELDS))
        self.no_rows = np.zeros((1, cfg.hidden_size), F32)
        self.embed, self.per_call = w.embed, table is None
        if table is None:  # the rows of each call go in as a small f32 table
            s.embd_f32 = self._arr(self.no_rows)
        else:  # bf16 as stored, other types converted once
            field, ctype = EMBED_FIELDS[table[0]]
            setattr(s, field, self._arr(table[1], ctype))
        one = F32(1)
        s.norm1 = self._arr(np.stack([one + lw.input_norm for lw in w.layers]).astype(F32))
        s.norm2 = self._arr(np.stack([one + lw.post_norm for lw in w.layers]).astype(F32))
        s.out_norm = self._arr((one + w.norm).astype(F32))

    def _set_matrices(self, s: Any, cfg: Any, w: Any) -> None:
        """Every layer's matrices (C records) in per-kind arrays, and the LM head."""
        L = cfg.n_layers
        self.mats = {k: self.ffi.new("struct pyllm_qmat[]", L)
                     for k in ("in", "out", "gu", "down")}
        for i, lw in enumerate(w.layers):
            mi, mo = mixer_mats(lw)
            for key, m in (("in", mi), ("out", mo), ("gu", lw.gate_up), ("down", lw.down)):
                self.mats[key][i] = m.qm.c[0]
        s.mix_in, s.mix_out = self.mats["in"], self.mats["out"]
        s.wgu, s.wdown = self.mats["gu"], self.mats["down"]
        s.head = w.head.qm.c
        self.head_rows = w.head.qm.rows

    def __call__(self, items: list[tuple[Any, int]]) -> np.ndarray:
        """Decode one token for each (state, token); returns logits (n, vocab)."""
        return self.forward([(st, np.array([t], np.int32)) for st, t in items])

    def forward(self, batch: list[tuple[Any, np.ndarray]], all_rows: bool = False,
                n_out: Sequence[int] | None = None) -> np.ndarray:
        """One C call for the whole batch (prompt chunks, decode tokens and verify rows
        alike); logits (len(batch), vocab) of each item's last row, of every row
        (`all_rows`), or of the last n_out[i] rows of item i (Model.step)."""
        if not self.per_call:
            return self._forward(batch, all_rows, n_out)
        rows, remapped = call_rows(self.embed, batch)
        self.s.embd_f32 = self.ffi.cast("float *", rows.ctypes.data)
        try:
            return self._forward(remapped, all_rows, n_out)
        finally:
            self.s.embd_f32 = self.ffi.cast("float *", self.no_rows.ctypes.data)

    def _forward(self, batch: list[tuple[Any, np.ndarray]], all_rows: bool,
                 n_out: Sequence[int] | None) -> np.ndarray:
        ffi, n = self.ffi, len(batch)
        seqs = ffi.new("struct pyllm_qwen35_seq[]", n)
        toks, pos, seq = [], [], []
        keep: list[Any] = []  # the snapshot pointer arrays, alive until the call returns
        filled: list[tuple[Any, list[tuple[int, dict[str, np.ndarray]]]]] = []
        for i, (st, t) in enumerate(batch):
            k = len(t)
            st.reserve(st.pos + k)
            seqs[i].conv = ffi.cast("float *", st.conv.ctypes.data)
            seqs[i].ssm = ffi.cast("float *", st.ssm.ctypes.data)
            seqs[i].k = ffi.cast("float *", st.k.ctypes.data)
            seqs[i].v = ffi.cast("float *", st.v.ctypes.data)
            seqs[i].cap = st.k.shape[2]
            snaps = _snap_buffers(st, k)
            if snaps:
                ends = ffi.new("int32_t[]", [p for p, _ in snaps])
                keep.append(ends)
                seqs[i].nsnap, seqs[i].snap_end = len(snaps), ends
                for part in ("conv", "ssm"):
                    ptrs = ffi.new("float *[]", [ffi.cast("float *", sn[part].ctypes.data)
                                                 for _, sn in snaps])
                    keep.append(ptrs)
                    setattr(seqs[i], f"snap_{part}", ptrs)
                filled.append((st, snaps))
            toks.append(np.asarray(t, np.int32))
            pos.append(np.arange(st.pos, st.pos + k, dtype=np.int32))
            seq.append(np.full(k, i, np.int32))
        tk, ps, sq = np.concatenate(toks), np.concatenate(pos), np.concatenate(seq)
        orow = out_rows([len(t) for t in toks], all_rows, n_out)
        out = np.empty((len(orow), self.head_rows), F32)
        rc = self.lib.pyllm_qwen35_forward(
            self.s, len(tk), ffi.cast("int32_t *", tk.ctypes.data),
            ffi.cast("int32_t *", ps.ctypes.data), ffi.cast("int32_t *", sq.ctypes.data), n,
            seqs, len(orow), ffi.cast("int32_t *", orow.ctypes.data),
            ffi.cast("float *", out.ctypes.data))
        if rc == -1:
            raise MemoryError("pyllm_qwen35_forward: out of memory")
        if rc != 0:
            raise ValueError(f"pyllm_qwen35_forward: bad arguments (rc {rc})")
        for st, t in batch:
            st.pos += len(t)
        for st, snaps in filled:
            st.snapshots.update(snaps)
        return out[:, :self.vocab]


def _snap_buffers(st: Any, n: int) -> list[tuple[int, dict[str, np.ndarray]]]:
    """Snapshot buffers, by position, for st.snap_points(n): the C call fills them (struct
    pyllm_qwen35_seq)."""
    return [(p, st.snapshot_buffer()) for p in st.snap_points(n)]
