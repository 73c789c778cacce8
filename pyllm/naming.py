"""A model's display name (ModelInfo.title): what its users call it.

Each format names its model somewhere: a GGUF file in `general.name`, an HF checkpoint in
config.json's `_name_or_path` (or, for our synthetic weights, the model they imitate), the
course's assets by their CFG.BIN model kind. A GGUF `general.name` that llama.cpp's converter
made itself, by title-casing the checkpoint folder's name (SmolLM2-135M-Instruct's file says
"Smollm2 135M 8k Lc100K Mix1 Ep2", a training run's folder), names nobody's model: then the
file's own name without its quantization (`SmolLM2-135M-Instruct.Q4_1.gguf` ->
"SmolLM2-135M-Instruct", what it was published as) when it names the same base model, else the
naming convention's basename-size_label-finetune. Only when the metadata says nothing is the name
taken from the file or folder, whole: `qwen3.5-0.8b-synthetic` keeps its dots (Path.stem would
cut it to `qwen3.5-0`), only a weights extension (.gguf, .safetensors, .zip) goes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".zip")
# a quantization label at the end of a GGUF file's stem: .Q4_1, -Q4_K_M, .IQ2_XS, -f16, .bf16
QUANT_SUFFIX = re.compile(r"[.-](?:I?Q\d\w*|[BF]F?16|F32)$", re.IGNORECASE)


def from_file(path: str | os.PathLike[str]) -> str:
    """The last resort: the file or folder name without a weights extension."""
    name = Path(path).name
    for ext in WEIGHT_SUFFIXES:
        if name.lower().endswith(ext) and len(name) > len(ext):
            return name[:-len(ext)]
    return name


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s_-]+", text.lower()) if w]


def from_gguf(meta: Mapping[str, Any], path: str | os.PathLike[str]) -> str:
    """`general.name` unless the converter made it (see the module docstring), else the
    file's name without its quantization, else basename-size_label-finetune."""
    name = str(meta.get("general.name") or "").strip()
    parts = [str(meta.get(k) or "").strip()
             for k in ("general.basename", "general.size_label", "general.finetune")]
    conventional = "-".join(p for p in parts if p) if parts[0] else ""
    if name and (not conventional or _words(name) != _words(conventional)):
        return name
    stem = QUANT_SUFFIX.sub("", from_file(path))
    if parts[0] and _words(parts[0])[0] in stem.lower():
        return stem
    return conventional or name or from_file(path)


def from_hf(conf: Mapping[str, Any], path: str | os.PathLike[str]) -> str:
    """The model id config.json was saved from (its last part: "Qwen/Qwen3.5-0.8B" ->
    "Qwen3.5-0.8B"), else the folder's name."""
    ident = str(conf.get("_name_or_path") or "").strip().rstrip("/")
    return ident.rsplit("/", 1)[-1] if ident else from_file(path)


def from_course(kind_name: str, folder: str, path: str | os.PathLike[str]) -> str:
    """Course assets name only their model kind (CFG.BIN): "SmolLM course assets (SMOL)"."""
    if kind_name == "unknown-model":
        return from_file(path)
    return f"{kind_name} course assets ({folder})" if folder else f"{kind_name} course assets"
