"""The original lab's measurements (course_lab.md section 4): the same three metrics for the same
two models, run inside the guest on one emulated core (QEMU TCG, -smp 1), token by token.

Each table row of the course is kept as measured (µs); `anchor()` gives the medians the
report sets our figures against as ratios. Their TTFT covers the token-by-token prefill
("starting forward pass" -> first token), their load the whole session_init through the
guest file system (Anchor.load_MBps gives its rate).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# (prompt tokens, tokens generated, Model Loading Time, TTFT, TPOT), µs
SMOL_ROWS = [
    (8, 8, 2_259_443, 17_476_034, 2_213_623), (8, 16, 2_232_256, 17_190_833, 2_123_948),
    (8, 32, 2_299_628, 17_805_992, 2_218_257), (8, 128, 2_289_159, 16_908_962, 2_138_732),
    (16, 8, 2_294_955, 35_047_067, 2_226_477), (16, 16, 2_257_970, 34_479_389, 2_160_836),
    (16, 32, 2_172_756, 33_583_974, 2_099_692), (32, 8, 2_237_370, 68_155_390, 2_124_890),
    (32, 16, 2_261_376, 68_476_008, 2_146_982), (32, 32, 2_188_746, 67_435_579, 2_119_661),
    (4, 4, 2_192_168, 8_525_436, 2_113_945), (4, 8, 2_183_354, 8_600_081, 2_151_572),
    (4, 16, 2_172_106, 8_827_543, 2_210_261), (8, 4, 2_188_967, 17_310_485, 2_311_533),
    (16, 4, 2_164_712, 35_681_330, 2_246_885),
]
QWEN_ROWS = [
    (4, 4, 12_095_779, 46_126_192, 11_428_424), (4, 8, 12_134_238, 44_883_160, 11_161_416),
    (4, 16, 11_933_865, 44_592_737, 11_078_618), (8, 4, 12_298_940, 89_551_796, 11_133_178),
    (8, 8, 12_189_074, 89_423_254, 11_076_665), (8, 16, 12_307_713, 90_469_045, 11_237_100),
    (16, 4, 12_090_780, 176_908_532, 10_969_766), (16, 8, 11_852_346, 180_541_475, 11_262_723),
    (16, 16, 12_227_243, 178_032_419, 11_119_402),
]
SOURCE = ("course lab (USTC OS 2026, NexOS-AI), Part 1 tables: QEMU virt, TCG, 1 emulated core, "
          "the model run token by token inside the guest")


@dataclass(frozen=True)
class Anchor:
    """Medians of the course's runs for one model (seconds)."""

    model: str
    load_s: float
    tpot_s: float
    ttft_s: dict[int, float]  # prompt tokens -> TTFT
    asset_bytes: float  # what their load read through the guest's file system

    @property
    def load_MBps(self) -> float:
        return self.asset_bytes / self.load_s / 1e6

    def ttft_per_token_s(self) -> float:
        """TTFT / prompt tokens: their prefill is serial, one token_forward per token."""
        return statistics.median(v / n for n, v in self.ttft_s.items())


def _anchor(model: str, rows: list[tuple[int, int, int, int, int]], asset_bytes: float,
            ) -> Anchor:
    by_len: dict[int, list[int]] = {}
    for n_in, _, _, ttft, _ in rows:
        by_len.setdefault(n_in, []).append(ttft)
    return Anchor(model, statistics.median(r[2] for r in rows) / 1e6,
                  statistics.median(r[4] for r in rows) / 1e6,
                  {n: statistics.median(v) / 1e6 for n, v in sorted(by_len.items())},
                  asset_bytes)


# asset sizes: what each load of course_lab.md section 4 read (136 MB, ~756 MB)
ANCHORS: dict[str, Anchor] = {"smol": _anchor("SmolLM2-135M", SMOL_ROWS, 136e6),
                              "qwen": _anchor("Qwen3.5-0.8B", QWEN_ROWS, 756e6)}


def anchor(name: str) -> Anchor | None:
    """The course's figures for a registry short name ("smol", "qwen"), else None."""
    return ANCHORS.get(name)
