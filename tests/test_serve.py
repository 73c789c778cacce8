"""`harness serve` against the official openai client, unmodified.

The server runs as a separate process (`python -m harness serve --port 0`, harness/serve/
process.py), loaded with SmolLM2; every answer is checked against the client's own types
(`Completion.model_validate` of the raw JSON) and against the local engine: greedy ids through
HTTP are the ids pyllm's Engine produces in this process for the same prompt. A second server
with `--max-waiting 1` shows back-pressure (429) and cancel on disconnect; a tiny Qwen3.5
checkpoint served by path shows a recurrent model (prefix-cache snapshots) through HTTP.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyllm_util import ROOT, smol, smol_path

openai = pytest.importorskip("openai")
from openai.types import Completion, Model  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

from harness.serve.process import ServerProcess  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot",
           "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    smol_path()  # skips without the model
    with ServerProcess("smol") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Any:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    """The local reference: pyllm's engine on the same model, in this process."""
    from pyllm.engine import Engine

    with Engine(smol()) as e:
        yield e


def local_greedy(engine: Any, ids: list[int], n: int) -> list[int]:
    return engine.run(ids, max_new_tokens=n).tokens


def at_once(fn: Callable[[int], Any], n: int) -> list[Any]:
    """fn(0), ..., fn(n-1) on n threads released together; their results in order."""
    out: list[Any] = [None] * n
    go = threading.Barrier(n)

    def run(i: int) -> None:
        go.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def raw_json(resp: Any) -> dict[str, Any]:
    return json.loads(resp.text)


