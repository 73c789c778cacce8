"""Speculative decoding (pyllm/speculate/, pyllm/engine.py): the drafters (prompt lookup, the
bounded cache of earlier outputs), the adaptive draft length, the acceptance rule (greedy, and
Leviathan et al.'s when sampling: a statistical test that a wrong rule fails), verify rows and
the rollback of Qwen3.5's recurrent state, and through the engine: greedy output identical with
and without speculation over many prompts for SmolLM2 and Qwen3.5 (tiny, and the synthetic 0.8B
in a slow case), with batching, seeded sampling and the prefix cache."""

from __future__ import annotations

from array import array
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from pyllm_util import smol

from pyllm.engine import Engine
from pyllm.errors import PyllmError
from pyllm.models import qwen35 as Q
from pyllm.request import GenParams
from pyllm.specbench import PARAGRAPH, measure
from pyllm.speculate import adaptive
from pyllm.speculate.accept import accept, leviathan_point_mass
from pyllm.speculate.adaptive import DraftLength, best_length
from pyllm.speculate.drafter import Drafter
from pyllm.speculate.lookup import ContextIndex
from pyllm.speculate.suffix_cache import SuffixCache

QWEN_DATA = Path(__file__).parent / "data" / "qwen35"
SYNTHETIC = Path(__file__).parents[1] / "models" / "qwen3.5-0.8b-synthetic"
N_NEW = 40


def c_kernels_or_skip() -> None:
    from pyllm.kernels import c_kernels

    if c_kernels() is None:
        pytest.skip("C kernels not built")


def qwen_tiny(backend: str) -> Q.Qwen35:
    return Q.from_hf(QWEN_DATA / "tiny_text", name="tiny_text", backend=backend, cache=False)


@pytest.fixture(scope="module")
def smol_c():  # noqa: ANN201
    c_kernels_or_skip()
    return smol("c")


@pytest.fixture(scope="module", params=["c", "numpy-f32"])
def qwen(request):  # noqa: ANN001, ANN201
    if request.param == "c":
        c_kernels_or_skip()
    return qwen_tiny(request.param)


# ---------------------------------------------------------------- drafters

def test_prompt_lookup_drafts_what_followed_the_latest_occurrence() -> None:
    idx = ContextIndex([5, 6, 7, 8, 1, 2, 9, 6, 7, 3, 4, 6, 7])
    n, draft = idx.draft(2)
    assert (n, draft) == (2, [3, 4])  # "6 7" last seen before "3 4", not before "8 1"
    # "2 3" was last followed by 8, but "1 2 3" by 9: the longest suffix found wins
    assert ContextIndex([1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3]).draft(2) == (3, [9, 5])
    assert ContextIndex([1, 2, 3]).draft(4) == (0, [])  # nothing repeats
    assert ContextIndex([1, 2, 3, 1], min_n=2).draft(4) == (0, [])  # one token is too short


def test_prompt_lookup_drafts_a_loop_beyond_the_end_of_the_text() -> None:
    """A loop of period 3: the continuation runs into the text's end and goes on with the
    drafted tokens themselves, so the whole draft follows the loop."""
    idx = ContextIndex([9, 1, 2, 3, 1, 2, 3, 1])
    assert idx.draft(8) == (4, [2, 3, 1, 2, 3, 1, 2, 3])


def test_indexing_at_once_equals_token_by_token() -> None:
    """A prompt is indexed in bulk (zip), generated tokens one at a time: the same table, and
    the cache's n-gram keys are those of the plain definition, for any split and length."""
    rng = np.random.default_rng(2)
    cache = SuffixCache()
    for _ in range(500):
        ids = rng.integers(0, int(rng.integers(2, 6)), int(rng.integers(0, 40))).tolist()
        split = int(rng.integers(0, len(ids) + 1))
        one = ContextIndex()
        for t in ids:
            one.extend([t])
        two = ContextIndex(ids[:split])
        two.extend(ids[split:])
        assert one.table == two.table == ContextIndex(ids).table
        plain = [(end, hash(tuple(ids[end - n:end]))) for end in range(1, len(ids))
                 for n in range(cache.min_n, min(cache.max_n, end) + 1)]
        assert sorted(cache._keys(array("i", ids))) == sorted(plain)


