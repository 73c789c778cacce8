"""Weight-file readers. Each returns a `Checkpoint`: metadata plus zero-copy tensor views.

A loader must provide a function `open_<format>(path) -> Checkpoint` that:

* reads the header only and maps the data (mmap), so opening costs milliseconds, not seconds;
* exposes every tensor as a `TensorRef` (name, type, shape in numpy order = outermost first,
  and `raw`: a read-only numpy view of the stored bytes/elements, never a copy);
* raises `pyllm.errors.FormatError` for a truncated or malformed file, naming the file and what is
  wrong ("... is truncated: tensor blk.3.ffn_up.weight ends at byte X, file has Y"), and
  `UnsupportedTensorTypeError` only when a tensor is actually requested in a type we cannot read.

`gguf.py` reads GGUF v2/v3 (SmolLM2); `safetensors.py` reads HF checkpoints (Qwen3.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass
class TensorRef:
    """One stored tensor. `shape` is numpy order (rows first): GGUF [in, out] is (out, in)."""

    name: str
    type: str  # "F32", "F16", "BF16", "Q4_1", "Q8_0", ...
    shape: tuple[int, ...]
    raw: np.ndarray  # zero-copy view: uint8 bytes for block types, typed elements otherwise
    nbytes: int = 0

    @property
    def n_elements(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Checkpoint:
    """An opened weights file (or folder)."""

    path: str
    format: str  # "gguf", "safetensors"
    metadata: dict[str, Any]
    tensors: dict[str, TensorRef]
    file_bytes: int = 0
    keepalive: list[Any] = field(default_factory=list)  # mmaps etc. the views depend on

    def get(self, name: str) -> TensorRef:
        from pyllm.errors import FormatError

        t = self.tensors.get(name)
        if t is None:
            raise FormatError(f"{self.path}: required tensor '{name}' is missing")
        return t
