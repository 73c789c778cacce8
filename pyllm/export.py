"""`harness models export --format course MODEL OUT`: a model written in the OS course's asset
format (pyllm/loaders/course_assets.py), so the lab's runtime and ours read the same files.

    export_course("smol", Path("smol.zip"))        # smol.zip holding SMOL/CFG.BIN, ...
    export_course("qwen", Path("out/QWEN"))        # a folder instead of a zip

MODEL is a short name or a path: a SmolLM GGUF, a Qwen3.5 HF checkpoint folder, or course assets
(re-written as they are: re-chunked, zip <-> folder, another runtime_seq_len).

* Every matrix becomes a qmat: int8 rows, scale = max |row| / 127 (`qmat.quantize_rows`).
* SmolLM: the GGUF stores Q/K rows permuted for interleaved RoPE; they go back to HF order,
  because the course's ROP.BIN rotates halves (pyllm/models/course_model.py explains both).
* Qwen3.5: the 1 of its (1 + w) norms is folded into the stored weights (input, post, final,
  q and k norms; not the DeltaNet output norm), the conv taps stored channel by channel.
* ROP.BIN: cos | sin of pos * theta^(-2i/rotary_dim), float64 math, runtime_seq_len rows.
* PMT.BIN: the reference prompt (default: "The capital of France is" tokenised, else the
  course's prompt.txt ids that fit the vocabulary); EXP.BIN: the greedy continuation our
  engine computes on the exported int8 weights, read back through the loader (so every file
  passes the loader's checks before the output appears).
* INFO.TXT: how the assets were made, as key=value lines (the loader reads bos_id, eos_ids
  and synthetic back).
* Files larger than `chunk_size` become directories of numbered chunks (00000, 00001, ...).
  The default, 64 MiB, stays under the largest file of our guest file system (kernel_c/fs.h:
  MAXFILE x BSIZE = 64.3 MiB).

The output appears atomically (written under a temporary name, then renamed).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyllm.errors import PyllmError, UnsupportedArchitectureError

if TYPE_CHECKING:  # numpy is imported where it is used: `harness models --help` stays quick
    import numpy as np

    from pyllm.loaders.course_writer import AssetWriter

COURSE_PROMPT = [1, 42, 314, 2718, 7, 99, 1234, 2048] * 4  # the lab's user/prompt.txt
REFERENCE_TEXT = "The capital of France is"
DEFAULT_CHUNK = 64 << 20
DEFAULT_SEQ = 256  # the course's runtime_seq_len (legacy default)
SLAB_ROWS = 16384  # rows of a big matrix converted to float32 at a time


# ---------------------------------------------------------------- sources

@dataclass
class Source:
    """A model to export, in the course's terms: its config, layer kinds, and functions that
    give each blob's items as float32 arrays (or ready (scale, q) pairs)."""

    name: str
    path: Path
    description: str  # "gguf Q4_1", "hf bf16", "course assets"
    cfg: Any  # CourseConfig (runtime_seq_len still the source's context)
    kinds: list[int]
    layer: Callable[[int], dict[str, Any]]
    embedding_rows: Callable[[int, int], np.ndarray | tuple[np.ndarray, np.ndarray]]
    final_norm: Callable[[], np.ndarray]
    theta: float
    tokenizer: Callable[[], Any]
    bos: int | None = None
    eos: tuple[int, ...] = ()
    synthetic: bool = False
    prompt: list[int] | None = None  # a course source's PMT.BIN
    keep: list[Any] = field(default_factory=list)


