#!/usr/bin/env python3
"""Build tiny random Qwen3.5 checkpoints with transformers and record their golden logits.

The default test suite compares pyllm's Qwen3.5 decoder against these files, so it
needs neither torch nor transformers. Run this script again only when the recipe
changes (it is deterministic for a given torch/transformers version):

    python scripts/gen_qwen_golden.py            # writes tests/data/qwen35/

Two checkpoints, both tiny but with every Qwen3.5 feature switched on:

  tiny_text/  Qwen3_5ForCausalLM, 4 layers (3 Gated DeltaNet + 1 full attention),
              fp32, sharded into several files with model.safetensors.index.json,
              linear_num_value_heads (4) > linear_num_key_heads (2).
  tiny_mm/    Qwen3_5ForConditionalGeneration (multimodal names model.language_model.*
              plus a small model.visual.* tower), 3 layers linear/full/linear, bf16,
              one file, with extra mtp.* tensors that a loader must ignore.

Every parameter is perturbed away from its init (norm weights init to 0 or 1 would
hide a wrong (1+w) convention). The prompts are 80 and 70 tokens, longer than one
64-token prefill chunk. golden.npz holds, per model: the ids, the full-forward logits
(T, V), the logits of transformers' own cached path (prefill then one token at a
time) and the hidden state after every layer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5TextConfig,
)

ROOT = Path(__file__).resolve().parent.parent
SEED = 20260305
PREFILL_SPLIT = 64  # cached path: prefill this many tokens, then decode one at a time


def text_config(layer_types: list[str], n_k_heads: int, n_v_heads: int) -> Qwen3_5TextConfig:
    """A tiny text config; every 0.8B-specific default is passed explicitly (the
    transformers defaults are the 9B/27B values)."""
    return Qwen3_5TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128,
        num_hidden_layers=len(layer_types), layer_types=layer_types,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=n_k_heads, linear_num_value_heads=n_v_heads,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
        eos_token_id=1,
        # 32-dim heads * 0.25 = 8 rotary dims = 4 frequencies = sum(mrope_section)
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    )


@torch.no_grad()
def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Move every parameter well away from its init so that no convention is hidden."""
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if p.ndim == 1:
            p.add_(0.3 * noise)                      # norms, A_log, dt_bias
        elif "embed_tokens" in name:
            p.copy_(0.25 * noise)                    # tied head: logits std ~ 0.25*sqrt(D) = 2
        else:
            fan_in = int(np.prod(p.shape[1:]))
            p.copy_(noise * (0.5 / np.sqrt(fan_in)))  # matrices, conv taps, vision


@torch.no_grad()
def record(model: torch.nn.Module, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Full-forward logits, cached-path logits and per-layer hidden states."""
    x = torch.tensor(ids[None, :], dtype=torch.long)
    out = model(x, output_hidden_states=True, use_cache=False)
    logits = out.logits[0].float().numpy()
    hidden = torch.stack(out.hidden_states)[:, 0].float().numpy()       # (L+1, T, D)
    pre = model(x[:, :PREFILL_SPLIT], use_cache=True)
    cache, steps = pre.past_key_values, [pre.logits[0].float()]
    for t in range(PREFILL_SPLIT, len(ids)):
        o = model(x[:, t:t + 1], cache=cache, use_cache=True)
        cache = o.past_key_values
        steps.append(o.logits[0].float())
    cached = torch.cat(steps).numpy()
    return {"ids": ids.astype(np.int32), "logits": logits, "logits_cached": cached,
            "hidden": hidden}


def build_text(out: Path, gen: torch.Generator, ids: np.ndarray) -> dict[str, np.ndarray]:
    """tiny_text: text-only names, fp32, sharded."""
    cfg = text_config(["linear_attention"] * 3 + ["full_attention"], n_k_heads=2, n_v_heads=4)
    model = Qwen3_5ForCausalLM(cfg).eval()
    perturb(model, gen)
    model.save_pretrained(out, max_shard_size="150KB")
    return record(AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), ids)


def build_mm(out: Path, gen: torch.Generator, ids: np.ndarray) -> dict[str, np.ndarray]:
    """tiny_mm: multimodal names, bf16, one file plus mtp.* tensors."""
    text = text_config(["linear_attention", "full_attention", "linear_attention"],
                       n_k_heads=2, n_v_heads=2)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  num_position_embeddings=64, patch_size=4, temporal_patch_size=2,
                  spatial_merge_size=2)
    cfg = Qwen3_5Config(text_config=text.to_dict(), vision_config=vision, tie_word_embeddings=True)
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    perturb(model, gen)
    model.to(torch.bfloat16).save_pretrained(out)
    # the real checkpoint carries a multi-token-prediction head; add a few such tensors
    path = out / "model.safetensors"
    tensors = load_file(path)
    d, v = 64, 512
    extra = {"mtp.fc.weight": (d, 2 * d), "mtp.norm.weight": (d,),
             "mtp.pre_fc_norm_embedding.weight": (d,), "mtp.pre_fc_norm_hidden.weight": (d,),
             "mtp.layers.0.mlp.gate_proj.weight": (128, d)}
    for name, shape in extra.items():
        tensors[name] = torch.randn(shape, generator=gen).to(torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})
    assert v == text.vocab_size
    # transformers' causal-LM class drops the language_model prefix and ignores mtp.*/visual.*
    causal = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    full = Qwen3_5ForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    rec = record(causal, ids)
    with torch.no_grad():
        mm_logits = full(torch.tensor(ids[None, :])).logits[0].float().numpy()
    assert np.abs(mm_logits - rec["logits"]).max() < 1e-5, "multimodal and causal classes disagree"
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "qwen35")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    golden: dict[str, np.ndarray] = {}
    for name, build, n in (("tiny_text", build_text, 80), ("tiny_mm", build_mm, 70)):
        folder = args.out / name
        for f in folder.glob("*"):
            f.unlink()
        ids = rng.integers(0, 512, size=n)
        rec = build(folder, gen, ids)
        (folder / "generation_config.json").unlink(missing_ok=True)
        for key, arr in rec.items():
            golden[f"{name}.{key}"] = arr
        d = np.abs(rec["logits"] - rec["logits_cached"]).max()
        print(f"{name}: {n} tokens, max |logit| {np.abs(rec['logits']).max():.2f}, "
              f"transformers full vs cached {d:.2e}")
    np.savez_compressed(args.out / "golden.npz", **golden)
    meta = {"seed": SEED, "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "prefill_split": PREFILL_SPLIT}
    (args.out / "golden.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
