"""Qwen3.5 decoder against transformers' golden logits (tests/data/qwen35, made by
scripts/gen_qwen_golden.py): prefill, token-by-token decode, chunk boundaries, both name
layouts, and the int8 C path against the exact float32 path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyllm.errors import ContextOverflowError, TokenError
from pyllm.models import qwen35 as Q
from pyllm.models.qwen35_weights import tensor_table

DATA = Path(__file__).parent / "data" / "qwen35"
MODELS = ("tiny_text", "tiny_mm")

TOL_EXACT = 1e-4  # max |logit difference| of the float32 path vs transformers (fp32)
TOL_Q8_REL = 0.08  # int8 path: ||logits - f32 logits|| / ||f32 logits||
TOL_Q8_ARGMAX = 0.95  # int8 path: fraction of positions whose argmax matches f32
TOL_Q8_SELF = 2e-3  # int8 path: prefill vs token-by-token decode (same quantized weights)


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    return dict(np.load(DATA / "golden.npz"))


def load(name: str, backend: str = "numpy-f32", **kw) -> Q.Qwen35:
    return Q.from_hf(DATA / name, name=name, backend=backend, cache=False, **kw)


def decode_all(m: Q.Qwen35, ids: np.ndarray, start: int = 0) -> np.ndarray:
    """Prefill ids[:start] (if any), then decode one token at a time; logits of every
    position from `start` on (row 0 = the prefill's last token when start > 0)."""
    st = m.new_state(len(ids) + 4)
    rows = []
    if start:
        rows.append(m.forward(ids[:start], st)[-1])
    for t in range(start, len(ids)):
        rows.append(m.decode(int(ids[t]), st))
    return np.stack(rows)


@pytest.mark.parametrize("name", MODELS)
def test_prefill_matches_transformers(golden, name):
    m = load(name)
    ids, ref = golden[f"{name}.ids"], golden[f"{name}.logits"]
    assert len(ids) > m.chunk  # the prompt crosses a prefill chunk
    out = m.forward(ids, m.new_state(len(ids)), all_logits=True)
    assert np.abs(out - ref).max() < TOL_EXACT
    assert (out.argmax(1) == ref.argmax(1)).all()


@pytest.mark.parametrize("name", MODELS)
def test_decode_token_by_token_matches_transformers(golden, name):
    m = load(name)
    ids, ref = golden[f"{name}.ids"], golden[f"{name}.logits"]
    out = decode_all(m, ids)
    assert np.abs(out - ref).max() < TOL_EXACT
    # transformers' own cached path (prefill 64, then one token at a time) agrees too
    assert np.abs(out[63:] - golden[f"{name}.logits_cached"][63:]).max() < TOL_EXACT


@pytest.mark.parametrize("name", MODELS)
def test_prefill_then_decode(golden, name):
    """Caches handed from a chunked prefill to the recurrent decode."""
    m = load(name)
    ids, ref = golden[f"{name}.ids"], golden[f"{name}.logits"]
    out = decode_all(m, ids, start=66)
    assert np.abs(out - ref[65:]).max() < TOL_EXACT


@pytest.mark.parametrize("chunk", [1, 7, 16, 64, 128])
def test_chunk_size_does_not_change_results(golden, chunk):
    m = load("tiny_text", chunk=chunk)
    ids, ref = golden["tiny_text.ids"], golden["tiny_text.logits"]
    out = m.forward(ids, m.new_state(len(ids)), all_logits=True)
    assert np.abs(out - ref).max() < TOL_EXACT


def test_prompt_in_several_prefill_calls(golden):
    """The engine feeds long prompts in pieces: state must carry over between calls."""
    m = load("tiny_text")
    ids, ref = golden["tiny_text.ids"], golden["tiny_text.logits"]
    st = m.new_state(len(ids))
    for a, b in ((0, 5), (5, 40), (40, 41), (41, 80)):
        last = m.prefill(ids[a:b], st)
        assert np.abs(last - ref[b - 1]).max() < TOL_EXACT
    assert st.pos == len(ids)


def test_layerwise_hidden_states(golden):
    """Every layer's output (seen through model.trace) matches transformers' hidden state."""
    m = load("tiny_mm")
    ids, hid = golden["tiny_mm.ids"], golden["tiny_mm.hidden"]
    seen: dict[tuple[str, int], np.ndarray] = {}
    m.trace = lambda name, layer, x: seen.__setitem__((name, layer), x.copy())
    m.forward(ids, m.new_state(len(ids)), all_logits=True)
    assert np.array_equal(seen["embed", -1], hid[0])
    for i in range(m.cfg.n_layers - 1):  # transformers' last hidden state is after the norm
        assert np.abs(seen["layer_out", i] - hid[i + 1]).max() < 1e-5, f"layer {i}"
    assert np.abs(seen["final_norm", -1] - hid[-1]).max() < 1e-5


def test_a_wrong_convention_is_caught(golden, monkeypatch):
    """The tolerance is tight enough to see a plain-w RMSNorm where (1+w) belongs."""
    m = load("tiny_text")
    monkeypatch.setattr(Q, "rmsnorm1p", lambda x, w, eps: x / np.sqrt(
        np.mean(x * x, axis=-1, keepdims=True) + eps) * w)
    ids, ref = golden["tiny_text.ids"], golden["tiny_text.logits"]
    out = m.forward(ids, m.new_state(len(ids)), all_logits=True)
    assert np.abs(out - ref).max() > 100 * TOL_EXACT


def test_multimodal_names_and_ignored_tensors():
    m = load("tiny_mm")
    assert m.info.extra["prefix"] == "model.language_model."
    ckpt = m._ckpt
    assert any(n.startswith("model.visual.") for n in ckpt.tensors)
    assert any(n.startswith("mtp.") for n in ckpt.tensors)
    assert load("tiny_text").info.extra["prefix"] == "model."


def test_config_and_info():
    m = load("tiny_text")
    c = m.cfg
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert (c.lin_k_heads, c.lin_v_heads, c.rotary_dim, c.rope_theta) == (2, 4, 8, 1e7)
    assert m.info.arch == "qwen3_5" and m.info.synthetic is False
    assert m.info.n_params == sum(int(np.prod(s)) for s in tensor_table(c).values())
    st = m.new_state(16)
    assert st.ssm.shape == (3, 4, 16, 16) and st.conv.shape == (3, 3, 2 * 32 + 64)


def test_bad_prompts_are_refused_before_any_change():
    m = load("tiny_text")
    st = m.new_state(8)
    with pytest.raises(TokenError, match="out of the vocabulary"):
        m.prefill([1, 2, 512], st)
    with pytest.raises(TokenError, match="empty"):
        m.prefill([], st)
    with pytest.raises(ContextOverflowError):
        m.prefill(list(range(9)), st)
    assert st.pos == 0 and not st.ssm.any()
    m.prefill([1, 2, 3], st)
    with pytest.raises(ContextOverflowError, match="3 already used"):
        m.prefill(list(range(6)), st)
    assert st.pos == 3


def test_kv_cache_grows_past_its_first_allocation():
    m = load("tiny_text")
    ids = np.random.default_rng(1).integers(0, 512, 300).astype(np.int32)
    a = m.new_state(400)
    m.prefill(ids, a)
    assert a.k.shape[2] >= 300
    b = m.new_state(400)
    m.prefill(ids[:250], b)
    m.prefill(ids[250:], b)
    assert np.abs(m.decode(7, a) - m.decode(7, b)).max() < TOL_EXACT


# ----------------------------------------------------------------------------- the int8 C path

def native_or_skip() -> None:
    from pyllm.kernels import c_kernels

    if c_kernels() is None:
        pytest.skip("C kernels not built")


@pytest.mark.parametrize("name", MODELS)
def test_int8_path_close_to_f32(golden, name):
    native_or_skip()
    m = load(name, backend="c")
    assert m.info.weight_format == "q8x16" and m.info.backend.startswith("c-")
    ids, ref = golden[f"{name}.ids"], golden[f"{name}.logits"]
    out = m.forward(ids, m.new_state(len(ids)), all_logits=True)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < TOL_Q8_REL
    assert (out.argmax(1) == ref.argmax(1)).mean() >= TOL_Q8_ARGMAX
    dec = decode_all(m, ids)
    assert np.abs(dec - out).max() < TOL_Q8_SELF * np.abs(out).max()


@pytest.fixture(params=[False, True], ids=["avx512", "generic"])
def c_paths(request):
    native_or_skip()
    from pyllm.kernels import c_kernels

    lib = c_kernels()[1]
    lib.pyllm_force_generic(1 if request.param else 0)
    yield
    lib.pyllm_force_generic(0)


def test_numpy_q8_twin_matches_the_c_path(golden, c_paths):
    """The numpy twin of the int8 arithmetic and the C kernels (through the Python forward
    and through the one-call C decode step) agree."""
    ids = golden["tiny_text.ids"][:40]
    twin = load("tiny_text", backend="numpy-q8")
    c = load("tiny_text", backend="c")
    assert c.fast is not None and twin.fast is None
    a = twin.forward(ids, twin.new_state(64), all_logits=True)
    b = c.forward(ids, c.new_state(64), all_logits=True)
    assert np.abs(a - b).max() < TOL_Q8_SELF * np.abs(a).max()
    st_py, st_c = c.new_state(64), c.new_state(64)
    py = np.stack([c.forward(ids[i:i + 1], st_py)[0] for i in range(len(ids))])
    fast = np.stack([c.decode(int(t), st_c) for t in ids])
    assert np.abs(py - fast).max() < 1e-4 * np.abs(py).max()
    assert np.abs(st_py.ssm - st_c.ssm).max() < 1e-5
    assert np.abs(st_py.conv - st_c.conv).max() < 1e-4 * np.abs(st_py.conv).max()


def test_batched_decode_equals_one_by_one(golden):
    """Engine.step hands several sequences' tokens to one C call."""
    native_or_skip()
    m = load("tiny_mm", backend="c")
    ids = golden["tiny_mm.ids"]
    states = [m.new_state(40) for _ in range(3)]
    for j, st in enumerate(states):  # different lengths, so different positions
        m.prefill(ids[:5 + 7 * j], st)
    ref_states = [m.new_state(40) for _ in range(3)]
    for j, st in enumerate(ref_states):
        m.prefill(ids[:5 + 7 * j], st)
    toks = [np.array([int(ids[30 + j])], np.int32) for j in range(3)]
    batched = m.step(list(zip(states, toks, strict=True)))
    single = np.stack([m.decode(int(t[0]), st) for st, t in zip(ref_states, toks, strict=True)])
    assert np.abs(batched - single).max() < 1e-5 * np.abs(single).max()
    assert [s.pos for s in states] == [6, 13, 20]


def _mixed_batch(m: Q.Qwen35, ids: np.ndarray) -> tuple[list, list]:
    """Three sequences at different positions: a decode token, a 9-token prompt chunk of a
    sequence already 5 tokens in, a decode token -- as (state, tokens) items, twice (the
    second set for the one-by-one reference)."""
    sets = []
    for _ in range(2):
        states = [m.new_state(48) for _ in range(3)]
        for j, st in enumerate(states):
            m.prefill(ids[:5 + 7 * j], st)
        sets.append(list(zip(states, [ids[30:31], ids[12:21], ids[33:34]], strict=True)))
    return sets[0], sets[1]


@pytest.mark.parametrize("backend", ["numpy-f32", "c"])
def test_mixed_step_equals_one_by_one(golden, backend):
    """A prompt chunk and decode tokens of other sequences in one step (one C call on the
    fast path) give each sequence the logits and state it gets alone: the same greedy ids,
    logits within 1e-5 (relative to their largest), the same recurrent and KV state."""
    if backend == "c":
        native_or_skip()
    m = load("tiny_mm", backend=backend)
    batch, ref = _mixed_batch(m, golden["tiny_mm.ids"])
    together = m.step(batch)
    alone = np.stack([m.prefill(t, st) for st, t in ref])
    assert list(together.argmax(1)) == list(alone.argmax(1))
    assert np.abs(together - alone).max() <= 1e-5 * np.abs(alone).max()
    for (a, _), (b, _) in zip(batch, ref, strict=True):
        assert a.pos == b.pos
        for f in ("ssm", "conv", "k", "v"):
            assert np.abs(getattr(a, f) - getattr(b, f)).max() <= 1e-5 * max(
                1.0, np.abs(getattr(b, f)).max())


def test_c_prefill_matches_the_numpy_forward(golden):
    """The fast path's prefill (token-by-token delta rule in C) against the readable numpy
    forward (chunked delta rule) on the same int8 matrices."""
    native_or_skip()
    c = load("tiny_text", backend="c")
    ids = golden["tiny_text.ids"][:40]
    st_c, st_py = c.new_state(64), c.new_state(64)
    fast = c.prefill(ids, st_c)
    py = c.forward(ids, st_py)[-1]
    assert np.abs(py - fast).max() < 1e-4 * np.abs(py).max()
    assert int(fast.argmax()) == int(py.argmax())
    assert np.abs(st_py.ssm - st_c.ssm).max() < 1e-4


def test_c_decode_long_context(c_paths):
    """300 positions: the KV cache grows past its first allocation, attention runs over
    many keys. Against the exact path with the int8 tolerances (over hundreds of steps a
    1-ulp difference can flip one activation's int8 rounding, so the int8 twins are not
    compared bit for bit here)."""
    c = load("tiny_text", backend="c")
    f = load("tiny_text")
    ids = np.random.default_rng(2).integers(0, 512, 300).astype(np.int32)
    st_c, st_f = c.new_state(320), f.new_state(320)
    c.prefill(ids[:20], st_c)
    f.prefill(ids[:20], st_f)
    a = np.stack([c.decode(int(t), st_c) for t in ids[20:]])
    b = np.stack([f.decode(int(t), st_f) for t in ids[20:]])
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < TOL_Q8_REL
    assert (a.argmax(1) == b.argmax(1)).mean() >= TOL_Q8_ARGMAX
    assert st_c.pos == 300 and st_c.k.shape[2] >= 300


@pytest.mark.parametrize("backend", ["numpy-f32", "c"])
def test_engine_runs_concurrent_requests(golden, backend):
    """Several requests at once through pyllm.Engine (prefill chunks interleaved with batched
    decode steps) give each request the tokens it gets alone."""
    if backend == "c":
        native_or_skip()
    from pyllm.engine import Engine

    m = load("tiny_mm", backend=backend)
    ids = golden["tiny_mm.ids"]
    prompts = [ids[:5], ids[10:40], ids[3:4], ids[:70]]
    with Engine(m, prefill_chunk=16) as eng:
        alone = [eng.run(p, max_new_tokens=6, stop_ids=()).tokens for p in prompts]
        reqs = [eng.submit(p, max_new_tokens=6, stop_ids=()) for p in prompts]
        together = [r.wait(timeout=60) for r in reqs]
    assert together == alone
    assert all(len(t) == 6 for t in alone)


def test_c_prefill_with_the_real_head_size(tmp_path):
    """Qwen3.5's delta-rule heads are 128 x 128, the size with its own AVX-512 path
    (gdn.c, 128 columns in registers). The same random model with those head sizes:
    prefill against token-by-token decode on the same int8 matrices, logits and the
    recurrent state."""
    native_or_skip()
    import json

    from pyllm.loaders.safetensors import SafetensorsWriter
    from pyllm.models.qwen35_config import Qwen35Config
    from pyllm.synth import random_tensor

    conf = json.loads((DATA / "tiny_text" / "config.json").read_text())
    conf.update(linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=1,
                linear_num_value_heads=2, hidden_size=128, layer_types=["linear_attention"] * 2,
                num_hidden_layers=2)
    (tmp_path / "config.json").write_text(json.dumps(conf))
    specs = tensor_table(Qwen35Config.from_hf(conf))
    with SafetensorsWriter(tmp_path / "model.safetensors",
                           [("model." + n, "BF16", s) for n, s in specs.items()], {}) as w:
        for n, s in specs.items():
            w.write("model." + n, random_tensor(n, s, 3))
    m = Q.from_hf(tmp_path, backend="c", cache=False)
    ids = np.random.default_rng(5).integers(0, 512, 48).astype(np.int32)
    st_p, st_d = m.new_state(64), m.new_state(64)
    fast = m.prefill(ids, st_p)
    one = [m.decode(int(t), st_d) for t in ids][-1]
    assert np.abs(fast - one).max() <= TOL_Q8_SELF * np.abs(one).max()
    assert np.abs(st_p.ssm - st_d.ssm).max() <= TOL_Q8_SELF * np.abs(st_d.ssm).max()