def test_suffix_cache_drafts_a_repeated_request_from_its_first_step() -> None:
    prompt, answer = list(range(100, 140)), [7, 8, 9, 10, 11, 12, 13]
    cache = SuffixCache(max_tokens=1000)
    cache.add(prompt, answer)
    d = Drafter(prompt, cache)
    assert d.draft(5) == [7, 8, 9, 10, 11]  # matched by the prompt's end
    d.extend([7, 8])
    assert d.draft(10) == [9, 10, 11, 12, 13]  # up to the cached answer's end
    cache.add(prompt, answer)  # the same sequence again: kept once
    assert cache.stats.duplicates == 1 and len(cache.seqs) == 1
    assert Drafter([1, 2, 3], cache).draft(5) == []


def test_suffix_cache_stays_within_its_bound() -> None:
    """Adding past max_tokens evicts the least recently used sequences with their index
    entries: the tokens held and the index stay bounded, the newest sequences still draft,
    the evicted ones no longer do, and a sequence used for a draft is kept longer."""
    rng = np.random.default_rng(0)
    cache = SuffixCache(max_tokens=2000, context=8)
    seqs = [rng.integers(0, 50000, 108).tolist() for _ in range(200)]
    per_token = cache.max_n - cache.min_n + 1
    for i, s in enumerate(seqs):
        cache.add(s[:8], s[8:])
        assert cache.held <= cache.max_tokens
        assert len(cache.table) <= per_token * cache.held
        if i == 10:  # seqs[0] is the oldest: a hit makes it the most recently used
            assert cache.match(seqs[0][:20]) is not None
        if i == 19:  # 18 fit: two evicted, the oldest but seqs[0]
            assert cache.match(seqs[0][:20]) is not None
            assert cache.match(seqs[1][:20]) is None and cache.match(seqs[2][:20]) is None
            assert cache.match(seqs[3][:20]) is not None
    assert cache.stats.evicted >= 180 and len(cache.seqs) == 2000 // 108
    assert cache.match(seqs[0][:20]) is None  # evicted in the end
    m = cache.match(seqs[-1][:20])
    assert m is not None and list(m.seq[m.end:m.end + 3]) == seqs[-1][20:23]
    assert cache.nbytes < 2000 * (4 + per_token * 200)
    full = cache.nbytes
    cache.clear()
    assert cache.held == 0 and not cache.table and cache.nbytes < full


# ---------------------------------------------------------------- the adaptive length

def test_best_length() -> None:
    assert best_length(0.0, 0.06, 8) == 0
    assert best_length(0.04, 0.06, 8) == 0  # not worth a row
    assert best_length(1.0, 0.06, 8) == 8
    assert 0 < best_length(0.6, 0.06, 8) < best_length(0.9, 0.06, 8)
    assert best_length(0.9, 0.5, 8) < best_length(0.9, 0.06, 8)  # a full batch drafts less


def test_row_cost_is_measured_from_the_steps() -> None:
    """Steps on the line T = 10 ms + 1 ms per row: a row costs 1/11 of a one-row step. Until
    the steps vary in size the prior holds; noise of a few percent moves the fit little."""
    rc = adaptive.RowCost(prior=0.3)
    for _ in range(50):
        rc.observe(3, 0.013)
    assert rc.value == 0.3  # one size only: nothing is known about the slope
    rng = np.random.default_rng(0)
    for i in range(300):
        rows = 1 + i % 9
        rc.observe(rows, (0.010 + 0.001 * rows) * rng.uniform(0.97, 1.03))
    assert abs(rc.value - 1 / 11) < 0.03
    for i in range(300):  # the machine gets busier: arithmetic, so rows, cost more
        rows = 1 + i % 9
        rc.observe(rows, 0.010 + 0.004 * rows)
    assert abs(rc.value - 4 / 14) < 0.02