def _gguf_source(name: str, path: Path, synthetic: bool) -> Source:
    import numpy as np

    from pyllm.loaders.course_config import KIND_SMOL, CourseConfig
    from pyllm.loaders.gguf import file_type_name, open_gguf, tensor_array
    from pyllm.models.course_model import to_rotate_half
    from pyllm.models.llama import LlamaConfig, tokenizer_from_gguf
    from pyllm.quants import dequantize

    F32 = np.float32

    ck = open_gguf(path)
    lc = LlamaConfig.from_gguf(ck.metadata, str(path))
    if "output.weight" in ck.tensors:
        raise UnsupportedArchitectureError(
            f"{path}: the course format ties the LM head to the embedding (EMB.BIN), but this "
            "file has a separate output.weight")

    def f32(tname: str) -> np.ndarray:
        t = tensor_array(ck, tname)
        return dequantize(t.type, t.raw, t.shape)

    q_perm = to_rotate_half(lc.n_heads, lc.head_dim)
    k_perm = to_rotate_half(lc.n_kv_heads, lc.head_dim)

    def layer(i: int) -> dict[str, Any]:
        p = f"blk.{i}."
        return {"input_norm": f32(p + "attn_norm.weight"), "post_norm": f32(p + "ffn_norm.weight"),
                "q_proj": f32(p + "attn_q.weight")[q_perm],
                "k_proj": f32(p + "attn_k.weight")[k_perm], "v_proj": f32(p + "attn_v.weight"),
                "o_proj": f32(p + "attn_output.weight"), "gate_proj": f32(p + "ffn_gate.weight"),
                "up_proj": f32(p + "ffn_up.weight"), "down_proj": f32(p + "ffn_down.weight")}

    emb: list[np.ndarray] = []

    def emb_rows(r0: int, r1: int) -> np.ndarray:
        if not emb:
            emb.append(f32("token_embd.weight"))
        return emb[0][r0:r1]

    cfg = CourseConfig(KIND_SMOL, 0, lc.dim, lc.hidden, lc.n_layers, lc.n_heads, lc.n_kv_heads,
                       lc.head_dim, lc.vocab_size, lc.max_context, lc.max_context,
                       float(F32(lc.norm_eps)), lc.rope_theta, lc.head_dim)
    meta = ck.metadata
    bos, eos = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
    return Source(name, path, f"GGUF {file_type_name(ck)}", cfg, [0] * lc.n_layers, layer,
                  emb_rows, lambda: f32("output_norm.weight"), lc.rope_theta,
                  lambda: tokenizer_from_gguf(path, ck),
                  int(bos) if bos is not None else None,
                  (int(eos),) if eos is not None else (), synthetic, keep=[ck])


def _hf_source(name: str, path: Path, synthetic: bool) -> Source:
    import numpy as np

    from pyllm.backend.tensors import raw_f32, tensor_f32
    from pyllm.loaders.safetensors import open_safetensors
    from pyllm.models.qwen35 import tokenizer_from_hf
    from pyllm.models.qwen35_config import Qwen35Config, check_architecture
    from pyllm.models.qwen35_weights import check_tensors

    F32 = np.float32
    ckpt = open_safetensors(path)
    where = str(path / "config.json")
    check_architecture(ckpt.metadata, where)
    qc = Qwen35Config.from_hf(ckpt.metadata, where)
    prefix = check_tensors(ckpt, qc)
    if not qc.tie_embeddings:
        raise UnsupportedArchitectureError(
            f"{path}: the course format ties the LM head to the embedding (EMB.BIN), but this "
            "checkpoint has a separate lm_head")
    one = F32(1)

    def f32(suffix: str) -> np.ndarray:
        return np.asarray(tensor_f32(ckpt.tensors[prefix + suffix]), F32)

    def fold(suffix: str) -> np.ndarray:  # (1 + w) norms are stored with the 1 added
        return (one + f32(suffix)).astype(F32)

    def layer(i: int) -> dict[str, Any]:
        return _hf_layer(qc.layer_types[i], f"layers.{i}.", f32, fold)

    emb_t = ckpt.tensors[prefix + "embed_tokens.weight"]

    def emb_rows(r0: int, r1: int) -> np.ndarray:
        return raw_f32(emb_t.type, np.asarray(emb_t.raw)[r0:r1])

    cfg, kinds = _hf_course_config(qc)
    synthetic = synthetic or bool(ckpt.metadata.get("pyllm_synthetic"))
    dtype = emb_t.type.lower()
    return Source(name, path, f"HF {dtype}", cfg, kinds, layer, emb_rows,
                  lambda: fold("norm.weight"), qc.rope_theta,
                  lambda: tokenizer_from_hf(path), None, qc.eos_ids, synthetic, keep=[ckpt])