def metrics(srv: ServerProcess) -> dict[str, float]:
    """Every sample of /metrics: 'name{label=value,...}' -> value (model_name left out)."""
    text = httpx.get(f"{srv.root}/metrics").text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                              if k != "model_name")
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def wait_idle(srv: ServerProcess, timeout_s: float = 30.0) -> dict[str, float]:
    """Poll /metrics until no request runs or waits; return the last sample."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(srv)
        if m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"requests still in the engine after {timeout_s} s: {m}")
        time.sleep(0.1)


# ---------------------------------------------------------------- ids -> text (no server)
def test_output_stop_strings_across_tokens() -> None:
    """A stop string split over several ids is found; the text before it is released, what
    might start it is held back; a stop id ends the answer without its text."""
    from harness.serve.generate import Output

    tok = smol().tokenizer
    ids = tok.encode("Hello there, general Kenobi. You are a bold one.")
    whole = tok.decode(ids)
    out = Output(tok, max_tokens=100, stop_ids=(), stop_strings=["Kenobi", "zzz"])
    released = ""
    for i in ids:
        released += out.push(i)
        if out.finish:
            break
    assert released == whole[:whole.index("Kenobi")] == out.all_text
    assert out.finish == "stop" and tok.decode(out.ids).endswith("Kenobi")
    out = Output(tok, max_tokens=100, stop_ids=(ids[3],))
    text = "".join(out.push(i) for i in ids[:4])
    assert text == tok.decode(ids[:3]) and out.finish == "stop" and out.ids == ids[:4]
    out = Output(tok, max_tokens=3, stop_ids=(), stop_strings=["@@"])
    assert "".join(out.push(i) for i in ids[:3]) == tok.decode(ids[:3])
    assert out.finish == "length"
    snow = tok.encode("snow ☃ man")  # a character of several bytes, perhaps over several ids
    out = Output(tok, max_tokens=100, stop_ids=())
    pieces = [out.push(i) for i in snow]
    assert "".join(pieces) == "snow ☃ man" and all("\ufffd" not in p for p in pieces)


# ---------------------------------------------------------------- models, health, tokenizer
def test_models_and_health(server: ServerProcess, client: Any) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["smol"]
    raw = httpx.get(f"{server.url}/models").json()
    assert raw["object"] == "list"
    card = raw["data"][0]
    Model.model_validate(card)
    assert card["owned_by"] == "pyllm" and card["object"] == "model"
    assert card["max_model_len"] == smol().info.max_context
    assert isinstance(card["created"], int)
    assert httpx.get(f"{server.root}/health").status_code == 200


def test_tokenize_detokenize(server: ServerProcess) -> None:
    tok = smol().tokenizer
    text = "Hello, world! Ünïcode too."
    r = httpx.post(f"{server.root}/tokenize", json={"model": "smol", "prompt": text}).json()
    assert r["tokens"] == tok.encode(text) and r["count"] == len(r["tokens"])
    assert r["max_model_len"] == smol().info.max_context
    back = httpx.post(f"{server.root}/detokenize", json={"model": "smol", "tokens": r["tokens"]})
    assert back.json() == {"prompt": text, "content": text}  # vLLM's key and llama.cpp's
    # llama.cpp server's request: `content`, `with_pieces`
    r2 = httpx.post(f"{server.root}/tokenize", json={"content": text, "with_pieces": True,
                                                      "add_special": True}).json()
    assert [t["id"] for t in r2["tokens"]] == r["tokens"]
    assert [t["piece"] for t in r2["tokens"]] == [tok.decode([i]) for i in r["tokens"]]
    info = httpx.get(f"{server.root}/tokenizer_info").json()  # lm-eval's remote tokenizer
    assert info["eos_token"] == "<|im_end|>" and "{% for message in messages %}" in \
        info["chat_template"] and info["model_max_length"] == smol().info.max_context
    msgs = [{"role": "user", "content": "Hi"}]
    r = httpx.post(f"{server.root}/tokenize", json={"model": "smol", "messages": msgs}).json()
    assert r["tokens"] == tok.encode_chat(msgs)
    bad = httpx.post(f"{server.root}/detokenize", json={"model": "smol", "tokens": [10 ** 7]})
    assert bad.status_code == 400 and "vocabulary" in bad.json()["error"]["message"]


# ---------------------------------------------------------------- completions
def test_completion_text_matches_local_engine(client: Any, engine: Any) -> None:
    raw = client.completions.with_raw_response.create(
        model="smol", prompt=PROMPTS[0], max_tokens=8, temperature=0)
    body = raw_json(raw)
    resp = Completion.model_validate(body)
    tok = smol().tokenizer
    want = local_greedy(engine, tok.encode(PROMPTS[0]), 8)
    assert resp.object == "text_completion" and resp.model == "smol"
    assert resp.choices[0].text == tok.decode(want, skip_special=True)
    assert resp.choices[0].finish_reason in ("length", "stop")
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(tok.encode(PROMPTS[0]))
    assert resp.usage.completion_tokens == len(want)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + len(want)
    assert "token_ids" not in body["choices"][0]  # only with return_token_ids


def _ids_request(client: Any, ids: list[int], n: int) -> dict[str, Any]:
    raw = client.completions.with_raw_response.create(
        model="smol", prompt=ids, max_tokens=n, temperature=0,
        extra_body={"return_token_ids": True})
    body = raw_json(raw)
    Completion.model_validate(body)
    return body


def test_token_id_prompts_equal_local_greedy(client: Any, engine: Any) -> None:
    tok = smol().tokenizer
    for text in PROMPTS:
        ids = tok.encode(text)
        body = _ids_request(client, ids, 12)
        choice = body["choices"][0]
        want = local_greedy(engine, ids, 12)
        assert choice["token_ids"] == want, text
        assert body["prompt_token_ids"] == ids and choice["prompt_token_ids"] == ids
        assert choice["text"] == tok.decode(want, skip_special=True)
        assert body["usage"]["completion_tokens"] == len(want)


def test_concurrent_clients_equal_local_greedy(client: Any, engine: Any) -> None:
    """8 clients at once (one engine batch): each gets the ids of its prompt alone."""
    tok = smol().tokenizer
    prompts = [tok.encode(p + suffix) for p in PROMPTS for suffix in ("", " and")]
    want = [local_greedy(engine, ids, 10) for ids in prompts]
    got = at_once(lambda i: _ids_request(client, prompts[i], 10)["choices"][0]["token_ids"],
                  len(prompts))
    assert got == want


def test_streaming_completion(client: Any) -> None:
    ids = smol().tokenizer.encode(PROMPTS[2])
    whole = _ids_request(client, ids, 16)
    chunks = list(client.completions.create(
        model="smol", prompt=ids, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True}))
    *token_chunks, usage_chunk = chunks
    for c in token_chunks[:-1]:  # finish_reason null until the last (as OpenAI's stream)
        assert c.choices[0].finish_reason is None
    Completion.model_validate(token_chunks[-1].model_dump())
    text = "".join(c.choices[0].text for c in token_chunks)
    stream_ids = [i for c in token_chunks for i in c.choices[0].model_extra["token_ids"]]
    assert text == whole["choices"][0]["text"]
    assert stream_ids == whole["choices"][0]["token_ids"]
    assert token_chunks[0].model_extra["prompt_token_ids"] == ids
    assert token_chunks[-1].choices[0].finish_reason == whole["choices"][0]["finish_reason"]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == len(stream_ids)
    assert usage_chunk.usage.prompt_tokens == len(ids)


def test_stream_wire_format(server: ServerProcess) -> None:
    """Server-sent events as OpenAI sends them: `data: {json}` blocks, then `data: [DONE]`."""
    with httpx.stream("POST", f"{server.url}/completions", json={
            "model": "smol", "prompt": "Hi", "max_tokens": 3, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        body = r.read().decode()
    events = body.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for e in events[:-2]:
        assert e.startswith("data: ")
        assert json.loads(e[6:])["object"] == "text_completion"


def test_stop_strings(server: ServerProcess, client: Any) -> None:
    before = wait_idle(server)
    base = client.completions.create(model="smol", prompt=PROMPTS[2], max_tokens=24,
                                     temperature=0, extra_body={"ignore_eos": True})
    text = base.choices[0].text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop.strip(), text  # a visible piece of the text to stop at
    cut = text[:text.index(stop)]
    r = client.completions.create(model="smol", prompt=PROMPTS[2], max_tokens=24,
                                  temperature=0, stop=["@@never@@", stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(
        model="smol", prompt=PROMPTS[2], max_tokens=24, temperature=0, stop=stop, stream=True,
        extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"
    after = wait_idle(server)  # counted as they ended, not as aborted by the stop string

    def count(m: dict[str, float], reason: str) -> float:
        return m.get(f"vllm:request_success_total{{finished_reason={reason}}}", 0)

    assert count(after, "stop") - count(before, "stop") == 2
    assert count(after, "length") - count(before, "length") == 1
    assert count(after, "abort") == count(before, "abort")


def test_stop_token_ids_and_ignore_eos(client: Any) -> None:
    base = _ids_request(client, smol().tokenizer.encode(PROMPTS[1]), 10)["choices"][0]
    stop_id = base["token_ids"][3]
    first = base["token_ids"].index(stop_id)
    r = client.completions.create(model="smol", prompt=PROMPTS[1], max_tokens=10, temperature=0,
                                  extra_body={"stop_token_ids": [stop_id],
                                              "return_token_ids": True})
    assert r.choices[0].model_extra["token_ids"] == base["token_ids"][:first + 1]
    assert r.choices[0].finish_reason == "stop"
    long = client.completions.create(model="smol", prompt="Hi", max_tokens=40, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 40 and long.choices[0].finish_reason == "length"


def test_seed_reproducible(client: Any) -> None:
    def sample(seed: int) -> list[int]:
        r = client.completions.create(
            model="smol", prompt=PROMPTS[2], max_tokens=16, temperature=1.0, top_p=0.95,
            seed=seed, extra_body={"top_k": 50, "return_token_ids": True, "ignore_eos": True})
        return r.choices[0].model_extra["token_ids"]

    a = sample(7)
    assert sample(7) == a
    assert any(sample(s) != a for s in (1, 2, 3))


def test_seeded_sampling_equals_local_engine(client: Any, engine: Any) -> None:
    """The same seed and parameters sample the same ids through HTTP as in the engine here."""
    ids = smol().tokenizer.encode(PROMPTS[3])
    for seed, temp, top_p, top_k in ((11, 0.8, 0.9, 40), (12, 1.2, 1.0, 0)):
        r = client.completions.create(model="smol", prompt=ids, max_tokens=12, temperature=temp,
                                      top_p=top_p, seed=seed,
                                      extra_body={"top_k": top_k, "return_token_ids": True})
        want = engine.run(ids, max_new_tokens=12, temperature=temp, top_p=top_p, top_k=top_k,
                          seed=seed).tokens
        assert r.choices[0].model_extra["token_ids"] == want


# ---------------------------------------------------------------- what evaluation clients use
def test_echo_logprobs_equal_the_local_model(client: Any, engine: Any) -> None:
    """lm-evaluation-harness's loglikelihood request (echo, logprobs=1, max_tokens=1): each
    prompt token's logprob is log_softmax of the model's logits after the tokens before it
    (a separate prefill of that prefix here), the generated one's too; max_tokens=0 scores the
    prompt alone."""
    from pyllm.logprobs import log_softmax

    model = smol()
    ids = model.tokenizer.encode(PROMPTS[0] + " Paris, a city")
    raw = client.completions.with_raw_response.create(model="smol", prompt=ids, max_tokens=1,
                                                      temperature=0, echo=True, logprobs=1)
    body = raw_json(raw)
    # (not Completion.model_validate: the openai types declare floats, but the API, like vLLM,
    # gives null for the echoed first token, which nothing predicts; the client itself reads it)
    lp = client.completions.create(model="smol", prompt=ids, max_tokens=1, temperature=0,
                                   echo=True, logprobs=1).choices[0].logprobs
    assert body["choices"][0]["logprobs"]["token_logprobs"] == lp.token_logprobs
    assert len(lp.tokens) == len(ids) + 1 and lp.token_logprobs[0] is None
    assert lp.top_logprobs[0] is None and body["choices"][0]["text"].startswith(PROMPTS[0])
    assert lp.tokens[:len(ids)] == [model.tokenizer.decode([i]) for i in ids]
    gen = local_greedy(engine, ids, 1)[0]
    for i, target in enumerate([*ids[1:], gen], start=1):
        want = log_softmax(model.prefill(ids[:i], model.new_state(i + 1)))
        assert abs(lp.token_logprobs[i] - want[target]) < 0.05, i
        top_text = model.tokenizer.decode([int(np.argmax(want))])
        assert top_text in lp.top_logprobs[i]  # the most likely token, and the token itself
        assert max(lp.top_logprobs[i].values()) >= lp.token_logprobs[i]
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    only = client.completions.create(model="smol", prompt=ids, max_tokens=0, echo=True,
                                     logprobs=0)
    assert only.choices[0].logprobs.token_logprobs == lp.token_logprobs[:len(ids)]
    assert only.usage.completion_tokens == 0


def test_n_choices_and_several_prompts(client: Any, engine: Any) -> None:
    """Two prompts x n=2: four choices, index = prompt * n + sample; greedy samples equal
    the local engine's ids, seeded ones its ids with seed + sample."""
    tok = smol().tokenizer
    prompts = [tok.encode(PROMPTS[0]), tok.encode(PROMPTS[3])]
    r = client.completions.create(model="smol", prompt=prompts, n=2, max_tokens=6,
                                  temperature=0, extra_body={"return_token_ids": True})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:
        assert c.model_extra["token_ids"] == local_greedy(engine, prompts[c.index // 2], 6)
        assert c.model_extra["prompt_token_ids"] == prompts[c.index // 2]
    assert r.usage.prompt_tokens == sum(map(len, prompts))
    r = client.completions.create(model="smol", prompt=prompts[1], n=3, max_tokens=8,
                                  temperature=1.0, seed=21,
                                  extra_body={"return_token_ids": True, "ignore_eos": True})
    got = [c.model_extra["token_ids"] for c in r.choices]
    assert got == [engine.run(prompts[1], max_new_tokens=8, temperature=1.0, seed=21 + j,
                              stop_ids=()).tokens for j in range(3)]
    stream = client.completions.create(model="smol", prompt=prompts[0], n=2, max_tokens=5,
                                       temperature=0, stream=True, echo=True, logprobs=1)
    text = ["", ""]
    finish = [None, None]
    for chunk in stream:
        for c in chunk.choices:
            text[c.index] += c.text
            finish[c.index] = c.finish_reason or finish[c.index]
    want = PROMPTS[0] + tok.decode(local_greedy(engine, prompts[0], 5), skip_special=True)
    assert text == [want, want] and finish == ["length", "length"]


def test_chat_top_logprobs(client: Any, engine: Any) -> None:
    msgs = [{"role": "user", "content": "Say hello."}]
    raw = client.chat.completions.with_raw_response.create(
        model="smol", messages=msgs, max_tokens=5, temperature=0, logprobs=True,
        top_logprobs=3, n=2)
    resp = ChatCompletion.model_validate(raw_json(raw))
    want = local_greedy(engine, smol().tokenizer.encode_chat(msgs), 5)
    for choice in resp.choices:
        content = choice.logprobs.content
        assert len(content) == len(want)
        for t in content:
            assert len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob == t.logprob  # greedy
            assert bytes(t.bytes) == t.token.encode()


# ---------------------------------------------------------------- chat
def test_chat(client: Any, engine: Any) -> None:
    msgs = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "What is the capital of France?"}]
    tok = smol().tokenizer
    ids = tok.encode_chat(msgs)
    want = local_greedy(engine, ids, 12)
    raw = client.chat.completions.with_raw_response.create(
        model="smol", messages=msgs, max_tokens=12, temperature=0,
        extra_body={"return_token_ids": True})
    body = raw_json(raw)
    resp = ChatCompletion.model_validate(body)
    assert resp.object == "chat.completion"
    assert body["prompt_token_ids"] == ids and body["choices"][0]["token_ids"] == want
    msg = resp.choices[0].message
    assert msg.role == "assistant" and msg.content == tok.decode(want, skip_special=True)
    assert resp.usage is not None and resp.usage.prompt_tokens == len(ids)

    stream = client.chat.completions.create(
        model="smol", messages=msgs, max_completion_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    for c in chunks:
        if c.choices and c.choices[0].finish_reason is not None:
            ChatCompletionChunk.model_validate(c.model_dump())
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(want)


def test_chat_content_parts(client: Any) -> None:
    parts = [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi."}]
    a = client.chat.completions.create(model="smol", messages=[{"role": "user",
                                                                "content": parts}],
                                       max_tokens=6, temperature=0)
    b = client.chat.completions.create(model="smol", messages=[{"role": "user",
                                                                "content": "Say hi."}],
                                       max_tokens=6, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content


# ---------------------------------------------------------------- errors
def test_errors(server: ServerProcess, client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    assert nf.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="smol", prompt=[1, 2, 10 ** 6], max_tokens=2)
    assert "out of the vocabulary" in bad.value.message
    ctx = smol().info.max_context
    with pytest.raises(openai.BadRequestError) as long:
        client.completions.create(model="smol", prompt=[1] * (ctx - 4), max_tokens=16)
    assert "context" in long.value.message
    for bad_params in ({"temperature": -1}, {"top_p": 0}, {"n": 0}, {"n": 17},
                       {"max_tokens": 0}, {"prompt": []}, {"prompt": ["a", ""]}, {"prompt": 5},
                       {"logprobs": 21}, {"logprobs": -1}, {"prompt": [[1, 2], [1, 10 ** 6]]}):
        r = httpx.post(f"{server.url}/completions",
                       json={"model": "smol", "prompt": "hi", "max_tokens": 2} | bad_params)
        assert r.status_code == 400, (bad_params, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="smol", messages=[], max_tokens=2)
    r = httpx.post(f"{server.url}/chat/completions", json={
        "model": "smol", "messages": [{"role": "wizard", "content": "hi"}]})
    assert r.status_code == 400
    r = httpx.post(f"{server.url}/chat/completions", json={
        "model": "smol", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})
    assert r.status_code == 400 and "needs logprobs" in r.json()["error"]["message"]
    # what starlette refuses before our code runs comes in the same shape (not {"detail"})
    for method, url, body in (("POST", f"{server.url}/completions", b"\xff\xfe{}"),
                              ("POST", f"{server.url}/completions", b"{bad json"),
                              ("GET", f"{server.root}/nope", b""),
                              ("GET", f"{server.url}/completions", b"")):
        r = httpx.request(method, url, content=body, headers={"content-type": "application/json"})
        assert r.status_code in (400, 404, 405), (url, r.status_code)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], r.text
    # the server is unharmed
    assert client.completions.create(model="smol", prompt="hi", max_tokens=2).choices[0].text


# ---------------------------------------------------------------- metrics
def test_metrics_names_and_counters(server: ServerProcess, client: Any) -> None:
    before = wait_idle(server)
    for name in ("vllm:time_to_first_token_seconds_count",
                 "vllm:time_per_output_token_seconds_count",
                 "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total"):
        assert name in before, name
    text = httpx.get(f"{server.root}/metrics").text
    assert 'vllm:prompt_tokens_total{model_name="smol"}' in text
    r = client.completions.create(model="smol", prompt=PROMPTS[0], max_tokens=6, temperature=0,
                                  extra_body={"ignore_eos": True})
    after = wait_idle(server)
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == \
        r.usage.prompt_tokens
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 6
    for h in ("time_to_first_token", "e2e_request_latency"):
        key = f"vllm:{h}_seconds_count"
        assert after[key] == before[key] + 1
    key = "vllm:inter_token_latency_seconds_count"
    assert after[key] == before[key] + 5  # 6 tokens, 5 gaps


# ---------------------------------------------------------------- back-pressure and cancel
KEY = "course-key"


@pytest.fixture(scope="module")
def small_server() -> Iterator[ServerProcess]:
    """A server whose queue holds one waiting request past the engine's batch of 8, and that
    wants an API key."""
    smol_path()
    with ServerProcess("smol", max_waiting=1, args=("--api-key", KEY)) as srv:
        yield srv


def test_api_key(small_server: ServerProcess) -> None:
    wrong = openai.OpenAI(base_url=small_server.url, api_key="guess", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        wrong.completions.create(model="smol", prompt="hi", max_tokens=2)
    assert exc.value.status_code == 401 and exc.value.body["code"] == "invalid_api_key"
    for path in ("/models", "/completions", "/chat/completions"):
        r = httpx.request("GET" if path == "/models" else "POST", small_server.url + path,
                          json={})
        assert r.status_code == 401, path
    assert httpx.get(f"{small_server.root}/health").status_code == 200  # as vLLM: not guarded
    assert "vllm:num_requests_running" in httpx.get(f"{small_server.root}/metrics").text
    right = openai.OpenAI(base_url=small_server.url, api_key=KEY, max_retries=0)
    assert right.completions.create(model="smol", prompt="hi", max_tokens=2).choices[0].text


def test_queue_full_is_429(small_server: ServerProcess) -> None:
    n, max_tokens = 14, 48
    client = openai.OpenAI(base_url=small_server.url, api_key=KEY, max_retries=0, timeout=300)

    def one(i: int) -> Any:
        try:
            return client.completions.create(
                model="smol", prompt=f"Count to {i}:", max_tokens=max_tokens, temperature=0,
                extra_body={"ignore_eos": True})
        except openai.RateLimitError as exc:
            return exc

    results = at_once(one, n)
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    done = [r for r in results if isinstance(r, Completion)]
    assert len(refused) + len(done) == n
    assert refused, "no request was refused past 8 running + 1 waiting"
    assert len(done) >= 9  # the batch and the one waiting place
    for exc in refused:
        assert exc.status_code == 429 and int(exc.response.headers["retry-after"]) >= 1
        assert exc.body["code"] == "rate_limit_exceeded"
    for r in done:
        assert r.usage.completion_tokens == max_tokens and r.choices[0].finish_reason == "length"
    wait_idle(small_server)


def test_cancel_on_disconnect(small_server: ServerProcess) -> None:
    """Closing a stream, or dropping a connection mid-request, ends the engine request."""
    client = openai.OpenAI(base_url=small_server.url, api_key=KEY, max_retries=0)
    before = wait_idle(small_server)
    stream = client.completions.create(model="smol", prompt="Once", max_tokens=4000,
                                       stream=True, extra_body={"ignore_eos": True})
    for i, _chunk in enumerate(stream):
        if i == 3:
            break
    assert metrics(small_server)["vllm:num_requests_running"] == 1
    stream.close()
    after = wait_idle(small_server, 20)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 4000
    assert after["vllm:request_success_total{finished_reason=abort}"] == \
        before.get("vllm:request_success_total{finished_reason=abort}", 0) + 1

    # not streaming: the client gives up after 1 s and closes the connection
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{small_server.url}/completions", timeout=1.0,
                   headers={"Authorization": f"Bearer {KEY}"}, json={
            "model": "smol", "prompt": "Once", "max_tokens": 4000, "ignore_eos": True})
    wait_idle(small_server, 20)
    # and the server still answers
    assert client.completions.create(model="smol", prompt="hi", max_tokens=2).choices[0].text


def test_stop_ends_streams_in_flight() -> None:
    """SIGTERM or Ctrl-C while a long stream runs: the client gets an error event (503) and
    [DONE] at once, and the server exits (it does not wait for the generation)."""
    smol_path()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with ServerProcess("smol") as srv:
            with httpx.stream("POST", f"{srv.url}/completions", timeout=60, json={
                    "model": "smol", "prompt": "Once", "max_tokens": 4000, "ignore_eos": True,
                    "stream": True}) as r:
                lines = r.iter_lines()
                assert next(lines).startswith("data: {")
                srv.proc.send_signal(sig)
                events = [line for line in lines if line]
            assert events[-1] == "data: [DONE]"
            err = json.loads(events[-2].removeprefix("data: "))["error"]
            assert err["code"] == "service_unavailable"
            assert srv.proc.wait(30) in (0, -signal.SIGTERM)


def test_recurrent_model_ids_equal_local() -> None:
    """A Qwen3.5 checkpoint (tiny, recurrent DeltaNet state and the prefix cache's snapshots)
    served by path: token-id prompts, repeated and sharing a prefix longer than a cache
    block, give the local engine's greedy ids, one at a time and all at once."""
    import pyllm
    from pyllm.engine import Engine

    path = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
    model = pyllm.load(str(path))
    shared = [(7 * i) % 500 + 3 for i in range(150)]
    prompts = [shared, shared + [9, 10], [5, 6, 7], shared[:70] + [11]]
    with Engine(model) as e:
        want = [e.run(p, max_new_tokens=8).tokens for p in prompts]
    with ServerProcess(str(path)) as srv:
        assert srv.model == model.info.name
        client = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0)
        for p, w in zip(prompts * 2, want * 2, strict=True):
            assert _ids_request_to(client, srv.model, p, 8) == w
        got = at_once(lambda i: _ids_request_to(client, srv.model, prompts[i], 8), len(prompts))
        assert got == want


def _ids_request_to(client: Any, model: str, ids: list[int], n: int) -> list[int]:
    r = client.completions.create(model=model, prompt=ids, max_tokens=n, temperature=0,
                                  extra_body={"return_token_ids": True})
    return r.choices[0].model_extra["token_ids"]
