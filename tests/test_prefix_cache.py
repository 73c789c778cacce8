"""Prefix caching (pyllm/prefix_cache.py, pyllm/engine.py): the block table's keys, LRU
eviction and short blocks, and for SmolLM2 and Qwen3.5 (tiny_text, with its DeltaNet snapshots
at every block; the synthetic 0.8B too) that a cache hit gives the logits of a fresh prefill
(exact path <= 1e-5, the C path the same greedy ids) for prompts sharing 0-100 % of a prefix,
after evictions, for concurrent requests sharing blocks, with seeded sampling, and across the
turns of a conversation (the second resumes past the first answer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyllm_util import smol

from pyllm.engine import Engine, GenParams
from pyllm.models import qwen35 as Q
from pyllm.prefix_cache import PrefixCache, block_key, parse_size

BLOCK = 16
CHUNK = 32
N = 96  # prompt tokens
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
QWEN_DATA = Path(__file__).parent / "data" / "qwen35" / "tiny_text"


def qwen(backend: str):  # noqa: ANN201
    return Q.from_hf(QWEN_DATA, name="tiny_text", backend=backend, cache=False)


MODELS = {"smol-f32": lambda: smol("numpy-f32"), "smol-c": lambda: smol("c"),
          "qwen-f32": lambda: qwen("numpy-f32"), "qwen-c": lambda: qwen("c")}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):  # noqa: ANN001, ANN201
    if request.param.endswith("-c"):
        from pyllm.kernels import native

        if native() is None:
            pytest.skip("C kernels not built")
    return MODELS[request.param]()


def prompts(model, frac: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """A base prompt and one sharing its first `frac` of tokens."""
    rng = np.random.default_rng(seed)
    vocab = min(model.info.vocab_size, 40000)
    a = rng.integers(10, vocab, N).astype(np.int32)
    b = rng.integers(10, vocab, N).astype(np.int32)
    k = int(frac * N)
    return a, np.concatenate([a[:k], b[k:]]).astype(np.int32)


def engine(model, budget: int = 64 << 20) -> Engine:  # noqa: ANN001
    return Engine(model, kv_cache=budget, cache_block=BLOCK, prefill_chunk=CHUNK)


def exact(model) -> bool:  # noqa: ANN001
    return model.info.backend.startswith("numpy-f32")


# ---------------------------------------------------------------- the block table

def test_keys_name_whole_prefixes() -> None:
    c = PrefixCache(1 << 20, block=4)
    a = np.arange(12, dtype=np.int32)
    b = a.copy()
    b[1] = 99  # differs in the first block only
    ka, kb = c.keys(a), c.keys(b)
    assert len(ka) == 3 and ka[0] == block_key(b"", a[:4]) and ka[1] == block_key(ka[0], a[4:8])
    assert all(x != y for x, y in zip(ka, kb, strict=True))  # later blocks differ too
    assert c.keys(a[:9]) == ka[:2]


def test_lru_eviction_takes_leaves_and_descendants() -> None:
    rows = {"k": np.zeros(256, np.float32)}  # 1 KiB + 16 B of ids per block
    c = PrefixCache(3 * 1040, block=4)
    a, b = np.arange(8, dtype=np.int32), np.arange(100, 108, dtype=np.int32)
    ka, kb = c.keys(a), c.keys(b)
    assert c.insert(ka[0], b"", a[:4], rows) and c.insert(ka[1], ka[0], a[4:], rows)
    assert not c.insert(kb[1], kb[0], b[4:], rows)  # its parent is not cached
    assert c.insert(kb[0], b"", b[:4], rows)  # full now
    assert c.lookup(np.concatenate([a, [1]]))[1] == 8  # touches a's chain
    assert c.insert(kb[1], kb[0], b[4:], rows)  # evicts the LRU but its own parent: a's leaf
    assert c.stats.evictions == 1 and list(c.blocks) == [kb[0], ka[0], kb[1]]
    assert c.insert(b"c", b"", a[:4] + 50, rows)  # evicts b's first block and so its child
    assert c.stats.evictions == 3 and list(c.blocks) == [ka[0], b"c"]
    assert c.used <= c.budget and not c.insert(b"x", b"", a[:4], {"k": np.zeros(4096)})
    assert c.status()["valid"] == 1 and c.status()["hits"] == 1


def test_a_short_block_resumes_before_its_last_token() -> None:
    c = PrefixCache(1 << 20, block=4, recurrent=True)
    a = np.arange(10, 18, dtype=np.int32)
    ka = c.keys(a)
    snap = {"s": np.ones(4, np.float32)}
    assert c.insert(ka[0], b"", a[:4], {"k": np.zeros(4)}, snap)
    assert c.insert(ka[1], ka[0], a[4:], {"k": np.zeros(3)}, snap, size=3)  # short
    assert c.lookup(np.concatenate([a, [1]]))[1] == 7  # before the short block's last token
    assert c.lookup(a)[1] == 7  # and still one token left to prefill
    assert c.lookup(a[:7])[1] == 4  # the short block's ids are not all in this prompt
    assert c.insert(ka[1], ka[0], a[4:], {"k": np.zeros(4)}, None)  # no snapshot: kept short
    assert c.blocks[ka[1]].size == 3
    assert c.insert(ka[1], ka[0], a[4:], {"k": np.zeros(4)}, snap)  # the whole block
    assert c.blocks[ka[1]].size == 4 and c.lookup(np.concatenate([a, [1]]))[1] == 8
    assert c.used == sum(b.nbytes for b in c.blocks.values())


def test_parse_size() -> None:
    assert parse_size("256M") == 256 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("0") == 0 and parse_size("64k") == 64 << 10
    with pytest.raises(ValueError, match="256M"):
        parse_size("lots")


# ---------------------------------------------------------------- hits equal fresh prefills

@pytest.mark.parametrize("frac", FRACTIONS)
def test_hit_gives_the_logits_of_a_fresh_prefill(model, frac) -> None:  # noqa: ANN001
    a, b = prompts(model, frac)
    with engine(model) as eng:
        eng.run(a, max_new_tokens=1)
        st = model.new_state(N + 1)
        n = eng.cache.restore(b, st)  # the engine is idle: its cache is ours to read
        shared = int(frac * N) // BLOCK * BLOCK
        if model.recurrent:  # resumes at a snapshot: every block's end, before the last token
            assert n == min(shared, (N - 1) // BLOCK * BLOCK)
        else:
            assert n == min(shared, N - 1)
        warm = model.prefill(b[n:], st)
    cold = model.new_state(N + 1)  # the same pieces, the first n in the engine's chunks
    for i in range(0, n, CHUNK):
        model.prefill(b[i:min(n, i + CHUNK)], cold)
    split = model.prefill(b[n:], cold)
    whole = model.prefill(b, model.new_state(N + 1))
    if exact(model):  # equal up to float32 summation order (BLAS sums by the rows' count)
        for cold_logits in (split, whole):
            assert np.max(np.abs(warm - cold_logits)) <= 1e-5 * np.max(np.abs(cold_logits))
    else:
        assert int(np.argmax(warm)) == int(np.argmax(split)) == int(np.argmax(whole))


@pytest.mark.parametrize("frac", FRACTIONS)
def test_engine_output_with_and_without_the_cache(model, frac) -> None:  # noqa: ANN001
    a, b = prompts(model, frac, seed=1)
    with Engine(model, kv_cache=0) as off:
        want = off.run(b, max_new_tokens=6, stop_ids=()).tokens
        assert off.cache.stats.bypasses == 1 and not off.cache.blocks
    with engine(model) as eng:
        eng.run(a, max_new_tokens=2, stop_ids=())
        req = eng.run(b, max_new_tokens=6, stop_ids=())
    assert req.tokens == want
    assert (req.timings.n_cached > 0) == (frac >= 0.25)


def test_after_evictions(model) -> None:  # noqa: ANN001
    ps = [prompts(model, 0.0, seed=s)[0] for s in range(4)]
    with Engine(model, kv_cache=0) as off:
        want = [off.run(p, max_new_tokens=3, stop_ids=()).tokens for p in ps]
    per_prompt = _cache_bytes(model, ps[0])
    with engine(model, budget=int(per_prompt * 1.5)) as eng:
        got = [eng.run(p, max_new_tokens=3, stop_ids=()).tokens for p in ps + ps[::-1]]
        st = eng.cache.status()
    assert got == want + want[::-1]
    assert st["evictions"] > 0 and st["bytes"] <= st["budget"] and st["hits"] >= 1


def _cache_bytes(model, p: np.ndarray) -> int:  # noqa: ANN001
    with engine(model) as eng:
        eng.run(p, max_new_tokens=3, stop_ids=())
        return eng.cache.used


def test_concurrent_requests_share_blocks(model) -> None:  # noqa: ANN001
    a, _ = prompts(model, 0.0, seed=2)
    others = [prompts(model, f, seed=2)[1] for f in (0.5, 0.75, 1.0)]
    with Engine(model, kv_cache=0) as off:
        want = [off.run(p, max_new_tokens=4, stop_ids=()).tokens for p in others]
    with engine(model) as eng:
        eng.run(a, max_new_tokens=1)
        saves = eng.cache.stats.saves
        reqs = [eng.submit(p, max_new_tokens=4, stop_ids=()) for p in others]
        got = [r.wait(120) for r in reqs]
    assert got == want
    assert all(r.timings.n_cached >= 32 for r in reqs)  # the same blocks, one copy of each
    assert eng.cache.stats.restores >= 3 * 2 and eng.cache.stats.saves > saves


def test_seeded_sampling_is_the_same_warm(model) -> None:  # noqa: ANN001
    a, _ = prompts(model, 0.0, seed=3)
    params = GenParams(max_new_tokens=8, temperature=0.9, top_k=40, seed=7, stop_ids=())
    with engine(model) as eng:
        cold = eng.run(a, params)
        warm = eng.run(a, params)
    assert cold.timings.n_cached == 0 and warm.timings.n_cached > 0
    assert warm.tokens == cold.tokens


@pytest.mark.parametrize("answer", [40, 2 * BLOCK])
def test_a_conversation_reuses_the_previous_answer(model, answer) -> None:  # noqa: ANN001
    """The second turn resumes past the first answer: at its last block boundary (a hybrid
    model's snapshot taken as decode reached it), or, when the first turn's text ends on a
    boundary, right before its last token (a short block: that token was never fed)."""
    a, b = prompts(model, 0.0, seed=4)
    with engine(model) as eng:
        first = eng.run(a, max_new_tokens=answer, stop_ids=())
        turn2 = np.concatenate([a, first.tokens, b[:20]]).astype(np.int32)
        second = eng.run(turn2, max_new_tokens=4, stop_ids=())
        third = eng.run(turn2, max_new_tokens=4, stop_ids=())  # the whole second prompt
    with Engine(model, kv_cache=0) as off:
        want = off.run(turn2, max_new_tokens=4, stop_ids=()).tokens
    assert second.tokens == third.tokens == want
    if (N + answer) % BLOCK:
        assert second.timings.n_cached == (N + answer - 1) // BLOCK * BLOCK
    else:
        assert second.timings.n_cached == N + answer - 1
    assert third.timings.n_cached == (turn2.size - 1) // BLOCK * BLOCK


def test_snapshots_inside_a_chunk_equal_chunk_ends(model) -> None:  # noqa: ANN001
    """The recurrent state a forward pass hands out at each block boundary inside a chunk
    (ModelState.snap_block) is the state after a chunk ending there."""
    if not model.recurrent:
        pytest.skip("no recurrent state")
    a, _ = prompts(model, 0.0, seed=5)
    whole = model.new_state(N)
    whole.snap_block = BLOCK
    model.prefill(a, whole)
    assert sorted(whole.snapshots) == list(range(BLOCK, N, BLOCK))
    pieces = model.new_state(N)
    for end in range(BLOCK, N, BLOCK):
        model.prefill(a[end - BLOCK:end], pieces)
        want = pieces.snapshot()
        for part, got in whole.snapshots[end].items():
            assert np.max(np.abs(got - want[part])) <= 1e-5 * max(1.0, np.max(np.abs(want[part])))


SYNTHETIC = Path(__file__).parents[1] / "models" / "qwen3.5-0.8b-synthetic"


@pytest.mark.slow
def test_synthetic_qwen_resumes_at_every_block_and_past_an_answer() -> None:
    """The 0.8B's shapes (the synthetic checkpoint, C path, blocks of 64): a prompt sharing
    0-100 % of a cached 130-token one resumes at its last shared block and gives the greedy
    ids of a run without the cache; a conversation whose first turn ends on a block boundary
    (100 + 28 tokens) resumes one token before it."""
    if not SYNTHETIC.is_dir():
        pytest.skip("no synthetic Qwen3.5 (see models/README.md)")
    from pyllm import registry

    model = registry.load(SYNTHETIC)
    n = 130
    rng = np.random.default_rng(6)
    a, b = (rng.integers(10, 40000, n).astype(np.int32) for _ in range(2))
    cases = [np.concatenate([a[:k], b[k:]]).astype(np.int32)
             for k in (int(f * n) for f in FRACTIONS)]
    turn1 = b[:100]
    with Engine(model) as on, Engine(model, kv_cache=0) as off:
        on.run(a, max_new_tokens=1)
        for p in cases:
            got = on.run(p, max_new_tokens=3, stop_ids=())
            shared = int(np.argmin(np.append(p == a, False)))  # tokens equal to a's
            assert got.timings.n_cached == min(shared, n - 1) // 64 * 64
            assert got.tokens == off.run(p, max_new_tokens=3, stop_ids=()).tokens
        first = on.run(turn1, max_new_tokens=28, stop_ids=())
        turn2 = np.concatenate([turn1, first.tokens, a[:20]]).astype(np.int32)
        second = on.run(turn2, max_new_tokens=3, stop_ids=())
        assert second.timings.n_cached == 127
        assert second.tokens == off.run(turn2, max_new_tokens=3, stop_ids=()).tokens
    model.close()
