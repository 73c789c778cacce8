"""The AI service end to end from the host: `harness run --model/--prompt/--demo/--trace` and
the session API, through the real kernel, ai_daemon, llmrun and the virtio AI device.

Guest-generated ids must equal `harness generate` (the engine alone) for the same prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.hostapi import AiSession, parse_llmrun

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS_IMG = ROOT / "build" / "fs.img"
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
PROMPTS = ["The capital of France is", "Once upon a time", "def add(a, b):"]


def _need_build() -> None:
    for p in (KERNEL, FS_IMG):
        if not p.exists():
            pytest.skip(f"{p.relative_to(ROOT)} is not built (make build)")
    from harness.disk.fsimage import FsImage

    if "llmrun" not in FsImage(FS_IMG).listdir("/"):
        pytest.skip("the image has no llmrun (user programs not built)")


def _need_smol() -> None:
    from pyllm.registry import resolve

    try:
        resolve("smol")
    except Exception as exc:
        pytest.skip(f"SmolLM2 not installed ({exc})")


def harness(*args: str, timeout: float = 300, stdin: int | None = subprocess.DEVNULL,
            ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=stdin)


# ---------------------------------------------------------------- ids and timings

def test_guest_ids_equal_harness_generate(smol_session: AiSession) -> None:
    tok = smol_session.tokenizer
    cmds = [f"llmrun --predict 16 --timing {' '.join(map(str, tok.encode(p)))}" for p in PROMPTS]
    run = smol_session.run("; ".join(cmds), timeout=300)
    assert run.ok, run.output
    results = parse_llmrun(run.output)
    assert len(results) == len(PROMPTS)
    for text, res in zip(PROMPTS, results, strict=True):
        gen = harness("generate", "--model", "smol", "--text", text, "-n", "16", "--json")
        assert gen.returncode == 0, gen.stderr
        ref = json.loads(gen.stdout)["ids"]
        # harness generate stops at EOS; llmrun asks for exactly 16 tokens
        assert res.ids[: len(ref)] == ref and (len(ref) == 16 or ref[-1] == 2)
        assert len(res.ids) == res.timing["generated"] == 16


def test_session_llmrun_timings_are_ordered(smol_session: AiSession) -> None:
    ids = smol_session.tokenizer.encode("The capital of France is")
    res = smol_session.llmrun(ids, 8)
    t = res.timing
    assert t["model"] == smol_session.lm.model.info.title and t["synthetic"] == 0
    assert t["model"] == "SmolLM2-135M-Instruct"
    assert t["load_us"] > 0 and t["prompt"] == len(ids) and t["generated"] == 8
    assert t["submit"] <= t["dispatch"] <= t["accept"] <= t["first"] <= t["done"] <= t["waited"]
    assert t["ttft_us"] == t["first"] - t["submit"]
    assert t["tpot_us"] == (t["done"] - t["first"]) // 7
    assert "Paris" in smol_session.tokenizer.decode(res.ids)


# ---------------------------------------------------------------- harness run --prompt

def test_prompt_prints_text_timings_and_writes_a_trace(tmp_path: Path) -> None:
    _need_build()
    _need_smol()
    trace = tmp_path / "t.json"
    p = harness("run", "--model", "smol", "--prompt", "The capital of France is", "-n", "8",
                "--trace", str(trace))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "The capital of France is Paris" in out
    for name in ("Model Loading Time", "TTFT", "TPOT", "E2E"):
        assert any(line.strip().startswith(name) and " ms " in line
                   for line in out.splitlines()), name
    assert "5 tokens; in the guest: llmrun --stream --timing --predict 8 --prompt-file /run.ids" \
        in p.stderr
    assert "synthetic weights" not in out
    data = json.loads(trace.read_text())
    evs = data["traceEvents"]
    slices = {e["name"] for e in evs if e["ph"] == "X"}
    assert {"model load", "queued", "to device", "to engine", "prefill", "decode",
            "device completion", "interrupt to kernel", "result waiting", "to reader",
            "to console"} <= slices
    inst = [e["name"] for e in evs if e["ph"] == "i" and e["tid"] != 0]
    assert [e for e in inst if e not in ("read", "shown")] == [
        "submit", "dispatch", "accept", "engine", "first", "done", "used", "complete", "waited"]
    assert inst.index("first") < inst.index("read") < inst.index("shown")  # streamed
    ts = [e["ts"] for e in evs if e["ph"] == "i" and e["tid"] != 0]
    assert ts == sorted(ts)
    assert all(e["dur"] >= 0 for e in evs if e["ph"] == "X")


def test_prompt_labels_synthetic_weights(tmp_path: Path) -> None:
    _need_build()
    model = tmp_path / "qwen3.5-0.8b-tiny"  # dots in the name: shown whole
    shutil.copytree(TINY, model)
    (model / "SYNTHETIC").write_text("random weights of the tests\n")
    p = harness("run", "-q", "--model", str(model), "--prompt", "12 34, 5!", "-n", "6")
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("lifecycle of the request, measured in the guest (qwen3.5-0.8b-tiny (synthetic "
            "weights)):") in p.stdout and "TPOT" in p.stdout


def test_demo_without_a_terminal_runs_the_prompt_and_exits() -> None:
    """`make run`'s demo: the instruct model asked through its chat template answers and ends
    its turn (fewer than -n tokens); --raw continues the demo text for exactly -n."""
    _need_build()
    _need_smol()
    p = harness("run", "--demo")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "user: Tell me the capital of France.\nassistant: The capital of France is " \
           "Paris.\n" in p.stdout
    assert "<|im_end|>" not in p.stdout and "--stop-eos --predict 32" in p.stderr
    t = parse_llmrun(p.stdout)[-1].timing
    assert t["prompt"] > 20 and 2 <= t["generated"] < 32  # the template; ended at EOS
    assert "interactive shell" not in p.stderr
    p = harness("run", "--demo", "--raw", "-n", "4")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "The capital of France is Paris" in p.stdout and "assistant:" not in p.stdout
    assert parse_llmrun(p.stdout)[-1].timing["generated"] == 4
    p = harness("run", "--prompt", "x", "--raw")
    assert p.returncode == 2 and "--raw goes with --demo" in p.stderr


def test_model_errors_before_boot(tmp_path: Path) -> None:
    _need_build()
    p = harness("run", "--model", "nope", "-c", "true")
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert "unknown model 'nope'" in p.stderr
    p = harness("run", "--model", str(tmp_path / "missing.gguf"), "-c", "true")
    assert p.returncode == 1 and "no such file" in p.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    p = harness("run", "--model", str(bad), "-c", "true")
    assert p.returncode == 1 and p.stderr.startswith("Error: ") and p.stderr.count("\n") == 1
    p = harness("run", "--prompt", "word " * 300)
    assert p.returncode == 1 and "at most 255" in p.stderr
    p = harness("run", "--prompt", "x", "-c", "true")
    assert p.returncode == 2 and "cannot be combined" in p.stderr


def test_model_option_boots_with_the_daemon_up() -> None:
    _need_build()
    p = harness("run", "-q", "--model", str(TINY), "-c", "llmrun --predict 3 5 6 7")
    assert p.returncode == 0, p.stdout + p.stderr
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load(str(TINY))
    try:
        ref = lm.engine.run([5, 6, 7], max_new_tokens=3, stop_ids=()).tokens
    finally:
        lm.close()
    assert " ".join(map(str, ref)) in p.stdout.splitlines()


@pytest.mark.slow
def test_demo_then_interactive_shell() -> None:
    """What `make run` does on a terminal: the demo, then a shell with the model loaded."""
    _need_build()
    _need_smol()
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "harness", "run", "--demo"],
                          cwd=str(ROOT), encoding="utf-8", timeout=120,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    try:
        child.expect("assistant: .*The capital of France is Paris")  # (bold on a tty)
        child.expect("TPOT")
        child.expect("interactive shell")
        child.expect(r"\$ ")
        child.sendline("llmrun --predict 2 504 3575 282 4649 314")
        child.expect(r"\r\n(\d+ \d+)\r\n")
        assert child.match.group(1).split()[0] == "7042"  # " Paris" (the demo's first id)
        child.expect(r"\$ ")
        child.send("\x01x")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


@pytest.mark.slow
def test_bench_service_runs_and_reports_ratios(tmp_path: Path) -> None:
    """A smoke run of `harness bench service` (figures are printed, never asserted)."""
    _need_build()
    out = tmp_path / "b.json"
    p = harness("bench", "service", "-m", str(TINY), "--reps", "1", "--pairs", "1", "-n", "4",
                "--json", str(out), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "TTFT (ms)" in p.stdout and "TPOT (ms)" in p.stdout and "targets:" in p.stdout
    assert "identical to the engine's" in p.stdout and "busy guest" in p.stdout
    data = json.loads(out.read_text())
    assert len(data["pairs"]) == 3 and all(x["same_ids"] for x in data["pairs"])


def test_kv_cache_option_reaches_the_guest() -> None:
    _need_smol()
    p = harness("run", "--model", "smol", "--kv-cache", "lots", "-c", "true")
    assert p.returncode == 2 and "256M" in p.stderr, p.stderr
    p = harness("run", "-q", "--model", "smol", "--kv-cache", "0", "-c",
                "aitest --cacheprobe 1 2 3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[aitest] cacheprobe cache: 0 entries (blocks of 64 tokens and tails), 0 KiB of " \
           "0\n" in p.stdout
    assert "prefix_cache: valid=0 prefix_len=0 hits=0 misses=0 restores=0 saves=0 " \
           "bypasses=2\n" in p.stdout
    assert "cacheprobe note: the device has no prefix cache" in p.stdout


def test_cacheprobe_fails_where_the_cache_applies_and_missed() -> None:
    """A cache too small for the cold run's 5 tokens (230 KB of SmolLM2 K/V): the warm run
    cannot hit, and the course's probe says FAIL instead of a PASS with hits=0."""
    _need_smol()
    p = harness("run", "-q", "--model", "smol", "--kv-cache", "64k", "-c",
                "aitest --cacheprobe 504 3575 282 4649 314")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "prefix_cache: valid=0 prefix_len=0 hits=0 misses=2 restores=0 saves=0 " \
           "bypasses=0\n" in p.stdout
    assert "[aitest] cacheprobe: FAIL" in p.stdout
    assert "aitest: the warm run reused 0 of 5 prompt tokens from the prefix cache (expected " \
           "a hit of 4)" in p.stdout + p.stderr