def test_draft_length_falls_to_zero_and_only_probes_where_nothing_is_accepted() -> None:
    """Every draft rejected: within a few steps the length is 0; afterwards one token is
    drafted now and then, ever more rarely; once drafts are accepted again it climbs back."""
    dl = DraftLength(cap=8)
    lengths = []
    for _ in range(1000):
        k = dl.choose(0.06)
        lengths.append(k)
        dl.update(k, 0)
    first_zero = lengths.index(0)
    assert first_zero <= 8 and lengths[0] > 1
    later = lengths[first_zero:]
    assert set(later) == {0, 1}  # probes only
    probes = [i for i, k in enumerate(later) if k]
    assert 1000 // adaptive.MAX_INTERVAL - 2 <= len(probes) <= 1000 // adaptive.MAX_INTERVAL + 6
    assert np.diff(probes)[-1] == adaptive.MAX_INTERVAL + 1
    assert sum(lengths) < 40  # drafted tokens, all wasted: a few percent of one step each
    for _ in range(adaptive.MAX_INTERVAL + 40):  # drafts are right again
        k = dl.choose(0.06)
        dl.update(k, k)
    assert dl.choose(0.06) == 8


# ---------------------------------------------------------------- the acceptance rule

def test_accept_greedy() -> None:
    greedy = [5, 6, 7, 8, 9]
    assert accept([5, 6, 7, 8], lambda i: greedy[i]) == [5, 6, 7, 8, 9]  # all, and the bonus
    assert accept([5, 0, 7, 8], lambda i: greedy[i]) == [5, 6]  # the correction ends it
    assert accept([], lambda i: greedy[i]) == [5]
    assert accept([5, 6, 7], lambda i: greedy[i], stop=lambda t: t == 6) == [5, 6]


V = 3  # toy vocabulary
N_SAMPLES = 6000


def _toy() -> tuple[np.ndarray, np.ndarray]:
    """A toy bigram 'model': p(first token) and p(next | previous), fixed seed."""
    rng = np.random.default_rng(11)
    return rng.dirichlet(np.full(V, 2.0)), rng.dirichlet(np.full(V, 2.0), size=V)


def _draft_of(prev: int) -> list[int]:
    """A deterministic drafter: two tokens, a fixed function of the context."""
    d1 = (prev + 1) % V
    return [d1, (d1 * 3 + 1) % V]


def _generate(rule: str, rng: np.random.Generator) -> tuple[int, int, int]:
    """Three tokens: the first sampled, then one verify step of two drafts under `rule`,
    then plain sampling if the step left fewer than three."""
    p0, P = _toy()
    toks = [int(rng.choice(V, p=p0))]
    draft = _draft_of(toks[0])
    rows = [P[toks[0]], P[draft[0]], P[draft[1]]]  # row i: after the context and draft[:i]
    if rule == "coupled":  # the engine's form: x ~ p, accepted iff x is the draft
        toks += accept(draft, lambda i: int(rng.choice(V, p=rows[i])))
    else:
        for i, d in enumerate(draft):
            tok, ok = _RULES[rule](rows[i], d, rng)
            toks.append(tok)
            if not ok:
                break
        else:
            toks.append(int(rng.choice(V, p=rows[2])))  # the bonus token
    while len(toks) < 3:
        toks.append(int(rng.choice(V, p=P[toks[-1]])))
    return toks[0], toks[1], toks[2]


def _wrong_resample(p: np.ndarray, d: int, rng: np.random.Generator) -> tuple[int, bool]:
    """Wrong: on rejection sample from p itself, not the residual (d comes out too often)."""
    if rng.random() < p[d]:
        return d, True
    return int(rng.choice(V, p=p)), False