def _hf_layer(kind: str, p: str, f32: Callable[[str], np.ndarray],
              fold: Callable[[str], np.ndarray]) -> dict[str, Any]:
    """One Qwen3.5 layer's items under the course's names; `p` is the layer's tensor-name
    prefix, `f32` reads a tensor, `fold` a (1 + w) norm with the 1 added."""
    from pyllm.models.qwen35_config import LINEAR

    d = {"input_norm": fold(p + "input_layernorm.weight"),
         "post_norm": fold(p + "post_attention_layernorm.weight"),
         "gate_proj": f32(p + "mlp.gate_proj.weight"), "up_proj": f32(p + "mlp.up_proj.weight"),
         "down_proj": f32(p + "mlp.down_proj.weight")}
    if kind == LINEAR:
        a = p + "linear_attn."
        d.update(conv_weight=f32(a + "conv1d.weight")[:, 0, :], dt_bias=f32(a + "dt_bias"),
                 a_log=f32(a + "A_log"), norm=f32(a + "norm.weight"),
                 qkv_proj=f32(a + "in_proj_qkv.weight"), z_proj=f32(a + "in_proj_z.weight"),
                 a_proj=f32(a + "in_proj_a.weight"), b_proj=f32(a + "in_proj_b.weight"),
                 out_proj=f32(a + "out_proj.weight"))
    else:
        a = p + "self_attn."
        d.update(q_norm=fold(a + "q_norm.weight"), k_norm=fold(a + "k_norm.weight"),
                 q_proj=f32(a + "q_proj.weight"), k_proj=f32(a + "k_proj.weight"),
                 v_proj=f32(a + "v_proj.weight"), o_proj=f32(a + "o_proj.weight"))
    return d


def _hf_course_config(qc: Any) -> tuple[Any, list[int]]:
    """The CourseConfig of a Qwen35Config (context: its trained one), and its layer kinds."""
    import numpy as np

    from pyllm.loaders.course_blobs import LAYER_FULL, LAYER_LINEAR
    from pyllm.loaders.course_config import (
        FLAG_ATTN_GATE,
        FLAG_QK_NORM,
        KIND_QWEN,
        CourseConfig,
    )
    from pyllm.models.qwen35_config import LINEAR

    cfg = CourseConfig(KIND_QWEN, FLAG_ATTN_GATE | FLAG_QK_NORM, qc.hidden_size,
                       qc.intermediate_size, qc.n_layers, qc.n_heads, qc.n_kv_heads, qc.head_dim,
                       qc.vocab_size, qc.max_position, qc.max_position,
                       float(np.float32(qc.rms_eps)), qc.rope_theta, qc.rotary_dim,
                       qc.lin_k_heads, qc.lin_v_heads, qc.lin_k_dim, qc.lin_v_dim,
                       qc.conv_kernel)
    kinds = [LAYER_LINEAR if t == LINEAR else LAYER_FULL for t in qc.layer_types]
    return cfg, kinds


def _course_source(name: str, path: Path, synthetic: bool) -> Source:
    from pyllm.loaders.course_assets import open_course

    a = open_course(path)
    info = a.info
    synthetic = synthetic or info.get("synthetic", "0") not in ("0", "", "no", "false")
    cfg = replace(a.cfg, seq_len=max(a.cfg.seq_len, a.cfg.runtime_seq_len))

    def tokenizer() -> Any:
        from pyllm.models.course_model import tokenizer_from_course

        return tokenizer_from_course(path)

    def ids(key: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in info.get(key, "").split())
        except ValueError:
            return ()

    bos = ids("bos_id")
    return Source(name, path, "course assets", cfg, a.kinds, lambda i: a.layers[i],
                  lambda r0, r1: (a.emb[0][r0:r1], a.emb[1][r0:r1]), lambda: a.norm, a.theta,
                  tokenizer, bos[0] if bos else None, ids("eos_ids"), synthetic, a.prompt,
                  keep=[a])


def open_source(model: str) -> Source:
    """The model to export (a short name or a path), read through the registry's resolution."""
    from pyllm.registry import detect, is_synthetic, resolve

    name, path = resolve(model)
    fmt, arch = detect(path)
    synthetic = is_synthetic(path)
    if fmt == "gguf" and arch == "llama":
        return _gguf_source(name, path, synthetic)
    if fmt == "hf" and arch in ("qwen3_5", "qwen3_5_text"):
        return _hf_source(name, path, synthetic)
    if fmt == "course":
        return _course_source(name, path, synthetic)
    raise UnsupportedArchitectureError(
        f"{path}: cannot export '{arch}' ({fmt}) to the course format (it holds SmolLM-style "
        "Llama GGUF files, Qwen3.5 HF checkpoints and course assets)")


