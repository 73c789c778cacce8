"""pyllm: a small, fast Transformer inference engine (GGUF / HF checkpoints, cffi C kernels).

Importing `pyllm` is cheap (no numpy, no tokenizers): the names below load their modules on
first use, because the harness imports pyllm on start-up and the AI device builds the engine on a
host thread.

    import pyllm
    model = pyllm.load("smol")                 # or "qwen", or a path; see pyllm.registry
    engine = pyllm.Engine(model)               # owns a scheduler thread; usable from any thread
    for ev in engine.generate([504, 3575, 282, 4649, 314], max_new_tokens=8):
        print(ev.token, ev.t)                  # tokens stream as they are produced
    print(engine.last_timings)

Package map: errors.py (exceptions), registry.py (model names -> files -> model objects),
loaders/ (file formats), tokenizers/ (text <-> ids), models/ (architectures; base.py is the
protocol), kernels/ (C hot paths via cffi + numpy twins), sampling.py, engine.py (requests,
batching, timings), cli.py (`harness models|generate|tokens`), bench.py (`harness bench
engine`), fetch.py (downloads).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "load", "known_models", "Engine", "GenParams", "Request", "TokenEvent", "Timings",
    "ModelInfo", "Model", "ModelState", "Tokenizer", "load_tokenizer", "errors",
]

_LAZY = {
    "load": "pyllm.registry",
    "known_models": "pyllm.registry",
    "load_tokenizer": "pyllm.registry",
    "Engine": "pyllm.engine",
    "GenParams": "pyllm.engine",
    "Request": "pyllm.engine",
    "TokenEvent": "pyllm.engine",
    "Timings": "pyllm.engine",
    "ModelInfo": "pyllm.models.base",
    "Model": "pyllm.models.base",
    "ModelState": "pyllm.models.base",
    "Tokenizer": "pyllm.tokenizers.base",
}


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("pyllm.errors")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyllm' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
