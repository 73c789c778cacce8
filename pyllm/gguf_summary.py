"""What a GGUF file holds and what the engine will do with it (`harness models info FILE`).

Read from the header only (no weights are touched), so it also describes a file the
engine refuses: its architecture, llama.cpp's file type, the quant mix (tensors and bytes
per stored type) and, per type, what the C fast path runs (backend/records.py's table).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from pyllm.backend.records import record_kind
from pyllm.loaders.gguf import SUPPORTED, file_type_name, open_gguf

# what each record kind means for the stored type it comes from (records.RECORD_OF)
STREAMED = {"PYLLM_Q4K16": "streamed as stored (Q4K16 records, 4.5 bits a weight)",
            "PYLLM_Q6K16": "streamed as stored (Q6K16 records, 6.56 bits a weight)"}
EXACT_Q8 = ("Q8_0", "IQ4_NL")


def fast_path(type_: str, kind: str) -> str:
    """One line: how the C products run a matrix of stored type `type_` (record `kind`)."""
    if type_ not in SUPPORTED:
        return f"not read: pyllm cannot dequantize {type_} (the file is refused)"
    if kind in STREAMED:
        return STREAMED[kind]
    if kind == "PYLLM_Q4X16":
        how = "as stored" if type_ == "Q4_1" else "exactly, as Q4_1 with m = -8 d"
        return f"{how} (Q4X16 records, 5 bits a weight)"
    if kind == "PYLLM_Q5X16":
        return "as stored (Q5X16 records, 5.5 bits a weight)"
    if type_ in EXACT_Q8:
        how = "as stored" if type_ == "Q8_0" else "exactly, its values are int8 times the f16 d"
        return f"{how} (Q8X16 records, 8.5 bits a weight)"
    return "requantized to int8 per 32 columns (Q8X16 records, 8.5 bits a weight)"


def summarize(path: str | os.PathLike[str]) -> dict[str, Any]:
    """{architecture, file_type, bytes, tensors, quant_mix: {type: {tensors, bytes,
    matrices}}} where `matrices` says what the fast path does with that type's matrices
    (the products' operands, whole 32-column blocks wide); vectors and the other small
    tensors (norms, biases, DeltaNet's conv1d) are read as f32 whatever their type."""
    from pyllm.registry import ARCHITECTURES

    ck = open_gguf(path)
    arch = str(ck.metadata.get("general.architecture", "?"))
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    plans: dict[str, Counter[str]] = {}
    for t in ck.tensors.values():
        count[t.type] += 1
        size[t.type] += t.nbytes
        if len(t.shape) == 2 and (t.shape[1] % 32 == 0 or t.type not in SUPPORTED):
            kind = record_kind(t, t.shape[1]) if t.type in SUPPORTED else ""
            plans.setdefault(t.type, Counter())[fast_path(t.type, kind)] += 1
    mix: dict[str, Any] = {}
    for ty, n in count.most_common():
        entry: dict[str, Any] = {"tensors": n, "bytes": size[ty]}
        if ty in plans:
            entry["matrices"] = "; ".join(
                f"{how}" if len(plans[ty]) == 1 else f"{k} of them {how}"
                for how, k in plans[ty].most_common())
        mix[ty] = entry
    supported = ("gguf", arch) in ARCHITECTURES
    return {"architecture": arch + ("" if supported else " (not supported by pyllm)"),
            "file_type": file_type_name(ck), "bytes": ck.file_bytes,
            "tensors": len(ck.tensors), "quant_mix": mix}
