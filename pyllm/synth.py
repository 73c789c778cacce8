"""Synthetic full-size Qwen3.5-0.8B: the real checkpoint's layout filled with seeded random
weights, for measuring load time, TTFT, TPOT and memory at true size.

The real weights cannot be downloaded on the course machines. `harness models synth qwen`
writes `models/qwen3.5-0.8b-synthetic/`:

  config.json        the published Qwen3.5-0.8B config (multimodal `qwen3_5`, text_config,
                     vision_config), its model id (`_name_or_path`, the display name) and a
                     "pyllm_synthetic" entry saying how it was made
  model.safetensors  every text-decoder tensor (model.language_model.*, 752,393,024 params)
                     and the vision tower (model.visual.*, 100,592,896 params), bf16, with
                     the real names and shapes; `__metadata__` has pyllm_synthetic=true
  SYNTHETIC          a marker file: the registry reports these weights as synthetic

The multi-token-prediction head (mtp.*, ~20M params) is left out: its exact shapes are not
published where we could check them, and no loader reads it.

Values: matrices N(0, 0.02^2) (the transformers init), (1+w) norm weights N(0, 0.02^2),
gated-norm weights 1, dt_bias 1, A_log = log U(1, 16), conv taps N(0, 0.2^2). Each tensor has
its own stream seeded by (seed, name), so the file is identical for the same seed. The text it
generates is meaningless; every report labels it "synthetic weights".
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pyllm.errors import PyllmError
from pyllm.loaders.safetensors import SafetensorsWriter, f32_to_bf16

SYNTH_DIR = "qwen3.5-0.8b-synthetic"  # the registry's candidate name for the synthetic model
MODEL_ID = "Qwen/Qwen3.5-0.8B"  # the model these weights imitate (config.json's _name_or_path)
N_TEXT_PARAMS = 752_393_024
N_VISION_PARAMS = 100_592_896

# The published Qwen3.5-0.8B config.json (facts from the model card and public copies).
TEXT_CONFIG = {
    "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 1024,
    "intermediate_size": 3584, "num_hidden_layers": 24, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 256, "hidden_act": "silu", "attention_bias": False,
    "attn_output_gate": True, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "tie_word_embeddings": True,
    "eos_token_id": 248044, "mtp_num_hidden_layers": 1, "dtype": "bfloat16",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                        "mrope_interleaved": True},
}
VISION_CONFIG = {
    "model_type": "qwen3_5_vision", "depth": 12, "hidden_size": 768, "intermediate_size": 3072,
    "num_heads": 12, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2,
    "spatial_merge_size": 2, "num_position_embeddings": 2304, "out_hidden_size": 1024,
    "hidden_act": "gelu_pytorch_tanh",
}
CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
    "vision_end_token_id": 248054, "tie_word_embeddings": True,
    "text_config": TEXT_CONFIG, "vision_config": VISION_CONFIG,
}


def tensor_specs() -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor, in the order they are written."""
    from pyllm.models.qwen35_config import Qwen35Config
    from pyllm.models.qwen35_weights import tensor_table

    cfg = Qwen35Config.from_hf(CONFIG)
    specs = [("model.language_model." + k, v) for k, v in tensor_table(cfg).items()]
    v = VISION_CONFIG
    d, f, t, p = v["hidden_size"], v["intermediate_size"], v["temporal_patch_size"], \
        v["patch_size"]
    merged = d * v["spatial_merge_size"] ** 2
    vis: list[tuple[str, tuple[int, ...]]] = [
        ("patch_embed.proj.weight", (d, v["in_channels"], t, p, p)),
        ("patch_embed.proj.bias", (d,)),
        ("pos_embed.weight", (v["num_position_embeddings"], d))]
    for i in range(v["depth"]):
        b = f"blocks.{i}."
        vis += [(b + "norm1.weight", (d,)), (b + "norm1.bias", (d,)),
                (b + "norm2.weight", (d,)), (b + "norm2.bias", (d,)),
                (b + "attn.qkv.weight", (3 * d, d)), (b + "attn.qkv.bias", (3 * d,)),
                (b + "attn.proj.weight", (d, d)), (b + "attn.proj.bias", (d,)),
                (b + "mlp.linear_fc1.weight", (f, d)), (b + "mlp.linear_fc1.bias", (f,)),
                (b + "mlp.linear_fc2.weight", (d, f)), (b + "mlp.linear_fc2.bias", (d,))]
    vis += [("merger.norm.weight", (d,)), ("merger.norm.bias", (d,)),
            ("merger.linear_fc1.weight", (merged, merged)), ("merger.linear_fc1.bias", (merged,)),
            ("merger.linear_fc2.weight", (v["out_hidden_size"], merged)),
            ("merger.linear_fc2.bias", (v["out_hidden_size"],))]
    specs += [("model.visual." + k, s) for k, s in vis]
    n_text = sum(int(np.prod(s)) for n, s in specs if n.startswith("model.language_model."))
    n_vis = sum(int(np.prod(s)) for n, s in specs if n.startswith("model.visual."))
    assert (n_text, n_vis) == (N_TEXT_PARAMS, N_VISION_PARAMS), (n_text, n_vis)
    return specs


def random_tensor(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Seeded random values for one tensor, as bf16 bits (uint16)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    n = int(np.prod(shape))
    if name.endswith("A_log"):
        x = np.log(rng.uniform(1.0, 16.0, n)).astype(np.float32)
    elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
        x = np.ones(n, np.float32)
    elif "conv1d" in name:
        x = rng.standard_normal(n, dtype=np.float32) * np.float32(0.2)
    elif name.endswith(".bias") or (name.startswith("model.visual") and "norm" in name):
        x = np.zeros(n, np.float32) if name.endswith(".bias") else np.ones(n, np.float32)
    else:  # matrices, embeddings and (1+w) norm weights
        x = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
    return f32_to_bf16(x).reshape(shape)


def synth_qwen(models_dir: Path, *, seed: int = 0, force: bool = False,
               progress: Callable[[int], None] | None = None) -> Path:
    """Write the synthetic checkpoint into models_dir/SYNTH_DIR; returns its path.

    `progress(nbytes)` is called as tensor data is written. The folder appears only when
    complete (written as *.partial, then renamed), so an interrupted run leaves nothing
    half-installed.
    """
    out = Path(models_dir) / SYNTH_DIR
    if out.exists() and not force:
        raise PyllmError(f"{out} already exists (use --force to write it again)")
    specs = tensor_specs()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    note = (f"synthetic weights: seeded random values (seed {seed}) in the exact shapes, names "
            "and dtype (bf16) of Qwen3.5-0.8B, written by pyllm.synth; not a trained model")
    # `_name_or_path` is where HF's save_pretrained records the model id: the display name
    conf = dict(CONFIG, _name_or_path=MODEL_ID,
                pyllm_synthetic={"seed": seed, "generator": "pyllm.synth", "note": note})
    (tmp / "config.json").write_text(json.dumps(conf, indent=2) + "\n")
    (tmp / "SYNTHETIC").write_text(note + "\n")
    meta = {"format": "pt", "pyllm_synthetic": "true", "seed": str(seed)}
    with SafetensorsWriter(tmp / "model.safetensors",
                           [(n, "BF16", s) for n, s in specs], meta) as w:
        for name, shape in specs:
            arr = random_tensor(name, shape, seed)
            w.write(name, arr)
            if progress is not None:
                progress(arr.nbytes)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def total_bytes() -> int:
    """Bytes of tensor data synth_qwen writes (for a progress bar's total)."""
    return sum(2 * int(np.prod(s)) for _, s in tensor_specs())
