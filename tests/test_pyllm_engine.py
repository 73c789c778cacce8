"""The engine: streaming, timings, stop conditions, sampling seeds, several requests from
several threads at once (each equal to its solo run), cancellation, bad requests, close."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pyllm_util import smol

import pyllm
from pyllm.engine import Engine
from pyllm.errors import ContextOverflowError, EngineClosedError, PyllmError, TokenError
from pyllm.request import GenParams

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"


@pytest.fixture(scope="module")
def model():  # noqa: ANN201
    from pyllm.kernels import c_kernels

    return smol("c" if c_kernels() is not None else "numpy-q8")


@pytest.fixture
def engine(model):  # noqa: ANN001, ANN201
    with Engine(model) as e:
        yield e


def _greedy(model, prompt: list[int], n: int) -> list[int]:  # noqa: ANN001
    s = model.new_state(len(prompt) + n)
    lg, out = model.prefill(prompt, s), []
    for _ in range(n):
        out.append(int(np.argmax(lg)))
        lg = model.decode(out[-1], s)
    return out


def test_streams_greedy_tokens_with_timings(engine, model) -> None:  # noqa: ANN001
    events = list(engine.generate(PROMPT, max_new_tokens=12, stop_ids=()))
    ids = [e.token for e in events]
    assert ids == _greedy(model, PROMPT, 12)
    assert [e.index for e in events] == list(range(12))
    t = engine.last_timings
    assert t is not None and t.n_generated == 12 and t.stop_reason == "length"
    assert t.submitted <= t.started <= t.first_token <= t.token_times[-1] <= t.done
    assert t.token_times == sorted(t.token_times) and len(t.decode_steps_s) == 11
    assert t.ttft_s > 0 and t.tpot_s > 0 and t.load_s == model.info.load_seconds
    assert set(t.as_dict()) >= {"ttft_s", "tpot_s", "prefill_s", "queue_s", "decode_steps_s"}


def test_stops_on_eos_and_on_stop_ids(engine, model) -> None:  # noqa: ANN001
    chat = model.tokenizer.encode_chat([{"role": "user", "content": "What is 2+2?"}])
    req = engine.run(chat, max_new_tokens=32)
    assert req.tokens[-1] == 2 and req.timings.stop_reason == "eos" and len(req.tokens) < 32
    assert "4" in model.tokenizer.decode(req.tokens, skip_special=True)
    first = _greedy(model, PROMPT, 3)
    req = engine.run(PROMPT, max_new_tokens=10, stop_ids=(first[2],))
    assert req.tokens == first and req.timings.stop_reason == "stop"


def test_sampling_is_seeded(engine) -> None:  # noqa: ANN001
    p = GenParams(max_new_tokens=12, temperature=1.0, top_k=50, top_p=0.95, seed=7, stop_ids=())
    a = engine.run(PROMPT, p).tokens
    b = engine.run(PROMPT, p).tokens
    c = engine.run(PROMPT, GenParams(12, 1.0, 50, 0.95, seed=8, stop_ids=())).tokens
    assert a == b and a != c


def test_concurrent_requests_from_threads(engine, model) -> None:  # noqa: ANN001
    """Eight requests from four threads, batched together by the scheduler: each result equals
    the request run alone, and every request is served."""
    prompts = [PROMPT, list(range(1000, 1030)), [42] * 3, list(range(2000, 2100)),
               [1, 2, 3, 4, 5, 6], PROMPT[:2], list(range(300, 360)), [9000]]
    want = [_greedy(model, p, 8) for p in prompts]
    got: dict[int, list[int]] = {}
    firsts: dict[int, float] = {}

    def client(k: int) -> None:
        for i in (k, k + 4):
            req = engine.submit(prompts[i], max_new_tokens=8, stop_ids=())
            got[i] = req.wait(timeout=120)
            firsts[i] = req.timings.first_token

    ths = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert [got[i] for i in range(8)] == want
    assert engine.queue_depth == (0, 0)


@pytest.mark.parametrize("backend", ["numpy-f32", "c"])
def test_mixed_step_equals_one_by_one(backend: str) -> None:
    """Decode tokens of two sequences and a prompt chunk of a third in one step (one pass
    over the weights on the fast path): each gets the logits it gets alone -- the same
    greedy ids, within 1e-5 of the largest logit."""
    from pyllm.kernels import c_kernels

    if backend == "c" and c_kernels() is None:
        pytest.skip("C kernels not built")
    m = smol(backend)

    def items() -> list[tuple[object, np.ndarray]]:
        out = []
        for j, nxt in enumerate(([42], list(range(700, 709)), [1234])):
            st = m.new_state(64)
            m.prefill(list(range(100 + j, 110 + 3 * j)), st)
            out.append((st, np.array(nxt, np.int32)))
        return out

    batch, ref = items(), items()
    together = m.step(batch)
    alone = np.stack([m.prefill(t, st) if len(t) > 1 else m.decode(int(t[0]), st)
                      for st, t in ref])
    assert list(together.argmax(1)) == list(alone.argmax(1))
    assert np.abs(together - alone).max() <= 1e-5 * np.abs(alone).max()
    assert [st.pos for st, _ in batch] == [st.pos for st, _ in ref]


def test_requests_arriving_together_prefill_in_one_step(model) -> None:  # noqa: ANN001
    """Prompts queued together share one step's prefill budget (one pass over the weights),
    so they all start in the same step and decode together; each still gets its solo ids.
    A prompt the leftover budget would cut mid-block waits for the next step."""
    prompts = [PROMPT, list(range(1000, 1012)), [42] * 3, list(range(300, 320))]
    want = [_greedy(model, p, 6) for p in prompts]
    with Engine(model, prefill_chunk=64, cache_block=16) as e:
        with e._cv:  # hold the scheduler so that all four are queued before its next step
            reqs = [e.submit(p, max_new_tokens=6, stop_ids=()) for p in prompts]
        got = [r.wait(timeout=120) for r in reqs]
        assert got == want
        assert len({r.timings.started for r in reqs}) == 1  # 5 + 12 + 3 + 20 <= 64 tokens
        assert max(r.timings.first_token for r in reqs) < min(
            r.timings.token_times[1] for r in reqs)  # every first token in the same step
        # 60 + 60 tokens: the second request's share (4 tokens) would end mid-block
        with e._cv:
            big = [e.submit(list(range(2000 + 100 * k, 2060 + 100 * k)), max_new_tokens=2,
                            stop_ids=()) for k in range(2)]
        for r in big:
            r.wait(timeout=120)
        assert big[0].timings.started < big[1].timings.started
        assert big[1].timings.first_token > big[0].timings.token_times[1]


def test_interleaving_keeps_decoding_during_a_long_prefill(model) -> None:  # noqa: ANN001
    """A request already decoding keeps producing tokens while a long prompt is prefilled
    chunk by chunk (it is never stalled for the whole prompt)."""
    with Engine(model, prefill_chunk=32) as e:
        short = e.submit(PROMPT, max_new_tokens=40, stop_ids=())
        next(iter(short))  # decoding has started
        long = e.submit(list(range(1000, 1400)), max_new_tokens=2, stop_ids=())
        long.wait(timeout=120)
        during = [t for t in short.timings.token_times
                  if long.timings.started <= t <= long.timings.first_token]
        short.wait(timeout=120)
    assert len(during) >= 5  # 400 tokens in chunks of 32 -> >= 12 steps with a decode each


def test_cancel_and_close(model) -> None:  # noqa: ANN001
    e = Engine(model)
    req = e.submit(PROMPT, max_new_tokens=500, stop_ids=())
    it = iter(req)
    next(it)
    req.cancel()
    assert len(req.wait(timeout=60)) < 500 and req.timings.stop_reason == "cancelled"
    queued = [e.submit(PROMPT, max_new_tokens=200, stop_ids=()) for _ in range(12)]
    e.close()
    assert all(r.done for r in queued)
    assert any(isinstance(r.error, EngineClosedError) for r in queued)
    with pytest.raises(EngineClosedError):
        e.submit(PROMPT)


def test_bad_requests_fail_in_the_caller(engine) -> None:  # noqa: ANN001
    with pytest.raises(TokenError):
        engine.submit([1, 99999])
    with pytest.raises(ContextOverflowError):
        engine.submit(list(range(100)), max_new_tokens=8100)
    with pytest.raises(PyllmError, match="max_new_tokens"):
        engine.submit(PROMPT, max_new_tokens=0)
    with pytest.raises(PyllmError, match="sampling"):
        engine.submit(PROMPT, temperature=-1)
    assert engine.run(PROMPT, max_new_tokens=2).tokens  # still serving


def test_callbacks_run_on_the_engine_thread(engine) -> None:  # noqa: ANN001
    seen: list[tuple[int, str]] = []
    done = threading.Event()
    req = engine.submit(PROMPT, max_new_tokens=4, stop_ids=(),
                        on_token=lambda r, ev: seen.append((ev.token,
                                                            threading.current_thread().name)),
                        on_done=lambda r: done.set())
    assert done.wait(60)
    assert [t for t, _ in seen] == req.tokens
    assert {n for _, n in seen} == {"pyllm-engine"}


def test_lazy_api_names() -> None:
    assert pyllm.Engine is Engine and pyllm.GenParams is GenParams
    assert "smol" in pyllm.known_models()


@pytest.mark.parametrize("which", ["smol", "qwen"])
def test_a_finished_requests_state_serves_the_next(which: str, model) -> None:  # noqa: ANN001
    """Engine._spare: the next request takes the finished one's state, reset, and samples
    the tokens a fresh state gives (at temperature 2, so that any difference in the logits
    shows: for Qwen3.5 a DeltaNet memory left over moves them by ~0.2); a request needing
    more room than any spare gets a new state."""
    if which == "qwen":
        from pathlib import Path

        from pyllm.kernels import c_kernels
        from pyllm.models import qwen35 as Q

        data = Path(__file__).parent / "data" / "qwen35" / "tiny_text"
        model = Q.from_hf(data, name="tiny_text", backend="c" if c_kernels() else "numpy-f32",
                          cache=False)
    vocab = model.info.vocab_size
    a = [(7 * i + 3) % vocab for i in range(40)]
    b = [(11 * i + 5) % vocab for i in range(23)]
    hot = GenParams(max_new_tokens=24, temperature=2.0, seed=5)
    with Engine(model, kv_cache=0) as fresh:
        want = fresh.submit(b, hot).wait()
    with Engine(model, kv_cache=0) as e:
        e.submit(a, max_new_tokens=6).wait()
        (spare,) = e._spare
        assert spare.pos > 0
        got = e.submit(b, hot).wait()
        assert e._spare == [spare] and got == want
        long = [(13 * i + 1) % vocab for i in range(200)]
        assert e.submit(long, max_new_tokens=60).wait() == _greedy(model, long, 60)
