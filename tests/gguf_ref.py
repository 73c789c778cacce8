"""Set-up of the llama.cpp comparisons (tests/test_gguf_llamacpp.py): tiny random Qwen3.5
checkpoints made by transformers, converted by llama.cpp's converter (from the
llama-cpp-python sdist) and quantized by llama.cpp; SmolLM2 quantized by llama.cpp. All of
it is cached under build/gguf-ref/ (keyed by RECIPE), so only the first run pays.

The tiny models have widths of 256 (every matrix input a whole K-quant super-block, so
Q4_K_M really holds Q4_K and Q6_K tensors) and Hv = 2 Hk DeltaNet heads (the converter's
V-head reorder is exercised): a text-only Qwen3_5ForCausalLM and a multimodal-named
Qwen3_5ForConditionalGeneration (model.language_model.* plus a vision tower).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "gguf-ref"
RECIPE = "v1"
SEED = 20261206
PROMPT_LEN = 48


def cache_dir() -> Path:
    d = CACHE / RECIPE
    d.mkdir(parents=True, exist_ok=True)
    return d


def _text_config(layer_types: list[str]) -> object:
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=512,
        num_hidden_layers=len(layer_types), layer_types=layer_types,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
        eos_token_id=1,
        # 64-dim heads * 0.25 = 16 rotary dims = 8 frequencies = sum(mrope_section)
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 3, 2], "mrope_interleaved": True})


def _perturb(model: object, seed: int) -> None:
    """Every parameter away from its init (norms init to 0/1 would hide a (1+w) slip)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # type: ignore[attr-defined]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim == 1:
                p.add_(0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.15 * noise)
            else:
                p.copy_(noise * (0.6 / np.sqrt(int(np.prod(p.shape[1:])))))


def checkpoint(kind: str) -> tuple[Path, np.ndarray, np.ndarray]:
    """(folder, prompt ids, transformers' logits of every prompt position) of the tiny
    "text" or "mm" checkpoint, built once."""
    import torch

    folder = cache_dir() / f"tiny_{kind}"
    ref = folder / "ref.npz"
    if not ref.exists():
        from transformers import (
            AutoModelForCausalLM,
            Qwen3_5Config,
            Qwen3_5ForCausalLM,
            Qwen3_5ForConditionalGeneration,
        )

        torch.manual_seed(SEED)
        layers = ["linear_attention"] * 3 + ["full_attention"]
        if kind == "text":
            model = Qwen3_5ForCausalLM(_text_config(layers))
        else:
            vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                          out_hidden_size=256, num_position_embeddings=64, patch_size=4,
                          temporal_patch_size=2, spatial_merge_size=2)
            model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(
                text_config=_text_config(layers).to_dict(), vision_config=vision,
                tie_word_embeddings=True))
        _perturb(model.eval(), SEED + len(kind))
        model.save_pretrained(folder)
        (folder / "generation_config.json").unlink(missing_ok=True)
        ids = np.random.default_rng(SEED).integers(2, 1024, PROMPT_LEN)
        causal = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = causal(torch.tensor(ids[None, :])).logits[0].float().numpy()
        np.savez(ref, ids=ids.astype(np.int32), logits=logits)
    with np.load(ref) as z:
        return folder, z["ids"], z["logits"]


def qwen_gguf(kind: str, qtype: str) -> Path:
    """The tiny checkpoint converted to F32 by llama.cpp's converter, then quantized by
    llama.cpp to `qtype` (or left F32)."""
    from pyllm.gguf_tools.convert import convert, quantize

    folder, _, _ = checkpoint(kind)
    f32 = cache_dir() / f"tiny_{kind}.F32.gguf"
    if not f32.exists():
        convert(folder, f32, "f32")
    if qtype == "F32":
        return f32
    out = cache_dir() / f"tiny_{kind}.{qtype}.gguf"
    if not out.exists():
        quantize(f32, out, qtype)
    return out


def smol_gguf(qtype: str, source: Path) -> Path:
    """SmolLM2 requantized by llama.cpp from its Q4_1 file to `qtype`."""
    from pyllm.gguf_tools.convert import quantize

    out = cache_dir() / f"smollm2.{qtype}.gguf"
    if not out.exists():
        quantize(source, out, qtype)
    return out


def llamacpp_ref(path: Path, prompt: np.ndarray, n_gen: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's greedy ids after `prompt` and its logits of every position (cached)."""
    from pyllm.gguf_tools.llamacpp import greedy_logits

    key = cache_dir() / f"{path.name}.{len(prompt)}.{n_gen}.llamacpp.npz"
    if not key.exists() or key.stat().st_mtime < path.stat().st_mtime:
        ids, logits = greedy_logits(path, [int(x) for x in prompt], n_gen)
        np.savez(key, ids=ids, logits=logits)
    with np.load(key) as z:
        return z["ids"], z["logits"]


def margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit of each row."""
    top = np.sort(logits, axis=-1)
    return top[:, -1] - top[:, -2]


def describe(path: Path) -> str:
    """The quant mix of a file, for assertion messages."""
    from collections import Counter

    from pyllm.loaders.gguf import open_gguf

    return json.dumps(Counter(t.type for t in open_gguf(path).tensors.values()))


def transformers_ref(path: Path, ids: np.ndarray) -> np.ndarray:
    """transformers' f32 logits of every position of `ids` on a GGUF file (its loader
    dequantizes with gguf-py, so this is the exact computation on the file's weights)."""
    key = cache_dir() / f"{path.name}.{len(ids)}.transformers.npz"
    if not key.exists() or key.stat().st_mtime < path.stat().st_mtime:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging

        logging.disable_progress_bar()
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(torch.tensor(ids[None].astype(np.int64))).logits[0].float().numpy()
        np.savez(key, logits=logits)
    with np.load(key) as z:
        return z["logits"]
