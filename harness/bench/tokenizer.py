"""The guest tokenizer's cost (issue 13): microseconds per token of user_c/bpe.c against
the model's own tokenizer on the host (HF `tokenizers` for SmolLM2, tiktoken for Qwen3.5),
in the same run, on the same text; optionally also inside the guest (`tok -t`, timed by
the guest's clock under emulation).

    python -m harness.bench.tokenizer [--size CHARS] [--reps N] [--guest]

Figures are best-of-N wall times of one encode of the whole text; compare them only as
ratios within one run (the machine is shared).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.guest_tokenizer import ROOT, HostTool, sample_text, vocab_files

MODELS = ("smol", "qwen")


@dataclass(frozen=True)
class TokenizerCost:
    """One model's figures (µs per token of one encode of the text)."""

    model: str
    bytes: int
    tokens: int
    host_c_us: float      # user_c/bpe.c compiled for the host (-O2)
    reference_us: float   # the model's own tokenizer (HF tokenizers / tiktoken)
    guest_us: float | None = None  # `tok -t` in the guest, None if not measured
    guest_load_ms: float | None = None  # the guest's vocabulary load (hash tables)

    def line(self) -> str:
        guest = (f" guest_us_per_token={self.guest_us:.2f} guest_load_ms="
                 f"{self.guest_load_ms:.0f}" if self.guest_us is not None else "")
        return (f"tokenizer: model={self.model} bytes={self.bytes} tokens={self.tokens} "
                f"host_c_us_per_token={self.host_c_us:.4f} "
                f"reference_us_per_token={self.reference_us:.4f} "
                f"ratio={self.host_c_us / self.reference_us:.2f}{guest}")


def _guest_us(vocab: bytes, text: bytes, tokens: int) -> tuple[float, float]:
    """µs per token of `tok -t encode` in a booted guest (no AI device needed), and the
    vocabulary's load time there in ms."""
    from harness.fsimage import with_files

    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp) / "fs.img"
        img.write_bytes(with_files((ROOT / "build" / "fs.img").read_bytes(),
                                   {"AI/V.TOK": vocab, "s.txt": text}, grow=True))
        import subprocess

        r = subprocess.run([sys.executable, "-m", "harness", "run", "--fs", str(img),
                            "--timeout", "600", "-c",
                            "tok -t -f /AI/V.TOK encode < /s.txt > /s.ids"],
                           cwd=ROOT, capture_output=True, text=True, timeout=700)
    m = re.search(r"tok: (\d+) tokens \d+ bytes (\d+) us load (\d+) us", r.stdout + r.stderr)
    if not m or int(m.group(1)) != tokens:
        raise RuntimeError(f"tok in the guest gave no timing: {r.stdout[-500:]}{r.stderr[-500:]}")
    return int(m.group(2)) / tokens, int(m.group(3)) / 1e3


def tokenizer_cost(models: tuple[str, ...] = MODELS, size: int = 300_000, reps: int = 3,
                   guest: bool = False, guest_size: int = 8_000) -> list[TokenizerCost]:
    """Measure each model; the text is harness.guest_tokenizer.sample_text(size)."""
    from pyllm.registry import load_tokenizer

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tool = HostTool.build(Path(tmp) / "build")
        for model in models:
            tok = load_tokenizer(model)
            (_, vocab), = vocab_files(model).items()
            vpath = Path(tmp) / f"{model}.tok"
            vpath.write_bytes(vocab)
            text = sample_text(size)
            raw = text.encode()
            ntok, ns = tool.encode_ns(vpath, raw, reps)
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                ref = tok.encode(text)
                best = min(best, time.perf_counter() - t0)
            if len(ref) != ntok:
                raise RuntimeError(f"{model}: the guest tokenizer gave {ntok} tokens, the "
                                   f"model's {len(ref)}")
            g = (None, None)
            if guest:
                small = text[-guest_size:]
                g = _guest_us(vocab, small.encode(), len(tok.encode(small)))
            out.append(TokenizerCost(model, len(raw), ntok, ns / 1e3 / ntok,
                                     best * 1e6 / ntok, *g))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.tokenizer",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=300_000, help="characters of sample text")
    ap.add_argument("--reps", type=int, default=3, help="encodings, the best counts")
    ap.add_argument("--guest", action="store_true", help="also time `tok` in the guest")
    ap.add_argument("--model", action="append", help="smol, qwen or a path (repeatable)")
    a = ap.parse_args(argv)
    for c in tokenizer_cost(tuple(a.model or MODELS), a.size, a.reps, a.guest):
        print(c.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
