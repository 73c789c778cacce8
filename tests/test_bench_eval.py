"""`harness bench eval`: lm-evaluation-harness (installed by `make test`: pyproject's `eval`
extra) scores the multiple-choice set against `harness serve` on the int8 and the exact f32
path. The f32 path's loglikelihoods, as lm-eval computed them from the server's echoed
logprobs and its tokenizer, are checked against pyllm's exact model here (the whole chain:
/tokenize, echo, prompt logprobs, lm-eval's slicing); the int8 path's must stay near them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyllm_util import ROOT, smol, smol_path

pytest.importorskip("lm_eval")

LIMIT = 4  # questions (x 4 choices): the f32 path costs ~1 s a request on this machine


@pytest.mark.slow
def test_int8_beside_exact_f32_through_lm_eval(tmp_path: Path) -> None:
    smol_path()
    p = subprocess.run([sys.executable, "-m", "harness", "bench", "eval", "--limit",
                        str(LIMIT), "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "| int8 (C kernels) |" in p.stdout and "| exact f32 (numpy) |" in p.stdout
    doc = json.loads((tmp_path / "eval.json").read_text())
    int8, f32 = doc["paths"]
    assert doc["n"] == LIMIT and [x["backend"] for x in doc["paths"]] == ["c", "numpy-f32"]
    for path in (int8, f32):
        assert 0.0 <= path["acc"] <= 1.0 and len(path["loglik"]) == LIMIT

    from harness.bench.evalmc import DATA
    from pyllm import registry
    from pyllm.logprobs import log_softmax

    exact = registry.load("smol", backend="numpy-f32")
    tok = smol().tokenizer
    items = [json.loads(line) for line in DATA.read_text().splitlines()[:LIMIT]]
    diffs = []
    for item, got_f32, got_int8 in zip(items, f32["loglik"], int8["loglik"], strict=True):
        ctx = tok.encode(f"Question: {item['question']}\nAnswer:")
        for choice, f, q in zip(item["choices"], got_f32, got_int8, strict=True):
            cont = tok.encode(" " + choice)
            rows = log_softmax(exact.logits_all(ctx + cont, exact.new_state(len(ctx) + 40)))
            want = sum(rows[len(ctx) - 1 + i, t] for i, t in enumerate(cont))
            assert abs(f - want) < 1e-3, (item["question"], choice, f, want)
            diffs.append(abs(q - want))
    assert float(np.median(diffs)) < 1.0  # int8 weights and activations: near, not equal