# ---------------------------------------------------------------- the export

@dataclass
class ExportResult:
    out: Path
    cfg: Any  # the CourseConfig written
    files: dict[str, int]  # name -> bytes
    chunked: dict[str, int]  # name -> number of chunks
    prompt: list[int]
    prompt_from: str
    expected: list[int]
    exp_backend: str
    seconds: float
    synthetic: bool


def default_prompt(src: Source, vocab: int) -> tuple[list[int], str]:
    """The reference prompt: the source's own PMT.BIN, else the tokenised reference
    sentence, else the course's prompt.txt ids below the vocabulary size."""
    if src.prompt:
        return list(src.prompt), "PMT.BIN of the source"
    try:
        ids = src.tokenizer().encode(REFERENCE_TEXT)
        if ids and max(ids) < vocab:
            return ids, f"'{REFERENCE_TEXT}' tokenised"
    except PyllmError:
        pass
    ids = [i for i in COURSE_PROMPT if i < vocab]
    return ids, "the course's prompt.txt ids" + (" below the vocabulary size"
                                                  if len(ids) < len(COURSE_PROMPT) else "")


def planned_bytes(cfg: Any, kinds: list[int]) -> int:
    """Bytes the export writes (for the progress bar)."""
    from pyllm.loaders.course_blobs import blob_bytes, emb_layout, layer_layout

    return (blob_bytes(emb_layout(cfg)) + 4 * cfg.dim + sum(blob_bytes(layer_layout(cfg, k))
                                                           for k in kinds)
            + 4 * cfg.runtime_seq_len * cfg.rope_rotary_dim + 4 * (len(kinds) + 1) + 84)


