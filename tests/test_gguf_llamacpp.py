"""Qwen3.5 and SmolLM2 GGUF files made by llama.cpp's own tools, checked against llama.cpp
and transformers (marked `ref` and `slow`: the set-up builds tiny checkpoints with
transformers, runs llama.cpp's converter from the llama-cpp-python sdist and its quantizer
from the wheel, all cached under build/gguf-ref/; see tests/gguf_ref.py).

Rule for greedy ids: along llama.cpp's own greedy sequence (prompt + generation), at every
position where llama.cpp's top-1 logit leads its top-2 by at least the margin (0.05 for F32
files, 0.1 for quantized ones), our argmax must be llama.cpp's.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.ref, pytest.mark.slow]
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("llama_cpp")

import gguf_ref as R  # noqa: E402
from pyllm_util import smol_path  # noqa: E402

import pyllm  # noqa: E402

N_GEN = 24
QWEN_TYPES = ("F32", "Q8_0", "Q4_K_M", "Q6_K")
SMOL_TYPES = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")


def our_logits(path: object, ids: np.ndarray, prompt_len: int, backend: str) -> np.ndarray:
    """Our logits of positions prompt_len - 1 .. len(ids) - 1: the prompt in one prefill,
    then the rest one token at a time, as the engine runs a request."""
    m = pyllm.load(str(path), backend=backend, cache=False)
    st = m.new_state(len(ids) + 8)
    out = [m.prefill(ids[:prompt_len], st)]
    out += [m.decode(int(t), st) for t in ids[prompt_len:]]
    return np.stack([np.asarray(o, np.float32).reshape(-1) for o in out])


def check_greedy(ours: np.ndarray, ref: np.ndarray, margin: float, what: str,
                 only: np.ndarray | None = None) -> int:
    """The margin rule (module doc) over rows of logits (those in the mask `only`, if
    given); returns the positions checked."""
    sure = (R.margins(ref) >= margin) & (True if only is None else only)
    bad = np.flatnonzero(sure & (ours.argmax(-1) != ref.argmax(-1)))
    assert not len(bad), (f"{what}: argmax differs from llama.cpp at positions {bad.tolist()} "
                          f"(margins {R.margins(ref)[bad].round(3).tolist()})")
    return int(sure.sum())


@pytest.mark.parametrize("kind", ["text", "mm"])
def test_qwen_f32_gguf_logits_match_transformers(kind: str) -> None:
    _, ids, ref = R.checkpoint(kind)
    path = R.qwen_gguf(kind, "F32")
    m = pyllm.load(str(path), backend="numpy-f32", cache=False)
    ours = m.forward(np.asarray(ids), m.new_state(len(ids)), all_logits=True)
    rel = np.abs(ours - ref).max() / np.abs(ref).max()
    assert rel < 1e-4, f"{kind}: F32 GGUF logits differ from transformers by {rel:.2e} (rel)"


@pytest.mark.parametrize("qtype", QWEN_TYPES)
@pytest.mark.parametrize("kind", ["text", "mm"])
@pytest.mark.parametrize("backend", ["c", "numpy-f32"])
def test_qwen_greedy_ids_match_llamacpp(kind: str, qtype: str, backend: str) -> None:
    _, prompt, _ = R.checkpoint(kind)
    path = R.qwen_gguf(kind, qtype)
    ids, ref = R.llamacpp_ref(path, prompt, N_GEN)
    margin = 0.05 if qtype == "F32" else 0.1
    if qtype == "Q4_K_M":  # the mix the test is about
        assert "Q4_K" in R.describe(path) and "Q6_K" in R.describe(path), R.describe(path)
    ours = our_logits(path, ids, R.PROMPT_LEN, backend)
    n = check_greedy(ours, ref[R.PROMPT_LEN - 1:], margin, f"{kind} {qtype} {backend}")
    assert n >= N_GEN // 2, f"only {n} of {N_GEN} positions had llama.cpp's margin"


SMOL_PROMPT = np.array([1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519,
                        28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260,
                        3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198])


def smol_file(qtype: str) -> object:
    src = smol_path()
    if not src.exists():
        pytest.skip("SmolLM2 is not installed (harness models fetch smol)")
    return R.smol_gguf(qtype, src)


@pytest.mark.parametrize("qtype", SMOL_TYPES)
def test_smollm2_f32_logits_match_transformers_on_llamacpp_files(qtype: str) -> None:
    """Our f32 path reads llama.cpp's file exactly: transformers' GGUF loader (gguf-py's
    dequantizers) on the same file gives the same logits along llama.cpp's sequence."""
    path = smol_file(qtype)
    ids, _ = R.llamacpp_ref(path, SMOL_PROMPT, N_GEN)
    hf = R.transformers_ref(path, ids)[len(SMOL_PROMPT) - 1:]
    ours = our_logits(path, ids, len(SMOL_PROMPT), "numpy-f32")
    rel = np.abs(ours - hf).max() / np.abs(hf).max()
    assert rel < 1e-4, f"SmolLM2 {qtype}: logits differ from transformers by {rel:.2e} (rel)"


@pytest.mark.parametrize("qtype", SMOL_TYPES)
@pytest.mark.parametrize("backend", ["c", "numpy-f32"])
def test_smollm2_greedy_ids_match_llamacpp(qtype: str, backend: str) -> None:
    """The margin rule, at the positions where llama.cpp's top token is also the exact
    computation's (transformers on the same file, with the same margin): SmolLM2's logits
    are large enough that llama.cpp's 8-bit activations and F16 KV cache move its top-2
    gap by more than 0.1 (docs/BENCH.md), so at a few positions llama.cpp's own pick is
    not the file's. Those are skipped; every other sure position must agree."""
    path = smol_file(qtype)
    ids, ref = R.llamacpp_ref(path, SMOL_PROMPT, N_GEN)
    start = len(SMOL_PROMPT) - 1
    ref, hf = ref[start:], R.transformers_ref(path, ids)[start:]
    exact = (hf.argmax(-1) == ref.argmax(-1)) & (R.margins(hf) >= 0.1)
    ours = our_logits(path, ids, len(SMOL_PROMPT), backend)
    n = check_greedy(ours, ref, 0.1, f"SmolLM2 {qtype} {backend}", only=exact)
    assert n >= N_GEN // 2
