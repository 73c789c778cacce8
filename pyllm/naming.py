"""A model's display name (ModelInfo.title), from the model's own metadata.

Each format names its model somewhere: a GGUF file in `general.name`, an HF checkpoint in
config.json's `_name_or_path` (or, for our synthetic weights, the model they imitate), the
course's assets by their CFG.BIN model kind. Only when the metadata says nothing is the name
taken from the file or folder, whole: `qwen3.5-0.8b-synthetic` keeps its dots (Path.stem
would cut it to `qwen3.5-0`), only a weights extension (.gguf, .safetensors, .zip) goes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".zip")


def from_file(path: str | os.PathLike[str]) -> str:
    """The last resort: the file or folder name without a weights extension."""
    name = Path(path).name
    for ext in WEIGHT_SUFFIXES:
        if name.lower().endswith(ext) and len(name) > len(ext):
            return name[:-len(ext)]
    return name


def from_gguf(meta: Mapping[str, Any], path: str | os.PathLike[str]) -> str:
    """`general.name`, else the GGUF naming convention's basename-size_label-finetune."""
    name = str(meta.get("general.name") or "").strip()
    if name:
        return name
    parts = [str(meta.get(k) or "").strip()
             for k in ("general.basename", "general.size_label", "general.finetune")]
    return "-".join(p for p in parts if p) if parts[0] else from_file(path)


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
