"""Tokens as they come: `llmrun --stream` (ai_read) and `harness run --prompt`'s streamed text.

The streaming path: the device writes ids into out[] while it runs and raises its rate-limited
progress interrupt; the kernel wakes ai_read; llmrun prints each id; the host decodes the
growing line (harness/run/text_stream.py). ai_read's semantics are tests/test_ai_user.py's
aireadtest.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from test_ai_host import harness

from harness.guest.bpe_host import vocab_files
from harness.machine.board import Machine
from harness.run.hostapi import AiSession, parse_llmrun
from harness.run.text_stream import IdStream

PROMPT = "504 3575 282 4649 314"  # "The capital of France is"


def _ids_while_running(smol_session: AiSession, cmd: str) -> tuple[int, str]:
    """Run cmd; count the id characters that reached the console while the device still had
    the request (read as the console produces them, on the emulation thread)."""
    machines: list[Machine] = []
    seen = {"early": 0}
    boot = bytearray()  # the console until the daemon is ready: its lines have digits too,
    lock = threading.Lock()  # and may come while the model load's job is still on the device

    def echo(data: bytes) -> None:
        if b"ai_daemon ready" not in boot:
            boot.extend(data)
            return
        with lock:
            dev = machines[0].devices.get("ai") if machines else None
        if dev is not None and dev.jobs:  # type: ignore[attr-defined]
            seen["early"] += sum(c in b"0123456789" for c in data)

    def during(m: Machine) -> None:
        with lock:
            machines.append(m)

    run = smol_session.run(cmd, timeout=300, echo=echo, during=during)
    assert run.ok, run.output
    return seen["early"], run.output


def test_stream_ids_reach_the_console_before_the_request_ends(smol_session: AiSession) -> None:
    early, out = _ids_while_running(smol_session, f"llmrun --stream --predict 48 {PROMPT}")
    plain_early, plain = _ids_while_running(smol_session, f"llmrun --predict 48 {PROMPT}")
    line = [ln for ln in out.splitlines() if ln[:1].isdigit()]
    assert line == [ln for ln in plain.splitlines() if ln[:1].isdigit()]  # the same line
    assert len(line[0].split()) == 48
    assert early > 0, out          # streamed: ids while the device still computes
    assert plain_early == 0, plain  # the one-shot ai_wait: nothing before the end


def test_stream_timing_has_the_console_stamp(smol_session: AiSession) -> None:
    run = smol_session.run(f"llmrun --stream --timing --predict 8 {PROMPT}", timeout=300)
    (res,) = parse_llmrun(run.output)
    t = res.timing
    assert len(res.ids) == 8
    assert t["first"] <= t["shown"] <= t["waited"]


@pytest.mark.parametrize("n", [8, 32, 128, 255])
def test_prompt_of_every_length_streams_text(smol_session: AiSession, n: int) -> None:
    tok = smol_session.tokenizer
    text = "hello" + " hello" * (n - 1)
    assert len(tok.encode(text)) == n
    p = harness("run", "-q", "--model", "smol", "--prompt", text, "-n", "6")
    assert p.returncode == 0, p.stdout + p.stderr
    assert text in p.stdout
    assert f"({n} prompt tokens" in p.stdout
    assert "First on console" in p.stdout


def test_id_stream_decodes_pieces_and_passes_the_rest(smol_session: AiSession) -> None:
    tok = smol_session.tokenizer
    prompt = tok.encode("The capital of France is")
    gen = tok.encode(" Paris. 日本語 ok")
    pieces: list[str] = []
    other = bytearray()
    s = IdStream(tok, prompt, text=pieces.append, other=other.extend)
    console = b"[init] ready\n" + " ".join(map(str, gen)).encode() + b"\ntiming: x=1\n"
    for i in range(0, len(console), 3):  # as the UART delivers it: in small pieces
        s.feed(console[i:i + 3])
    assert s.ids == gen and s.finished
    assert "".join(pieces) == tok.decode(prompt + gen)[len(tok.decode(prompt)):] + "\n"
    assert "\ufffd" not in "".join(pieces)
    assert bytes(other) == b"[init] ready\ntiming: x=1\n"


def test_stream_text_and_the_tokenize_detokenize_stages(smol_session: AiSession) -> None:
    """`llmrun --stream --timing --text`: the same text as without --stream, the guest's
    tokenize/detokenize stages printed and in the trace with the streaming slices."""
    from harness.run import trace as ai_trace

    text = '"The capital of France is"'
    run = smol_session.run(f"llmrun --stream --timing --predict 12 --text {text}; "
                      f"llmrun --timing --predict 12 --text {text}", timeout=300,
                      files=vocab_files("smol"))
    assert run.ok, run.output
    streamed, plain = run.output.split("Model Loading Time")[0:2]
    answer = streamed.strip().splitlines()[-1]
    assert answer and plain.strip().splitlines()[-1] == answer  # the same text either way
    for name in ("Tokenize", "Detokenize", "First on console", "Time to first character"):
        assert f"\n{name}: " in run.output, name
    res = parse_llmrun(run.output)
    assert len(res) == 2
    t = res[0].timing
    assert t["tokenize"] <= t["tokenized"] <= t["submit"] <= t["first"] <= t["shown"]
    assert t["detok_us"] > 0 and res[1].timing["shown"] == 0
    events = run.trace + [e for r in res for e in ai_trace.program_events(r.timing["reqid"],
                                                                          r.timing)]
    slices = {(e["tid"], e["name"]) for e in ai_trace.chrome_trace([("b", events)])["traceEvents"]
              if e["ph"] == "X"}
    first, second = t["reqid"], res[1].timing["reqid"]
    assert {(first, "tokenize"), (first, "to reader"), (first, "to console")} <= slices
    assert {(second, "tokenize"), (second, "detokenize")} <= slices


def test_harness_run_trace_has_the_programs_stages(tmp_path: Path) -> None:
    """`harness run -c "llmrun --timing --text ..." --trace F`: the tokenize and detokenize
    slices of llmrun's own stamps are in the trace, next to the device's events."""
    import json

    from test_ai_host import _need_build, _need_smol

    _need_build()
    _need_smol()
    out = tmp_path / "t.json"
    r = harness("run", "--model", "smol", "-q", "-c",
                'llmrun --timing --predict 4 --text "The capital of France is"',
                "--trace", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    events = json.loads(out.read_text())["traceEvents"]
    slices = {e["name"] for e in events if e["ph"] == "X"}
    assert {"tokenize", "detokenize", "prefill"} <= slices, slices
    rid = {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "tokenize"}
    assert rid == {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "prefill"}
