"""GGUF files of the synthetic Qwen3.5 weights made by llama.cpp's own tools
(`harness models synth qwen --gguf Q8_0,Q4_K_M`): the checkpoint folder converted by its
convert_hf_to_gguf.py to BF16 (the folder's dtype, so nothing is rounded), then quantized by
llama_model_quantize. Both engines of `harness bench engine` then read the same bytes.

Every file says it is synthetic in general.description (registry.is_synthetic reads it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pyllm.gguf_tools.convert import FTYPES, ToolError, convert, quantize

DESCRIPTION = ("synthetic weights: seeded random values in the shapes of Qwen3.5-0.8B (not a "
               "trained model; {note}), converted by llama.cpp's convert_hf_to_gguf.py")


def parse_types(text: str) -> list[str]:
    """'Q8_0,q4_k_m' -> ['Q8_0', 'Q4_K_M'] (ToolError naming an unknown one)."""
    types = [t.strip().upper() for t in text.split(",") if t.strip()]
    for t in types:
        if t not in FTYPES:
            raise ToolError(f"unknown quantization '{t}' (choose {', '.join(FTYPES)})")
    return types


def gguf_path(folder: Path, ftype: str) -> Path:
    return folder.with_name(f"{folder.name}.{ftype}.gguf")


def synth_gguf(folder: Path, types: list[str], force: bool = False,
               log: Callable[[str], None] = print) -> list[Path]:
    """The GGUF files of `folder` (the synthetic checkpoint) in `types`, beside it; files
    already there are kept unless `force`."""
    from pyllm.registry import SYNTHETIC_MARK

    note = (folder / "SYNTHETIC").read_text().strip() if (folder / "SYNTHETIC").exists() else ""
    if not note.startswith(SYNTHETIC_MARK):
        raise ToolError(f"{folder} is not a synthetic checkpoint (no SYNTHETIC note)")
    want = [t for t in types if force or not gguf_path(folder, t).exists()]
    if not want:
        return [gguf_path(folder, t) for t in types]
    bf16 = gguf_path(folder, "BF16")
    made_bf16 = False
    if force or not bf16.exists():
        log(f"converting {folder.name} with llama.cpp's convert_hf_to_gguf.py -> {bf16.name}")
        t = time.perf_counter()
        convert(folder, bf16, "bf16", name="Qwen3.5-0.8B",
                description=DESCRIPTION.format(note=note.split(": ", 1)[-1]))
        made_bf16 = "BF16" not in types
        log(f"  {time.perf_counter() - t:.0f} s")
    try:
        for ftype in want:
            if ftype == "BF16":
                continue
            out = gguf_path(folder, ftype)
            log(f"quantizing with llama.cpp (llama_model_quantize) -> {out.name}")
            t = time.perf_counter()
            quantize(bf16, out, ftype)
            log(f"  {time.perf_counter() - t:.0f} s, {out.stat().st_size / 1e6:.0f} MB")
    finally:
        if made_bf16:
            bf16.unlink(missing_ok=True)
    return [gguf_path(folder, t) for t in types]
