"""Live comparison with transformers (marked `ref`; skipped when torch/transformers are
absent): a fresh tiny Qwen3.5 with a layer order the golden files do not have."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pyllm.models.qwen35 import from_hf

pytestmark = pytest.mark.ref
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("this transformers has no Qwen3.5", allow_module_level=True)

TOL_EXACT = 1e-4  # as in test_qwen35.py
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_qwen_golden.py"


def recipe():
    spec = importlib.util.spec_from_file_location("gen_qwen_golden", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("layers,kv", [
    (["full_attention", "linear_attention", "linear_attention"], (2, 4)),
    (["linear_attention", "linear_attention", "full_attention", "linear_attention"], (4, 4)),
])
def test_fresh_tiny_model_matches_transformers(tmp_path, layers, kv):
    g = recipe()
    gen = torch.Generator().manual_seed(1234 + len(layers))
    model = transformers.Qwen3_5ForCausalLM(g.text_config(layers, *kv)).eval()
    g.perturb(model, gen)
    model.save_pretrained(tmp_path)
    ids = np.random.default_rng(len(layers)).integers(0, 512, size=75)
    rec = g.record(model, ids)

    m = from_hf(tmp_path, backend="numpy-f32", cache=False)
    out = m.forward(ids.astype(np.int32), m.new_state(80), all_logits=True)
    assert np.abs(out - rec["logits"]).max() < TOL_EXACT
    st = m.new_state(80)
    dec = np.stack([m.decode(int(t), st) for t in ids])
    assert np.abs(dec - rec["logits"]).max() < TOL_EXACT
