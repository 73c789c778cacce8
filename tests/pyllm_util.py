"""Shared helpers for the pyllm tests: the SmolLM2 file, golden data, a tiny GGUF writer."""

from __future__ import annotations

import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "smol_golden.npz"


def smol_path() -> Path:
    from pyllm.registry import resolve

    try:
        return resolve("smol")[1]
    except Exception as exc:  # not installed: `make test` fetches it first
        pytest.skip(f"SmolLM2 not installed ({exc})")


@cache
def smol(backend: str = "c") -> Any:
    import pyllm

    smol_path()
    # numpy paths on 1 BLAS thread: a 2-thread OpenBLAS crawls when other jobs share the cores
    return pyllm.load("smol", backend=backend, n_threads=1 if backend.startswith("numpy") else 2)


@cache
def golden() -> tuple[Any, list[dict[str, Any]]]:
    g = np.load(GOLDEN)
    return g, json.loads(bytes(g["meta"]).decode())["prompts"]


def native_or_skip() -> tuple[Any, Any]:
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is None:
        pytest.skip("C kernels not built")
    return nat


# ---------------------------------------------------------------- a minimal GGUF writer

def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, value: Any) -> bytes:
    if isinstance(value, bool):
        return _s(key) + struct.pack("<IB", 7, value)
    if isinstance(value, int):
        return _s(key) + struct.pack("<IQ", 10, value)
    if isinstance(value, float):
        return _s(key) + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return _s(key) + struct.pack("<I", 8) + _s(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return _s(key) + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_s(v) for v in value)
    if isinstance(value, list):
        return _s(key) + struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(
            f"<{len(value)}i", *value)
    raise TypeError(value)


def write_gguf(path: Path, meta: dict[str, Any],
               tensors: list[tuple[str, int, tuple[int, ...], bytes]]) -> Path:
    """tensors: (name, ggml type id, numpy shape (rows first), raw bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items())
    offset, infos, blobs = 0, b"", []
    for name, gtype, shape, data in tensors:
        dims = list(reversed(shape))
        infos += _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", gtype, offset)
        pad = (-len(data)) % 32
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % 32)
    path.write_bytes(body + b"".join(blobs))
    return path


def tiny_llama_gguf(path: Path, *, arch: str = "llama", head_type: int = 0,
                    vocab: int = 64, seed: int = 0, description: str = "") -> Path:
    """A 2-layer Llama GGUF with f32 weights (dim 64, 2 heads of 32, 1 KV head, hidden 128),
    a 64-token byte vocabulary, and the LM head stored as ggml type `head_type`."""
    rng = np.random.default_rng(seed)
    dim, hidden, n_layers = 64, 128, 2

    def f32(*shape: int) -> bytes:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32).tobytes()

    tensors = [("token_embd.weight", 0, (vocab, dim), f32(vocab, dim)),
               ("output_norm.weight", 0, (dim,), np.ones(dim, np.float32).tobytes())]
    for i in range(n_layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", 0, (dim,), f32(dim)),
                    (p + "ffn_norm.weight", 0, (dim,), f32(dim)),
                    (p + "attn_q.weight", 0, (dim, dim), f32(dim, dim)),
                    (p + "attn_k.weight", 0, (32, dim), f32(32, dim)),
                    (p + "attn_v.weight", 0, (32, dim), f32(32, dim)),
                    (p + "attn_output.weight", 0, (dim, dim), f32(dim, dim)),
                    (p + "ffn_gate.weight", 0, (hidden, dim), f32(hidden, dim)),
                    (p + "ffn_up.weight", 0, (hidden, dim), f32(hidden, dim)),
                    (p + "ffn_down.weight", 0, (dim, hidden), f32(dim, hidden))]
    block = {14: 210, 16: 66}  # bytes per 256 weights: Q6_K, IQ2_XXS (which we do not read)
    if head_type in block:
        tensors.append(("output.weight", head_type, (vocab, 256),
                        b"\0" * (vocab * block[head_type])))
    tokens = [f"<t{i}>" for i in range(vocab)]
    meta = {"general.architecture": arch, f"{arch}.block_count": n_layers,
            f"{arch}.context_length": 256, f"{arch}.embedding_length": dim,
            f"{arch}.feed_forward_length": hidden, f"{arch}.attention.head_count": 2,
            f"{arch}.attention.head_count_kv": 1, f"{arch}.rope.freq_base": 10000.0,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": [], "tokenizer.ggml.eos_token_id": 1}
    if description:
        meta["general.description"] = description
    return write_gguf(path, meta, tensors)
