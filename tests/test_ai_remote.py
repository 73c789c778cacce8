"""The AI device's remote backend (harness/engines/remote.py): `--engine URL --model NAME`.

The normal path runs against `harness serve` in another process (harness/serve/process.py,
port 0) serving SmolLM2: the guest's ids through the network equal the in-process engine's
(`harness generate`), the aitest set passes, aibench -c 8 checks every result, clients are
killed mid-request. The faults run against tests/fake_engine.py, a real socket server that
misbehaves on purpose (slow, dropping the stream, garbage, 429/503, refusing), host-side
(each outcome's status) and in the guest (what the kernel tells the request's owner).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from fake_engine import EOS, VOCAB, FakeEngine, good_ids
from guest import ROOT, run_guest
from test_ai_user import SMOL, _model_available, generate, ids_line

from harness.engines.base import BackendFailure, Collected, Sampling
from harness.engines.remote import EngineError, RemoteEngine


@pytest.fixture(scope="module")
def server() -> Iterator[object]:
    why = _model_available(SMOL)
    if why:
        pytest.skip(why)
    from harness.serve.process import ServerProcess

    with ServerProcess(SMOL) as srv:
        yield srv


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngine]:
    with FakeEngine() as f:
        yield f


def remote(url: str, cmds: str, *extra: str, model: str = SMOL, timeout: float = 300.0):
    return run_guest(cmds, timeout, "--engine", url, "--model", model, *extra)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the normal path

PROMPTS = [(504, 3575, 282, 4649, 314), (1, 2, 3), (7,), (1812, 28, 9, 11, 403, 2, 77, 5)]


def test_guest_ids_equal_the_local_engine(server) -> None:
    cmds = "; ".join(f"llmrun --predict {n} {' '.join(map(str, p))}"
                     for p, n in zip(PROMPTS, (16, 8, 24, 12), strict=True))
    r = remote(server.url, cmds + "; llmrun --stream --predict 10 5 6 7")
    lines = [ln for ln in r.output.splitlines() if re.fullmatch(r"[\d ]+", ln)]
    want = [ids_line(generate(SMOL, p, n)) for p, n in zip(PROMPTS, (16, 8, 24, 12),
                                                           strict=True)]
    assert lines == want + [ids_line(generate(SMOL, (5, 6, 7), 10))], r.output
    assert r.status == 0
    assert f"[ai] model smol at {server.url} ready (remote" in r.raw.stderr


@pytest.mark.parametrize("flags", ["--all", "--killworker", "--killdaemon"])
def test_aitest_through_the_server(server, flags: str) -> None:
    r = remote(server.url, f"aitest {flags} --predict 4 1 2 3; echo status $?")
    assert re.search(r"^\[aitest\] \S+: PASS$", r.output, re.M), r.output[-3000:]
    assert not re.search(r"^\[aitest\] \S+: FAIL$", r.output, re.M), r.output[-3000:]
    assert "status 0" in r.output


def test_aitest_course_checks_through_the_server(server) -> None:
    r = remote(server.url, "aitest --batch 8 --predict 3 5 6; echo rc=$?; "
                           "aitest --async --query --doublewait --predict 4 1 2 3; echo rc=$?; "
                           "aitest --predict 33; echo rc=$?; aitest -1; echo rc=$?")
    three, four = ids_line(generate(SMOL, (5, 6), 3)), ids_line(generate(SMOL, (1, 2, 3), 4))
    blocks = r.output.split("rc=")
    assert blocks[0].count(f"]: {three} (") == 8 and "batch: PASS" in blocks[0], r.output
    assert blocks[1].startswith("0") and f"[aitest] result: {four}" in blocks[1], r.output
    assert "query: PASS" in blocks[1] and "doublewait: PASS" in blocks[1], r.output
    assert blocks[2].startswith("0") and "invalid predict count 33" in blocks[2], r.output
    assert blocks[3].startswith("1") and "invalid token id -1" in blocks[3], r.output
    assert blocks[4].startswith("1"), r.output


def test_aibench_8_clients(server) -> None:
    r = remote(server.url, "aibench -c 8 -n 3 -g 16; echo bench $?; aitest --stats 1 2")
    out = r.output
    assert "aibench: PASS" in out and "bench 0" in out, out[-3000:]  # every result checked
    assert re.search(r"^total: requests=24 ok=24 failed=0 ", out, re.M), out[-3000:]
    assert re.search(r"^\[aitest\] stats: PASS$", out, re.M), out[-3000:]


def test_clients_and_daemons_killed_mid_request(server) -> None:
    """aistress through the server: clients and ai_daemon processes killed while their
    requests stream; every completed result equals the in-process engine's, every slot is
    free afterwards (the device's HTTP requests of killed clients were cancelled)."""
    from harness.engines.local import LoadedModel
    from harness.run.fuzz_stress import boot, parse_stress, verify

    eng = RemoteEngine.parse(server.url).loader(SMOL)
    lm = LoadedModel.load(SMOL)
    try:
        b = boot("aistress -s 3 -t 5 -c 10 -k 20 -d 5 -L 10", model=eng, hang_timeout=60,
                 timeout=600)
        rep, done = parse_stress(3, b)
        rep.verified, bad = verify(lm, done)
    finally:
        eng.close()
        lm.close()
    assert rep.verdict == "PASS" and b.exit == "poweroff", b.output[-3000:]
    assert not bad and rep.verified == rep.ok == len(done) > 10, bad[:3]
    assert rep.client_kills > 0 and rep.slots_free == 8 and rep.stuck == 0


def test_sampling_and_seed_pass_through(server) -> None:
    """A seeded sampled request gives the same ids through the server as in process."""
    from harness.engines.local import LoadedModel

    params = Sampling(max_new_tokens=12, seed=1234, temperature=0.8, top_k=40, top_p=0.9)
    eng = RemoteEngine.parse(server.url).loader(SMOL)
    lm = LoadedModel.load(SMOL)
    try:
        for prompt in PROMPTS[:2]:
            got = Collected(eng, list(prompt), params).wait(120)
            assert got == Collected(lm, list(prompt), params).wait(120)
        greedy = Collected(eng, [1, 2, 3], Sampling(max_new_tokens=8)).wait(120)
        assert greedy == generate(SMOL, (1, 2, 3), 8)
    finally:
        eng.close()
        lm.close()


def test_unknown_model_and_server_down(server) -> None:
    r = remote(server.url, "llmrun --predict 2 1 2", model="nosuch")
    assert "failed to load" in r.raw.stdout + r.raw.stderr
    assert f"{server.url} does not serve 'nosuch' (it serves: smol)" in r.raw.stderr
    r = remote(f"http://127.0.0.1:{free_port()}/v1", "llmrun --predict 2 1 2")
    assert "cannot ask" in r.raw.stderr and "cannot connect" in r.raw.stderr
    assert "llmrun: the AI device failed to load its model" in r.raw.stdout + r.raw.stderr


# ---------------------------------------------------------------- faults, host side

FAULTS = [  # first prompt id (fake_engine.MODES) -> the device status
    (2, "ESLOW"), (3, "ENET"), (4, "EPROTO"), (5, "EPROTO"), (6, "EBUSY"), (8, "ENET"),
    (9, "EENGINE"), (10, "EENGINE"), (12, "EPROTO"),
]


@pytest.mark.parametrize(("first", "status"), FAULTS)
def test_each_fault_gives_its_status(fake: FakeEngine, first: int, status: str) -> None:
    eng = RemoteEngine(fake.url, timeout_s=1.0).loader("fake")
    try:
        t0 = time.monotonic()
        req = Collected(eng, [first, 40, 41], Sampling(max_new_tokens=6))
        with pytest.raises(BackendFailure) as info:
            req.wait(30)
        assert info.value.outcome.status == status, info.value
        assert info.value.outcome.message
        assert time.monotonic() - t0 < 25  # completed, not hung (bounded by the timeout)
    finally:
        eng.close()


def test_facts_from_the_model_card(fake: FakeEngine) -> None:
    eng = RemoteEngine.parse(fake.url.removesuffix("/v1") + "/").loader("fake")
    c = eng.config_fields()
    assert (c["vocab_size"], c["max_context"], c["eos_token"]) == (VOCAB, 256, EOS)
    assert c["name"] == b"fake" and c["arch"] == b"remote"
    eng.close()
    with pytest.raises(EngineError, match="does not serve 'other'"):
        RemoteEngine(fake.url).loader("other")


def test_retry_after_then_success(fake: FakeEngine) -> None:
    eng = RemoteEngine(fake.url, timeout_s=5.0).loader("fake")
    try:
        assert Collected(eng, [7, 50], Sampling(max_new_tokens=4)).wait(30) == good_ids([50], 4)
        assert fake.attempts[(7, 50)] == 2  # 503 once, then served
        before = fake.attempts[(6, 51)]
        with pytest.raises(BackendFailure):
            Collected(eng, [6, 51], Sampling(max_new_tokens=4)).wait(30)
        assert fake.attempts[(6, 51)] - before == eng.engine.retries + 1  # bounded
    finally:
        eng.close()


def test_request_body_is_token_ids_with_the_sampling(fake: FakeEngine) -> None:
    eng = RemoteEngine(fake.url).loader("fake")
    try:
        p = Sampling(max_new_tokens=5, stop_eos=True, seed=77, temperature=0.5, top_k=3,
                     top_p=0.75)
        assert Collected(eng, [1, 2, 3], p).wait(30) == good_ids([3], 5)
        body = fake.bodies[-1]
        assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 5
        assert (body["seed"], body["temperature"], body["top_k"], body["top_p"]) == (
            77, 0.5, 3, 0.75)
        assert body["stream"] is True and body["return_token_ids"] is True
        assert body["ignore_eos"] is False and body["model"] == "fake"
    finally:
        eng.close()


def test_cancel_closes_the_request(fake: FakeEngine) -> None:
    eng = RemoteEngine(fake.url).loader("fake")
    try:
        req = Collected(eng, [11, 60], Sampling(max_new_tokens=200))
        deadline = time.monotonic() + 30
        while not req.ids and time.monotonic() < deadline:
            time.sleep(0.01)
        before = fake.disconnects
        req.handle.cancel()
        with pytest.raises(BackendFailure) as info:
            req.wait(5)
        assert info.value.outcome.status == "ECANCELED"
        while fake.disconnects == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.disconnects > before  # the server saw the client leave
        assert len(req.ids) < 200
    finally:
        eng.close()


def test_ids_outside_the_vocabulary_never_leave(fake: FakeEngine) -> None:
    from harness.engines.base import SubmitError

    eng = RemoteEngine(fake.url).loader("fake")
    n = len(fake.bodies)
    with pytest.raises(SubmitError) as info:
        eng.submit([1, VOCAB], Sampling(max_new_tokens=2), lambda i, t: None, lambda o: None)
    assert info.value.status == "ERANGE" and len(fake.bodies) == n
    eng.close()


# ---------------------------------------------------------------- faults, in the guest

GUEST_MESSAGES = {
    "ESLOW": "the inference server did not answer in time",
    "ENET": "the inference server cannot be reached",
    "EPROTO": "the inference server's answer was garbled",
    "EBUSY": "the inference server is overloaded",
    "EENGINE": "the AI device failed the request",
}


def test_faults_reach_the_requests_owner(fake: FakeEngine) -> None:
    """One boot meets every fault; each request ends with its own message, the good ones
    (before, between and after) are served, and the shell goes on."""
    cases = [(1, None), *FAULTS, (7, None), (1, None)]
    cmds = "; ".join(f"llmrun --predict 4 {first} {30 + i}; echo rc=$?"
                     for i, (first, _) in enumerate(cases))
    r = remote(fake.url, cmds, "--engine-timeout", "1", model="fake", timeout=200)
    blocks = r.output.split("rc=")
    for i, (first, status) in enumerate(cases):
        text = blocks[i].split("\n", 1)[-1] if i else blocks[i]
        if status is None:
            assert ids_line(good_ids([30 + i], 4)) in text, (first, text)
        else:
            assert f"failed: {GUEST_MESSAGES[status]}" in text, (first, status, text)
            assert blocks[i + 1].startswith("1"), (first, blocks[i + 1])
    assert r.status == 0 and "Traceback" not in r.raw.stderr


# ---------------------------------------------------------------- the commands

def harness(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_engine_options_are_checked() -> None:
    p = harness("run", "--engine", "http://127.0.0.1:9/v1", "-c", "echo")
    assert p.returncode == 2 and "--engine needs --model NAME" in p.stderr
    p = harness("run", "--engine", "ftp://x", "--model", "m", "-c", "echo")
    assert p.returncode == 2 and "is not an http://HOST:PORT/v1 URL" in p.stderr
    p = harness("run", "--engine-timeout", "3", "-c", "echo")
    assert p.returncode == 2 and "--engine-timeout needs --engine" in p.stderr
    p = harness("stress", "--engine", "http://127.0.0.1:9/v1", "--model", "m", "-t", "1")
    assert p.returncode == 1 and "cannot ask http://127.0.0.1:9/v1" in p.stderr


def test_bench_engine_section(server, tmp_path) -> None:
    p = harness("bench", "--engine", server.url, "--reps", "1", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert f"## Through the network: smol at {server.url}" in out
    for row in ("| server, client batches (its /metrics) | ", "| client (HTTP, this process) | ",
                "| guest (aibench through the AI device) | "):
        assert row in out, out
    assert re.search(r"HTTP's share of TTFT \(client - server, same requests\): [+-]\d", out)
    assert "aibench: PASS" in out and (tmp_path / "remote.md").read_text().strip() in out


def test_bench_remote_load_run(server) -> None:
    p = harness("bench", "remote", "--machines", "2", "--clients", "3", "-n", "1", "-g", "8",
                "--engine", server.url, "-m", SMOL)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert re.search(r"^\| 2 x 3 \| 6 \| 48 \| [\d.]+ \| \d+ \| \d+ \|$", p.stdout, re.M), p.stdout
    assert "every machine's aibench PASS" in p.stdout
    assert "the reference ids equal to the in-process engine's" in p.stdout
