"""`chat` (user_c/chat.c) driven through the guest's console: two turns whose second prompt
carries the first (checked on the prompt ids the AI device received), text decoded in the
guest equal to the model's own decoding, ^C stopping an answer with the request cancelled on
the device, /reset and /stats; and `harness run --chat`. The two turns on Qwen3.5 too
(synthetic weights: the protocol, not the text).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from test_ai_host import ROOT, _need_build, _need_smol
from test_ai_user import smol_name

from harness.guest.bpe_host import vocab_files
from harness.machine.board import Machine
from harness.run.hostapi import AiSession


class Console:
    """The guest console as it comes, and keys typed into it."""

    def __init__(self) -> None:
        self.out = bytearray()

    def wait_for(self, text: str, count: int = 1, timeout: float = 120) -> None:
        t0 = time.monotonic()
        while self.out.count(text.encode()) < count:
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"no {text!r} x{count} on the console:\n"
                                     f"{self.out[-2000:].decode(errors='replace')}")
            time.sleep(0.02)


def _chat(session: AiSession, args: str, script: Callable[[Machine, Console], None],
          model: str = "smol", requests: list | None = None) -> tuple[str, list[list[int]]]:
    """Run `chat args` with script typing into it; the console and every prompt the device's
    engine was given (`requests`, if given, collects the engine's requests)."""
    con = Console()
    prompts: list[list[int]] = []
    lm = session.lm
    assert lm is not None
    submit = lm.engine.submit

    def spy(prompt, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202 (the engine's own)
        prompts.append([int(x) for x in prompt])
        req = submit(prompt, *a, **kw)
        if requests is not None:
            requests.append(req)
        return req

    lm.engine.submit = spy  # type: ignore[method-assign]
    try:
        run = session.run(f"chat {args}", echo=con.out.extend,
                          during=lambda m: script(m, con), files=vocab_files(model),
                          timeout=600)
    finally:
        del lm.engine.submit
    assert run.ok, run.output
    return run.output, prompts


def _two_turns(m: Machine, con: Console) -> None:
    con.wait_for("> ")
    m.send_input(b"My name is Alice.\n")
    con.wait_for("> ", 2)
    m.send_input(b"What is my name?\n")
    con.wait_for("> ", 3, timeout=300)
    m.send_input(b"/stats\n")
    con.wait_for("> ", 4)
    m.send_input(b"/quit\n")


def test_two_turns_carry_the_context_and_stats(smol_session: AiSession) -> None:
    out, prompts = _chat(smol_session, "--predict 24", _two_turns)
    tok = smol_session.tokenizer
    assert len(prompts) == 2
    first, second = prompts
    system = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
              "Hugging Face<|im_end|>\n")
    assert tok.decode(first) == (system + "<|im_start|>user\nMy name is Alice.<|im_end|>\n"
                                 "<|im_start|>assistant\n")
    assert first == tok.encode(tok.decode(first))  # the guest's ids are the model's
    # the second prompt is the first, its answer as generated, then the new message
    assert second[:len(first)] == first
    rest = tok.decode(second[len(first):])
    assert rest.endswith("<|im_end|>\n<|im_start|>user\nWhat is my name?<|im_end|>\n"
                         "<|im_start|>assistant\n")
    answer1 = rest[:rest.index("<|im_end|>")]
    # what the console showed is the device's ids decoded by the model's own tokenizer
    shown = out.split("> My name is Alice.\n", 1)[1].split("\n> ", 1)[0]
    assert shown == answer1.rstrip("\n") or shown == answer1
    assert re.search(r"\[chat\] last answer: \d+ tokens; time to first character \d+\.\d ms "
                     r"\(tokenize \d+\.\d ms, TTFT \d+\.\d ms\), \d+\.\d\d tokens/s\n"
                     r"\[chat\] prompt \d+ tokens with 1 earlier turns", out), out


@pytest.mark.slow
def test_two_turns_on_qwen_carry_the_context() -> None:
    """The same protocol on Qwen3.5 (the synthetic weights: the answers are noise, so only
    the prompts are checked): no system prompt, the second prompt is the first, its answer's
    ids as generated, then the new message in the template."""
    _need_build()
    from pyllm.errors import ModelNotFoundError
    from pyllm.registry import resolve

    try:
        resolve("qwen")
    except ModelNotFoundError as exc:
        pytest.skip(f"Qwen3.5 not installed ({exc})")
    reqs: list = []
    with AiSession("qwen") as qwen:
        out, prompts = _chat(qwen, "--predict 8", _two_turns, model="qwen", requests=reqs)
        tok = qwen.tokenizer
    assert len(prompts) == 2
    first, second = prompts
    assert tok.decode(first) == ("<|im_start|>user\nMy name is Alice.<|im_end|>\n"
                                 "<|im_start|>assistant\n")
    assert first == tok.encode(tok.decode(first))  # the guest's ids are the model's
    assert second[:len(first)] == first
    tail = tok.encode("<|im_end|>\n<|im_start|>user\nWhat is my name?<|im_end|>\n"
                      "<|im_start|>assistant\n")
    assert second[-len(tail):] == tail
    answer = second[len(first):-len(tail)]
    gen = [int(t) for t in reqs[0].tokens]
    assert answer and gen[:len(answer)] == answer  # the answer exactly as generated
    assert re.search(r"\[chat\] prompt \d+ tokens with 1 earlier turns", out), out


def test_ctrl_c_stops_the_answer_on_the_device_then_reset(smol_session: AiSession) -> None:
    devs: list[Machine] = []

    def script(m: Machine, con: Console) -> None:
        devs.append(m)
        con.wait_for("> ")
        m.send_input(b"Tell me a very long story about a dragon and a knight.\n")
        con.wait_for("knight.\n")
        n = len(con.out)
        while len(con.out) < n + 20:  # the answer has begun
            time.sleep(0.01)
        m.send_input(b"\x03")
        con.wait_for("[chat] answer stopped\n")
        con.wait_for("> ", 2)
        m.send_input(b"/reset\n")
        con.wait_for("> ", 3)
        m.send_input(b"Hi\n")
        con.wait_for("> ", 4)
        m.send_input(b"/quit\n")

    out, prompts = _chat(smol_session, "--predict 1500", script)
    assert "[chat] conversation forgotten" in out
    dev = devs[0].devices["ai"]
    trace = list(dev.trace)  # type: ignore[attr-defined]
    cancels = [e for e in trace if e.event == "cancel"]
    assert cancels and cancels[0].arg == 1, trace  # the device stopped the running request
    done = [e for e in trace if e.event == "done" and e.reqid == cancels[0].reqid]
    assert done and done[0].arg == 6  # AI_ST_ECANCELED
    # after /reset the prompt carries no history
    tok = smol_session.tokenizer
    assert tok.decode(prompts[-1]).count("<|im_start|>user") == 1


def test_harness_run_chat_boots_into_chat() -> None:
    _need_build()
    _need_smol()
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "-q", "--chat"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None and p.stdout is not None
    got = bytearray()
    t0 = time.monotonic()
    while b"> " not in got and time.monotonic() - t0 < 120:
        got += p.stdout.read1(4096)
    p.stdin.write(b"/quit\n")
    p.stdin.flush()
    rest, err = p.communicate(timeout=120)
    out = (got + rest).decode(errors="replace")
    assert p.returncode == 0, out + err.decode()
    assert f"[chat] {smol_name()};" in out and "/reset, /stats, /quit" in out