def _qmat_pieces(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """A float matrix -> (scale, q); an existing (scale, q) passes unchanged."""
    import numpy as np

    from pyllm.kernels.qmat import quantize_rows

    if isinstance(x, tuple):
        return np.asarray(x[0], np.float32), np.asarray(x[1], np.int8)
    return quantize_rows(x)


def _layer_items(d: dict[str, Any], layout: Any) -> dict[str, Any]:
    import numpy as np

    return {n: (_qmat_pieces(d[n]) if k == "qmat" else np.asarray(d[n], np.float32))
            for n, k, _ in layout}


def export_course(model: str, out: Path, *, seq_len: int = DEFAULT_SEQ,
                  chunk_size: int = DEFAULT_CHUNK, cfg_version: int = 2,
                  prompt: list[int] | None = None, prompt_text: str | None = None,
                  n_expect: int = 8, backend: str = "auto", compress: bool = False,
                  force: bool = False, progress: Callable[[int], Any] | None = None,
                  plan: Callable[[int], Any] | None = None,
                  log: Callable[[str], Any] = lambda m: None) -> ExportResult:
    """Write `model` as course assets at `out` (a .zip holding <SMOL|QWEN>/..., or a folder).

    seq_len: runtime_seq_len (rows of ROP.BIN, the course's context limit); cfg_version: 2, 1
    (plain SmolLM only) or 0 (no CFG.BIN: only for exactly the legacy SmolLM2-135M config);
    prompt / prompt_text: PMT.BIN; n_expect: EXP.BIN's length (0 = no EXP.BIN); backend:
    the engine backend that computes EXP.BIN; plan(total_bytes) is called once before the
    writing starts, progress(n_bytes) as it goes.
    """
    from pyllm.loaders.course_config import FOLDERS
    from pyllm.loaders.course_writer import AssetWriter

    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and not force:
        raise PyllmError(f"{out} already exists (use --force to replace it)")
    src = open_source(model)
    cfg = _export_config(src, out, seq_len, cfg_version)
    prompt, prompt_from = _reference_prompt(src, cfg, prompt, prompt_text, n_expect)
    if plan is not None:
        plan(planned_bytes(cfg, src.kinds) + 4 * (len(prompt) + n_expect + 2))
    w = AssetWriter(out, FOLDERS[cfg.model_kind] if out.suffix.lower() == ".zip" else "",
                    chunk_size, compress, progress)
    try:
        expected, exp_backend = _write_assets(w, src, cfg, prompt, prompt_from, n_expect,
                                              backend, chunk_size, log)
        w.commit()
    except BaseException:
        w.abort()
        raise
    finally:
        for k in src.keep:
            if hasattr(k, "close"):
                k.close()
    return ExportResult(out, cfg, dict(w.written), dict(w.chunked), prompt, prompt_from,
                        expected, exp_backend, time.perf_counter() - t0, src.synthetic)


def _export_config(src: Source, out: Path, seq_len: int, cfg_version: int) -> Any:
    """The CourseConfig to write: the source's, with runtime_seq_len = seq_len, checked
    against what CFG.BIN `cfg_version` can describe."""
    from pyllm.loaders.course_config import KIND_SMOL, CourseConfig

    if seq_len < 1:
        raise PyllmError(f"--seq-len must be at least 1, got {seq_len}")
    cfg = replace(src.cfg, runtime_seq_len=seq_len, seq_len=max(src.cfg.seq_len, seq_len),
                  version=cfg_version)
    cfg.validate(str(out))
    if cfg_version == 0 and replace(cfg, version=0, seq_len=2048) != CourseConfig.legacy():
        raise PyllmError("--cfg-version none (no CFG.BIN) only fits the legacy SmolLM2-135M "
                         "config (576/1536/30 layers/9 heads/3 kv/49152 vocab, runtime "
                         "seq 256, seq 2048): this model differs")
    if cfg_version == 1 and (cfg.model_kind != KIND_SMOL):
        raise PyllmError("CFG.BIN v1 only describes SmolLM models: use --cfg-version 2")
    return cfg


def _reference_prompt(src: Source, cfg: Any, prompt: list[int] | None,
                      prompt_text: str | None, n_expect: int) -> tuple[list[int], str]:
    """PMT.BIN's ids and where they came from; checked to fit with EXP.BIN's n_expect ids."""
    vocab, seq_len = cfg.vocab_size, cfg.runtime_seq_len
    if prompt_text is not None:
        prompt, prompt_from = src.tokenizer().encode(prompt_text), f"'{prompt_text}' tokenised"
    elif prompt is not None:
        prompt_from = "given ids"
    else:
        prompt, prompt_from = default_prompt(src, vocab)
    if not prompt or len(prompt) > 255 or max(prompt) >= vocab or min(prompt) < 0:
        raise PyllmError(f"the reference prompt needs 1..255 ids below {vocab}; got "
                         f"{len(prompt)} ids" + (f" up to {max(prompt)}" if prompt else ""))
    if not 0 <= n_expect <= 255 or len(prompt) + n_expect > seq_len:
        raise PyllmError(f"EXP.BIN of {n_expect} tokens after a {len(prompt)}-token prompt does "
                         f"not fit runtime_seq_len {seq_len} (and must be 0..255 tokens)")
    return prompt, prompt_from


def _write_assets(w: AssetWriter, src: Source, cfg: Any, prompt: list[int], prompt_from: str,
                  n_expect: int, backend: str, chunk_size: int,
                  log: Callable[[str], Any]) -> tuple[list[int], str]:
    """Every file into the AssetWriter `w` (not committed); EXP.BIN is computed on the files
    already written. Returns EXP.BIN's ids and the backend that computed them."""
    import numpy as np

    from pyllm import kernels
    from pyllm.loaders.course_blobs import (
        LAYER_LINEAR,
        layer_layout,
        layer_name,
        pack_blob,
        rope_table,
        u32_list,
    )
    from pyllm.loaders.course_config import KIND_SMOL, pack_cfg

    if cfg.version:
        w.add("CFG.BIN", [pack_cfg(cfg, cfg.version)])
    if cfg.model_kind != KIND_SMOL or LAYER_LINEAR in src.kinds:
        w.add("LTY.BIN", [u32_list(src.kinds)])
    log(f"quantizing {cfg.n_layers} layers and the embedding to per-row int8")
    w.add("EMB.BIN", _emb_pieces(src, cfg))
    w.add("NRM.BIN", [np.asarray(src.final_norm(), "<f4")])
    for i, kind in enumerate(src.kinds):
        layout = layer_layout(cfg, kind)
        w.add(layer_name(i), pack_blob(_layer_items(src.layer(i), layout), layout))
    w.add("ROP.BIN", [rope_table(src.theta, cfg.rope_rotary_dim, cfg.runtime_seq_len)])
    w.add("PMT.BIN", [u32_list(prompt)])
    expected: list[int] = []
    exp_backend = "-"
    w.close_files()
    if n_expect:
        log(f"computing EXP.BIN: {n_expect} greedy tokens on the exported weights")
        expected, exp_backend = greedy_ids(w.asset_path, cfg.model_kind, prompt, n_expect,
                                           backend)
        w.reopen()
        w.add("EXP.BIN", [u32_list(expected)])
    else:
        w.reopen()
    info = info_text(src, cfg, prompt, prompt_from, expected, exp_backend, chunk_size,
                     kernels.backend_name())
    w.add("INFO.TXT", [info.encode()])
    return expected, exp_backend


def _emb_pieces(src: Source, cfg: Any) -> list[np.ndarray]:
    """EMB.BIN: all row scales, then all int8 rows, quantized SLAB_ROWS rows at a time."""
    import numpy as np

    scales, qs = [], []
    for r0 in range(0, cfg.vocab_size, SLAB_ROWS):
        s, q = _qmat_pieces(src.embedding_rows(r0, min(cfg.vocab_size, r0 + SLAB_ROWS)))
        scales.append(s)
        qs.append(np.ascontiguousarray(q))
    return [np.concatenate(scales).astype("<f4"), *qs]


def greedy_ids(asset: Path, kind: int, prompt: list[int], n: int,
               backend: str = "auto") -> tuple[list[int], str]:
    """The greedy continuation (no EOS stop, exactly n ids) of `prompt` by our engine on the
    assets at `asset`, and the backend that ran it."""
    from pyllm.engine import Engine
    from pyllm.models.course_model import from_course
    from pyllm.request import GenParams

    model = from_course(asset, name="export", expect=kind, backend=backend)
    try:
        with Engine(model) as engine:
            req = engine.run(prompt, GenParams(max_new_tokens=n, stop_ids=()))
        return list(req.tokens), model.info.backend
    finally:
        model.close()


def info_text(src: Source, cfg: Any, prompt: list[int], prompt_from: str,
              expected: list[int], exp_backend: str, chunk_size: int, kernels: str) -> str:
    from pyllm.loaders.course_config import kind_name

    lines = [
        "Course model assets written by nexai (`harness models export --format course`).",
        "Format: course_lab.md section 3; INFO.TXT is not read by the course runtime.",
        "",
        f"model={src.name}",
        f"kind={cfg.model_kind} ({kind_name(cfg.model_kind)})",
        f"source={src.path} ({src.description})",
        f"synthetic={int(src.synthetic)}",
        "quantization=qmat: per-row int8, scale = max|row|/127, round half to even",
        f"cfg_version={cfg.version or 'none (legacy defaults)'}",
        f"dims=dim {cfg.dim}, hidden {cfg.hidden_dim}, layers {cfg.n_layers}, heads "
        f"{cfg.n_heads}/{cfg.n_kv_heads}, head_dim {cfg.head_dim}, vocab {cfg.vocab_size}",
        f"runtime_seq_len={cfg.runtime_seq_len}",
        f"rope=theta {src.theta:g} over {cfg.rope_rotary_dim} dims, rotate-half pairs",
        f"chunk_size={chunk_size or 'off'}",
        f"bos_id={src.bos if src.bos is not None else ''}",
        f"eos_ids={' '.join(map(str, src.eos))}",
        f"prompt={' '.join(map(str, prompt))}",
        f"prompt_from={prompt_from}",
        f"expected={' '.join(map(str, expected))}",
        f"expected_by=pyllm engine, backend {exp_backend}, greedy, no EOS stop",
        f"host={platform.machine()} {kernels}",
        f"exported={time.strftime('%Y-%m-%d %H:%M:%S')}",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- command line
