"""Prefix caching (pyllm/prefix_cache.py, pyllm/engine.py): the block table's keys, LRU
eviction, reuse down to the token (tails, blocks used in part; a hybrid model only at its
snapshots), the course's counters, and for SmolLM2 and Qwen3.5 (tiny_text, with its DeltaNet
snapshots at every block and at prompt_n - 1; the synthetic 0.8B too) that a cache hit gives the
logits of a fresh prefill (exact path <= 1e-5, the C path the same greedy ids) for prompts
sharing 0-100 % of a prefix, after evictions, for concurrent requests sharing blocks, with
seeded sampling, and across the turns of a conversation (the second resumes right after the
first answer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyllm_util import smol

from pyllm.engine import Engine
from pyllm.models import qwen35 as Q
from pyllm.prefix_cache import PrefixCache, block_key, parse_size
from pyllm.request import GenParams

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
        from pyllm.kernels import c_kernels

        if c_kernels() is None:
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


def test_kv_reuse_is_the_longest_common_prefix() -> None:
    """KV-only: any prefix of any entry resumes, capped at prompt_n - 1 (the course's rule):
    inside a full block, a tail, a block used in part."""
    c = PrefixCache(1 << 20, block=4)
    a = np.arange(10, 18, dtype=np.int32)
    ka = c.keys(a)
    rows = {"k": np.zeros(4)}
    assert c.insert(ka[0], b"", a[:4], rows)
    assert c.insert(block_key(ka[0], a[4:7]), ka[0], a[4:7], {"k": np.zeros(3)})  # a tail
    assert c.lookup(np.concatenate([a[:7], [1]]))[1] == 7  # the whole tail
    assert c.lookup(np.concatenate([a[:6], [99, 1]]))[1] == 6  # the tail in part
    assert c.lookup(a[:7])[1] == 6  # still one token left to prefill
    assert c.lookup(np.array([10, 11, 99], np.int32))[1] == 2  # inside the first block
    assert c.lookup(np.array([99, 11], np.int32))[1] == 0
    picks, n = c.lookup(np.concatenate([a[:6], [99, 1]]))
    assert [len(b.ids) for b in picks] == [4, 3] and n == 6
    st = c.status()
    assert (st["hits"], st["misses"], st["restores"], st["tails"]) == (5, 1, 5, 1)


def test_kv_tails_give_way_to_entries_that_extend_them() -> None:
    """A KV-only tail holds nothing a longer sibling does not: the longer one replaces it
    (not an eviction) and a shorter one is not stored."""
    c = PrefixCache(1 << 20, block=4)
    a = np.arange(10, 18, dtype=np.int32)
    k0 = c.keys(a)[0]
    assert c.insert(k0, b"", a[:4], {"k": np.zeros(4)})
    assert c.insert(block_key(k0, a[4:6]), k0, a[4:6], {"k": np.zeros(2)})
    assert c.insert(block_key(k0, a[4:7]), k0, a[4:7], {"k": np.zeros(3)})
    assert [len(c.blocks[k].ids) for k in c.children(k0)] == [3]
    assert c.insert(block_key(k0, a[4:5]), k0, a[4:5], {"k": np.zeros(1)})  # covered
    assert c.insert(c.keys(a)[1], k0, a[4:8], {"k": np.zeros(4)})  # the whole block
    assert [len(c.blocks[k].ids) for k in c.children(k0)] == [4]
    assert c.stats.evictions == 0 and c.stats.entries_saved == 4
    assert c.used == sum(b.nbytes for b in c.blocks.values())
    assert c.status()["tails"] == sum(len(b.ids) < 4 for b in c.blocks.values()) == 0


def test_hybrid_resumes_only_at_a_snapshot() -> None:
    c = PrefixCache(1 << 20, block=4, recurrent=True)
    a = np.arange(10, 18, dtype=np.int32)
    ka = c.keys(a)
    snap = {"s": np.ones(4, np.float32)}
    assert c.insert(ka[0], b"", a[:4], {"k": np.zeros(4)}, snap)
    assert c.insert(block_key(ka[0], a[4:7]), ka[0], a[4:7], {"k": np.zeros(3)}, snap)
    assert c.insert(block_key(ka[0], a[4:6]), ka[0], a[4:6], {"k": np.zeros(2)})  # no snapshot
    assert c.lookup(np.concatenate([a[:7], [1]]))[1] == 7  # the tail's snapshot
    assert c.lookup(a[:7])[1] == 4  # 7 is past prompt_n - 1: the block's
    assert c.lookup(np.concatenate([a[:6], [99, 1]]))[1] == 4  # the tail not all matched
    assert c.lookup(np.array([10, 11, 12], np.int32))[1] == 0  # no snapshot inside a block
    assert c.insert(ka[1], ka[0], a[4:], {"k": np.zeros(4)})  # no snapshot: a link only
    assert c.lookup(np.concatenate([a, [1]]))[1] == 7
    assert c.insert(ka[1], ka[0], a[4:], {"k": np.zeros(4)}, snap)  # it gains one
    assert c.lookup(np.concatenate([a, [1]]))[1] == 8
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
        shared = int(np.argmin(np.append(a == b, False)))  # leading tokens a and b share
        if model.recurrent:  # resumes at a snapshot: a block's end, or a's prompt_n - 1
            assert n == (N - 1 if shared >= N - 1 else shared // BLOCK * BLOCK)
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
    assert eng.cache.stats.restores == eng.cache.stats.hits == 3
    assert eng.cache.stats.saves > saves


def test_seeded_sampling_is_the_same_warm(model) -> None:  # noqa: ANN001
    a, _ = prompts(model, 0.0, seed=3)
    params = GenParams(max_new_tokens=8, temperature=0.9, top_k=40, seed=7, stop_ids=())
    with engine(model) as eng:
        cold = eng.run(a, params)
        warm = eng.run(a, params)
    assert cold.timings.n_cached == 0 and warm.timings.n_cached > 0
    assert warm.tokens == cold.tokens


COURSE_PROMPTS = {  # course_lab.md section 8: its tokenizer vector, prompt.txt, 1..16, 1 2 3
    "capital": [504, 3575, 282, 4649, 314], "prompt.txt": [1, 42, 314, 2718, 7, 99, 1234, 2048] * 4,
    "1..16": list(range(1, 17)), "1 2 3": [1, 2, 3]}


@pytest.mark.parametrize("name", list(COURSE_PROMPTS))
def test_the_course_counters_on_its_probe(model, name) -> None:  # noqa: ANN001
    """aitest --cacheprobe's pair on the course's prompts, blocks of 64 as served: the warm
    request reuses prompt_n - 1 tokens on both kinds of model and the counters read as the
    course's (one hit, one miss, one restore, one save); a one-token prompt bypasses."""
    p = [t % model.info.vocab_size for t in COURSE_PROMPTS[name]]
    with Engine(model, kv_cache=64 << 20) as eng:
        cold = eng.run(p, max_new_tokens=4, stop_ids=())
        warm = eng.run(p, max_new_tokens=4, stop_ids=())
        st = eng.cache.status()
        assert warm.tokens == cold.tokens
        assert (cold.timings.n_cached, warm.timings.n_cached) == (0, len(p) - 1)
        assert [st[k] for k in ("valid", "prefix_len", "hits", "misses", "restores", "saves",
                                "bypasses")] == [1, len(p) - 1, 1, 1, 1, 1, 0]
        for _ in range(2):
            eng.run([p[0]], max_new_tokens=2, stop_ids=())
        st = eng.cache.status()
        assert (st["hits"], st["misses"], st["saves"], st["bypasses"]) == (1, 1, 1, 2)


@pytest.mark.parametrize("answer", [40, 2 * BLOCK])
def test_a_conversation_reuses_the_previous_answer(model, answer) -> None:  # noqa: ANN001
    """The second turn resumes right after the first answer, before its last token (never
    fed): at token granularity for both models (a hybrid one from the snapshot taken as the
    first request ended), whether or not the first turn's text ends on a block boundary; an
    identical prompt resumes at prompt_n - 1."""
    a, b = prompts(model, 0.0, seed=4)
    with engine(model) as eng:
        first = eng.run(a, max_new_tokens=answer, stop_ids=())
        turn2 = np.concatenate([a, first.tokens, b[:20]]).astype(np.int32)
        second = eng.run(turn2, max_new_tokens=4, stop_ids=())
        third = eng.run(turn2, max_new_tokens=4, stop_ids=())  # the whole second prompt
    with Engine(model, kv_cache=0) as off:
        want = off.run(turn2, max_new_tokens=4, stop_ids=()).tokens
    assert second.tokens == third.tokens == want
    assert second.timings.n_cached == N + answer - 1
    assert third.timings.n_cached == turn2.size - 1


def test_snapshots_inside_a_chunk_equal_chunk_ends(model) -> None:  # noqa: ANN001
    """The recurrent state a forward pass hands out at each block boundary inside a chunk
    and at the extra positions asked for (ModelState.snap_block, snap_at) is the state after
    a chunk ending there."""
    if not model.recurrent:
        pytest.skip("no recurrent state")
    a, _ = prompts(model, 0.0, seed=5)
    whole = model.new_state(N)
    whole.snap_block = BLOCK
    whole.snap_at = {37, N - 1, N, 2 * BLOCK}  # N is the end: the state itself, not kept
    model.prefill(a, whole)
    points = sorted({*range(BLOCK, N, BLOCK), 37, N - 1})
    assert sorted(whole.snapshots) == points
    pieces = model.new_state(N)
    for start, end in zip([0, *points], points, strict=False):
        model.prefill(a[start:end], pieces)
        want = pieces.snapshot()
        for part, got in whole.snapshots[end].items():
            assert np.max(np.abs(got - want[part])) <= 1e-5 * max(1.0, np.max(np.abs(want[part])))


SYNTHETIC = Path(__file__).parents[1] / "models" / "qwen3.5-0.8b-synthetic"


@pytest.mark.slow
def test_synthetic_qwen_resumes_at_every_block_and_past_an_answer() -> None:
    """The 0.8B's shapes (the synthetic checkpoint, C path, blocks of 64): a prompt sharing
    0-100 % of a cached 130-token one resumes at its last shared block (the identical one at
    prompt_n - 1) and gives the greedy ids of a run without the cache; a conversation whose
    first turn ends on a block boundary (100 + 28 tokens) resumes one token before it."""
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
    # each request leaves up to 4 snapshots of 20 MB (2 blocks, prompt_n - 1, its text's end):
    # a budget that holds all six requests', so that none is evicted
    with Engine(model, kv_cache=640 << 20) as on, Engine(model, kv_cache=0) as off:
        on.run(a, max_new_tokens=1)
        for p in cases:
            got = on.run(p, max_new_tokens=3, stop_ids=())
            shared = int(np.argmin(np.append(p == a, False)))  # tokens equal to a's
            assert got.timings.n_cached == (n - 1 if shared == n else shared // 64 * 64)
            assert got.tokens == off.run(p, max_new_tokens=3, stop_ids=()).tokens
        first = on.run(turn1, max_new_tokens=28, stop_ids=())
        turn2 = np.concatenate([turn1, first.tokens, a[:20]]).astype(np.int32)
        second = on.run(turn2, max_new_tokens=3, stop_ids=())
        assert second.timings.n_cached == 127
        assert second.tokens == off.run(turn2, max_new_tokens=3, stop_ids=()).tokens
    model.close()
