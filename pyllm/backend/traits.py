"""The one table of weight formats: name (a Linear's `.format`)
-> the Linear class that computes it and what runs it. A new format is a new Linear class
(linear.py), a row here, and the Ops that build it (ops.py); the Ops check every matrix they
hand out against this table."""

from __future__ import annotations

from dataclasses import dataclass

from pyllm.backend.linear import (
    BlockTwinLinear,
    DenseLinear,
    QmatF32Linear,
    QmatTwinLinear,
    RecordLinear,
)


@dataclass(frozen=True)
class Trait:
    linear: type  # the class whose objects have this `.format`
    runs: str  # "c" (the compiled kernels) or "numpy"
    exact: bool  # the float32 product of the stored weights, no int8 activations
    what: str


TRAITS: dict[str, Trait] = {
    "f32": Trait(DenseLinear, "numpy", True, "float32 weights (the reference)"),
    "q4x16": Trait(RecordLinear, "c", False, "GGUF Q4_1 blocks repacked into Q4X16 records"),
    "q5x16": Trait(RecordLinear, "c", False, "GGUF Q5_0 blocks repacked into Q5X16 records"),
    "q8x16": Trait(RecordLinear, "c", False, "Q8_0 blocks, or float rows quantized, as Q8X16"),
    "q4k16": Trait(RecordLinear, "c", False, "GGUF Q4_K super-blocks as Q4K16 records"),
    "q6k16": Trait(RecordLinear, "c", False, "GGUF Q6_K super-blocks as Q6K16 records"),
    "parts": Trait(RecordLinear, "c", False, "fused rows of several record kinds"),
    "qmat": Trait(RecordLinear, "c", False, "the course's int8 rows as Q8R16 records"),
    "q4_1-numpy": Trait(BlockTwinLinear, "numpy", False, "numpy twin on Q4_1 blocks"),
    "q8_0-numpy": Trait(BlockTwinLinear, "numpy", False, "numpy twin on Q8_0 blocks"),
    "qmat-numpy": Trait(QmatTwinLinear, "numpy", False, "numpy twin on the course's int8 rows"),
    "qmat-f32": Trait(QmatF32Linear, "c", False, "float32 activations on the course's rows"),
}