def _wrong_greedy_accept(p: np.ndarray, d: int, rng: np.random.Generator
                         ) -> tuple[int, bool]:
    """Wrong: accept the draft whenever it is p's most likely token."""
    if d == int(np.argmax(p)):
        return d, True
    return leviathan_point_mass(p, d, rng)


_RULES = {"leviathan": leviathan_point_mass, "wrong-resample": _wrong_resample,
          "wrong-greedy": _wrong_greedy_accept}


def _chi_square(rule: str) -> float:
    """Pearson's statistic of N_SAMPLES three-token sequences against the exact bigram
    probabilities (V**3 cells)."""
    p0, P = _toy()
    exact = p0[:, None, None] * P[:, :, None] * P[None, :, :]
    rng = np.random.default_rng(5)
    counts = np.zeros((V, V, V))
    for _ in range(N_SAMPLES):
        counts[_generate(rule, rng)] += 1
    expected = exact * N_SAMPLES
    return float(((counts - expected) ** 2 / expected).sum())


def _chi2_quantile(df: int, z: float) -> float:
    """Wilson-Hilferty: the chi-square quantile at the normal quantile z."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * np.sqrt(a)) ** 3


def test_sampling_rule_keeps_the_distribution() -> None:
    """Three-token sequences through a verify step of two deterministic drafts have the
    distribution of plain sampling, under Leviathan et al.'s rule (accept d with probability
    p(d), else sample p without d) and under the engine's coupled form of it; two wrong rules
    are caught by the same test (a fixed seed: the outcome is the same every run)."""
    df = V ** 3 - 1
    limit = _chi2_quantile(df, 3.72)  # p = 1e-4 under the null hypothesis
    assert _chi_square("leviathan") < limit
    assert _chi_square("coupled") < limit
    assert _chi_square("wrong-resample") > 10 * limit
    assert _chi_square("wrong-greedy") > 10 * limit


# ---------------------------------------------------------------- verify rows and rollback

@pytest.mark.parametrize("which", ["smol", "qwen-c", "qwen-f32"])
def test_verify_rows_equal_decoding_token_by_token(which: str) -> None:
    """A verify row of 9 tokens in a step with another sequence's decode token gives the
    logits of decoding the 9 one by one; on the C paths bit for bit (each row's arithmetic
    is the same whatever else is in the batch), so greedy speculation is exact. For Qwen3.5
    the recurrent state rolled back to any verify position equals the state of feeding only
    the tokens before it."""
    c_kernels_or_skip()
    m = {"smol": lambda: smol("c"), "qwen-c": lambda: qwen_tiny("c"),
         "qwen-f32": lambda: qwen_tiny("numpy-f32")}[which]()
    ids = np.random.default_rng(1).integers(10, 500, 40).astype(np.int32)
    for back in (0, 3, 8):
        a, b, other = m.new_state(64), m.new_state(64), m.new_state(64)
        for st, n in ((a, 29), (b, 29), (other, 5)):
            m.prefill(ids[:n], st)
        if m.recurrent:
            a.snap_at = set(range(30, 38))
        got = m.step([(other, ids[5:6]), (a, ids[29:38])], n_out=[1, 9])
        want = np.stack([m.decode(int(t), b) for t in ids[29:38]])
        assert got.shape == (10, m.info.vocab_size) and a.pos == 38
        assert np.array_equal(got[1:], want)
        a.rollback(38 - back)
        assert a.pos == 38 - back
        if m.recurrent:
            ref = m.new_state(64)  # the prompt as a's, then the accepted tokens
            m.prefill(ids[:29], ref)
            for t in ids[29:38 - back]:
                m.decode(int(t), ref)
            assert np.array_equal(a.ssm, ref.ssm) and np.array_equal(a.conv, ref.conv)
            assert 38 - back not in a.snapshots
            a.drop_snapshots()
            assert not a.snapshots
        after = m.new_state(64)  # decoding goes on from the rolled-back state exactly
        m.prefill(ids[:29], after)
        for t in ids[29:38 - back]:
            m.decode(int(t), after)
        assert np.array_equal(m.decode(7, a), m.decode(7, after))
    with pytest.raises(ValueError):
        m.step([(m.new_state(8), ids[:3])], n_out=[4])


# ---------------------------------------------------------------- through the engine

def _chat(model, text: str) -> list[int]:  # noqa: ANN001
    return list(model.tokenizer.encode_chat([{"role": "user", "content": text}]))


SMOL_CHATS = [
    "Tell me the capital of France.",
    "Rewrite the following paragraph in the present tense:\n\n" + PARAGRAPH,
    "Repeat this sentence three times: the quick brown fox jumps over the lazy dog.",
    "Correct the spelling: Teh wether was realy nice yesterdy, so we whent to teh beech.",
    "Write a Python function that returns the sum of a list of numbers.",
    "Summarise in one sentence: " + PARAGRAPH,
    "List the days of the week.",
    "What is 12 times 12?",
]
SMOL_RAW = ["The capital of France is", "1, 2, 3, 4, 5, 6,", "def fibonacci(n):\n"]


def test_greedy_output_is_the_same_smol(smol_c) -> None:  # noqa: ANN001
    """SmolLM2: chat prompts (quoting, repetitive, open), raw text and random ids give the
    same tokens with speculation as without; drafts are accepted (most on quoting)."""
    tok = smol_c.tokenizer
    rng = np.random.default_rng(3)
    prompts = [_chat(smol_c, t) for t in SMOL_CHATS] + [tok.encode(t) for t in SMOL_RAW]
    prompts += [rng.integers(100, 40000, 30).tolist() for _ in range(2)]
    accepted = []
    with Engine(smol_c, kv_cache=0, suffix_cache=0) as eng:
        for p in prompts:
            off = eng.run(p, GenParams(max_new_tokens=N_NEW, speculate=0))
            on = eng.run(p, GenParams(max_new_tokens=N_NEW, speculate=6))
            assert on.tokens == off.tokens
            t = on.timings
            assert t.n_generated == len(on.tokens) and t.n_steps < len(on.tokens)
            assert t.n_accepted <= t.n_drafted
            # each step: its accepted drafts and the token after them (unless one of them
            # ended the request)
            assert t.n_steps + t.n_accepted - 1 <= t.n_generated - 1 <= t.n_steps + t.n_accepted
            accepted.append(t.n_accepted)
            assert off.timings.n_drafted == 0 and off.timings.n_steps == len(off.tokens) - 1
    assert accepted[1] > N_NEW // 2  # the quoting prompt
    assert sum(a > 0 for a in accepted) >= len(prompts) // 2


@pytest.mark.parametrize("kv", [0, 16 << 20])
def test_greedy_output_is_the_same_qwen(qwen, kv) -> None:  # noqa: ANN001
    """Tiny Qwen3.5 (C and exact paths), with and without the prefix cache (blocks of 16, so
    verify rows pass block ends): random, repeating and looping prompts give the same tokens
    and the same logprobs (so the same logits: the recurrent state rolled back exactly) with
    speculation as without. The tiny model repeats one token, which prompt lookup drafts
    right every time, so the cache of earlier outputs is given a wrong version of each answer
    (every 8th token changed): its longer matches win, and some drafts are rejected."""
    ids = dict(np.load(QWEN_DATA / "golden.npz"))["tiny_text.ids"]
    rng = np.random.default_rng(4)
    prompts = [ids[:20], np.tile(ids[:7], 5), ids[5:60], np.concatenate([ids[:30], ids[:10]]),
               ids[3:4]] + [rng.integers(0, 512, 12) for _ in range(3)]
    accepted = rejected = 0
    with Engine(qwen, kv_cache=kv, cache_block=16, prefill_chunk=32) as eng:
        for p in prompts:
            p = p.astype(np.int32)
            params = GenParams(max_new_tokens=N_NEW, speculate=0, stop_ids=(), logprobs=1)
            off = eng.run(p, params)
            eng.suffix_cache.clear()
            eng.suffix_cache.add(p.tolist(), [(t + 1) % 512 if i % 8 == 7 else t
                                              for i, t in enumerate(off.tokens)])
            on = eng.run(p, replace(params, speculate=8))
            assert on.tokens == off.tokens
            assert [e.logprob for e in on] == [e.logprob for e in off]
            accepted += on.timings.n_accepted
            rejected += on.timings.n_drafted - on.timings.n_accepted
            if kv and len(p) > 1:
                assert on.timings.n_cached > 0  # the same prompt again
    assert accepted > len(prompts) and rejected >= len(prompts)


@pytest.mark.parametrize("which", ["smol", "qwen"])
def test_batched_requests_some_speculating(which: str) -> None:
    """Eight requests at once, half speculating, with the prefix cache on: each gets the
    tokens it gets alone without speculation; verify rows and prefill chunks share steps."""
    c_kernels_or_skip()
    if which == "smol":
        m = smol("c")
        prompts = [_chat(m, t) for t in SMOL_CHATS]
    else:
        m = qwen_tiny("c")
        ids = dict(np.load(QWEN_DATA / "golden.npz"))["tiny_text.ids"]
        prompts = [ids[i:i + 10 + 7 * i].tolist() for i in range(8)]
    with Engine(m, kv_cache=0) as plain:
        want = [plain.run(p, GenParams(max_new_tokens=N_NEW, speculate=0, stop_ids=())).tokens
                for p in prompts]
    with Engine(m, kv_cache=32 << 20, cache_block=16, prefill_chunk=64) as eng:
        for _ in range(2):  # the second time: prefix-cache hits, earlier outputs as drafts
            reqs = [eng.submit(p, GenParams(max_new_tokens=N_NEW, speculate=6 * (i % 2),
                                            stop_ids=())) for i, p in enumerate(prompts)]
            got = [r.wait(timeout=300) for r in reqs]
            assert got == want
            assert sum(r.timings.n_accepted for r in reqs[1::2]) > 0
            assert all(r.timings.n_drafted == 0 for r in reqs[0::2])


def test_seeded_sampling_is_the_same_with_speculation(smol_c) -> None:  # noqa: ANN001
    """The coupled acceptance draws one random number per emitted token, in order: a seeded
    sampling request gives the same tokens with speculation as without."""
    prompts = [_chat(smol_c, SMOL_CHATS[1]), _chat(smol_c, SMOL_CHATS[2])]
    with Engine(smol_c) as eng:
        for p in prompts:
            for seed in (1, 2):
                params = GenParams(max_new_tokens=N_NEW, temperature=0.7, top_p=0.9,
                                   seed=seed, stop_ids=())
                off = eng.run(p, replace(params, speculate=0))
                on = eng.run(p, params)
                assert on.tokens == off.tokens and on.timings.n_accepted > 0


@pytest.mark.parametrize("which", ["smol", "qwen"])
def test_prefix_cache_saves_of_a_speculating_request_are_exact(which: str) -> None:
    """A speculating request's text goes into the prefix cache as decoded text does: the next
    turn of the conversation resumes right after its answer and gives the tokens of a run
    without any cache. For Qwen3.5 the snapshots of the block ends its verify rows passed
    equal the state of a fresh pass over the same tokens."""
    c_kernels_or_skip()
    block = 16
    if which == "smol":
        m = smol("c")
        turn1 = _chat(m, SMOL_CHATS[1])
        extra = m.tokenizer.encode(" Now say it again.")
    else:
        m = qwen_tiny("c")
        ids = dict(np.load(QWEN_DATA / "golden.npz"))["tiny_text.ids"]
        turn1, extra = np.tile(ids[:9], 4).tolist(), ids[40:45].tolist()
    params = GenParams(max_new_tokens=48, speculate=8, stop_ids=())
    with Engine(m, kv_cache=64 << 20, cache_block=block) as eng, \
            Engine(m, kv_cache=0) as cold:
        first = eng.run(turn1, params)
        assert first.timings.n_accepted > 0
        assert first.tokens == cold.run(turn1, replace(params, speculate=0)).tokens
        text = turn1 + first.tokens
        turn2 = text + extra
        second = eng.run(turn2, params)
        assert second.timings.n_cached == len(text) - 1
        assert second.tokens == cold.run(turn2, replace(params, speculate=0)).tokens
        if m.recurrent:
            fed = len(text) - 1  # the last token was never fed
            keys = eng.cache.keys(np.asarray(text, np.int32), fed // block)
            assert fed // block > len(turn1) // block + 1  # block ends passed in decode
            for end, key in zip(range(block, fed + 1, block), keys, strict=True):
                snap = eng.cache.blocks[key].snapshot
                assert snap is not None
                ref = m.new_state(len(text))
                m.prefill(np.asarray(text[:end], np.int32), ref)
                assert np.array_equal(snap["ssm"], ref.ssm), end
                assert np.array_equal(snap["conv"], ref.conv), end


@pytest.mark.parametrize("budget", [0, 40 << 10, 64 << 20])
def test_no_snapshot_outlives_its_step(budget: int) -> None:
    """Qwen3.5's verify snapshots go back to the state's pool, or into the prefix cache,
    within the step that took them: whether the cache is off, too small to take them
    (it stops saving the sequence) or takes them."""
    c_kernels_or_skip()
    m = qwen_tiny("c")
    ids = dict(np.load(QWEN_DATA / "golden.npz"))["tiny_text.ids"]
    held: list[int] = []

    def watch(req, ev) -> None:  # noqa: ANN001
        held.append(len(req.state.snapshots))

    with Engine(m, kv_cache=budget, cache_block=16) as eng:
        for p in (ids[:20], np.tile(ids[:7], 5)):
            req = eng.submit(p, GenParams(max_new_tokens=80, speculate=8, stop_ids=()),
                             on_token=watch)
            req.wait(timeout=120)
            assert req.timings.n_accepted > 40
    assert len(held) == 160 and max(held) == 0


def test_timings_and_parameters(smol_c) -> None:  # noqa: ANN001
    """TPOT counts tokens, not steps: one TokenEvent and one time per token, several per
    step; the counters are in as_dict; a negative speculate is refused."""
    p = _chat(smol_c, SMOL_CHATS[1])
    with Engine(smol_c) as eng:
        events = list(eng.generate(p, GenParams(max_new_tokens=N_NEW, speculate=8,
                                                stop_ids=())))
        t = eng.last_timings
        assert t is not None
        assert [e.index for e in events] == list(range(N_NEW)) == list(range(t.n_generated))
        assert t.token_times == [e.t for e in events] == sorted(t.token_times)
        assert t.tokens_per_step == (N_NEW - 1) / t.n_steps > 1.5
        assert t.acceptance_rate == t.n_accepted / t.n_drafted
        d = t.as_dict()
        assert {"n_steps", "n_drafted", "n_accepted", "tokens_per_step",
                "acceptance_rate"} <= set(d)
        assert d["tpot_s"] == (t.token_times[-1] - t.token_times[0]) / (N_NEW - 1)
        with pytest.raises(PyllmError, match="speculate"):
            eng.submit(p, max_new_tokens=4, speculate=-1)
        lp = eng.run(p, GenParams(max_new_tokens=12, speculate=8, logprobs=2, stop_ids=()))
        lp0 = eng.run(p, GenParams(max_new_tokens=12, speculate=0, logprobs=2, stop_ids=()))
        assert lp.tokens == lp0.tokens


def test_measure_reports_the_workloads(smol_c) -> None:  # noqa: ANN001
    """The benchmark function (pyllm/specbench.py): its report's shape; the speculating
    runs give the same tokens; the repeated request is drafted from the earlier answer."""
    with Engine(smol_c) as eng:
        rep = measure(eng, rounds=1, max_new_tokens=24, clients=2)
    assert [w.name for w in rep.workloads] == ["demo", "quote", "repeat"]
    assert all(w.same_output for w in rep.workloads)
    repeat = rep.workloads[2]
    assert repeat.acceptance > 0.9 and repeat.tokens_per_step > 3
    assert all(w.tpot_on_s > 0 and w.tpot_off_s > 0 and w.ratio > 0 for w in rep.workloads)
    assert rep.throughput is not None and rep.throughput.clients == 2
    d = rep.as_dict()
    assert d["workloads"][1]["name"] == "quote" and d["throughput"]["ratio"] > 0


def test_the_draft_policy_never_costs_more_than_three_percent(smol_c) -> None:  # noqa: ANN001
    """The drafter and the adaptive length replayed over SmolLM2's greedy answers to many
    prompts (no clock: a step of k drafts costs 1 + c k steps): for a row cost c from an idle
    machine's to a loaded one's, no workload costs more than 1.03 times decoding without
    speculation, and the quoting one less than half; with the earlier answer cached, a
    repeated request less than a third. The last two prompts have answers whose n-grams recur
    with other continuations (numbers): drafting every match there would cost up to ~1.2."""
    from pyllm.specbench import replay

    chats = SMOL_CHATS + ["List the first 30 prime numbers.",
                          "Write the multiplication table of 7."]
    with Engine(smol_c, kv_cache=0) as eng:
        runs = [(p, eng.run(p, GenParams(max_new_tokens=128, speculate=0)).tokens)
                for p in [_chat(smol_c, t) for t in chats]]
    for cost in (0.06, 0.15):
        ratios = [replay(p, out, cost).cost_ratio for p, out in runs]
        assert max(ratios) <= 1.03, ratios
        assert ratios[1] < 0.5  # the quoting prompt
        cache = SuffixCache()
        cache.add(*runs[6])
        assert replay(*runs[6], cost, cache=cache).cost_ratio < 1 / 3


@pytest.mark.slow
def test_synthetic_qwen_speculates_exactly() -> None:
    """The 0.8B's shapes (synthetic weights, C path): a repeated request is drafted from the
    earlier answer, every draft accepted, the tokens those of decoding without speculation;
    and with the prefix cache on (blocks of 64) the snapshots its verify rows took at block
    ends let the next turn resume after the answer."""
    if not SYNTHETIC.is_dir():
        pytest.skip("no synthetic Qwen3.5 (see models/README.md)")
    from pyllm import registry

    model = registry.load(SYNTHETIC)
    prompt = np.random.default_rng(7).integers(10, 40000, 70).tolist()
    try:
        with Engine(model, kv_cache=256 << 20) as eng:
            first = eng.run(prompt, GenParams(max_new_tokens=40, speculate=0, stop_ids=()))
            again = eng.run(prompt, GenParams(max_new_tokens=40, speculate=8, stop_ids=()))
            assert again.tokens == first.tokens
            assert again.timings.n_accepted == again.timings.n_drafted > 20
            turn2 = prompt + again.tokens + [11, 12]
            nxt = eng.run(turn2, GenParams(max_new_tokens=4, speculate=8, stop_ids=()))
            assert nxt.timings.n_cached == len(prompt) + 40 - 1
        with Engine(model, kv_cache=0) as cold:
            assert nxt.tokens == cold.run(turn2, GenParams(max_new_tokens=4, speculate=0,
                                                           stop_ids=())).tokens
    finally:
        model.close()
