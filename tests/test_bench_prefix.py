"""`harness bench prefix` (harness/bench/prefix.py): the structure and sanity of its figures
on the tiny Qwen3.5 checkpoint (a hybrid model: the cache resumes only at a recurrent-state
snapshot) and SmolLM2 (KV only) when installed: the tokens the cache gave, never more than
were shared, a conversation's prompts growing by a turn, the memory within the budget, the
section's tables, the plot, and a missing model said as such. Timings are never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench import prefix

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
KERNEL, FS = ROOT / "build" / "kernel" / "kernel.elf", ROOT / "build" / "fs.img"
SMALL = dict(reps=1, prompt_len=130, lengths=(70, 130), turns=3, user_tokens=40,
             answer_tokens=30)


def test_a_conversation_longer_than_the_service_takes_is_refused() -> None:
    with pytest.raises(ValueError, match="AI_MAX_TOKENS"):
        prefix.Options(["smol"], turns=6, user_tokens=40, answer_tokens=16).check()
    with pytest.raises(ValueError, match="AI_MAX_TOKENS"):
        prefix.Options(["smol"], lengths=(64, prefix.AI_MAX_TOKENS + 1)).check()
    prefix.Options(["smol"]).check()  # the defaults fit


def _check_model(m: dict, block: int, recurrent: bool, opts: prefix.Options) -> None:
    assert m["recurrent"] is recurrent
    shared = m["shared"]
    assert [r["percent"] for r in shared] == list(prefix.FRACTIONS)
    for r in shared:
        assert r["on"]["n"] == r["off"]["n"] == opts.reps
        assert 0 <= r["cached_tokens"] <= min(r["shared_tokens"], opts.prompt_len - 1)
        if recurrent:  # a hybrid model resumes at its snapshots only: block boundaries, and
            # the base prompt's prompt_n - 1 (taken as it ran)
            assert r["cached_tokens"] % block == 0 or (
                r["percent"] == 100 and r["cached_tokens"] == opts.prompt_len - 1)
        assert r["on"]["median"] > 0 and r["off"]["median"] > 0
    assert shared[0]["cached_tokens"] == 0 and shared[0]["over_0"] == 1.0
    assert shared[-1]["cached_tokens"] >= block  # the whole prompt was cached before
    for r in m["cold_warm"]:
        assert r["n_in"] in opts.lengths
        assert block <= r["cached_tokens"] < r["n_in"]  # warm: a hit, one token left to run
        assert r["warm_over_cold"] == pytest.approx(r["warm"]["median"] / r["cold"]["median"])
        g = r["guest"]
        if KERNEL.is_file():  # through the guest: the same tokens from the cache
            assert not m["guest_error"], m["guest_error"]
            assert g["cold"]["n"] == g["warm"]["n"] == opts.reps
            assert g["cached_tokens"] == r["cached_tokens"]
            assert g["cold"]["median"] > 0 and g["warm"]["median"] > 0
    turns = m["turns"]
    assert [t["turn"] for t in turns] == list(range(1, opts.turns + 1))
    for t in turns:
        k = t["turn"]
        assert t["prompt_tokens"] == k * opts.user_tokens + (k - 1) * opts.answer_tokens
        assert 0 <= t["cached_tokens"] < t["prompt_tokens"]
    assert turns[0]["cached_tokens"] == 0 and turns[-1]["cached_tokens"] >= block
    mem = m["memory"]
    assert 0 < mem["peak_bytes"] <= mem["budget"] and mem["block"] == block
    assert mem["kv_bytes_per_block"] > 0
    assert (mem["snapshot_bytes"] > 0) is recurrent
    assert mem["end"]["bytes"] <= mem["peak_bytes"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> prefix.PrefixReport:
    from pyllm.registry import load

    models = {str(TINY): load(TINY)}
    if SMOL.is_file():
        models["smol"] = load("smol")
    opts = prefix.Options(list(models), **SMALL)
    guest = (KERNEL, FS) if KERNEL.is_file() and FS.is_file() else None
    try:
        return prefix.run(opts, models, say=lambda _: None, guest=guest)
    finally:
        for m in models.values():
            m.close()


def test_hybrid_and_kv_models_figures_are_consistent(report: prefix.PrefixReport) -> None:
    doc = report.as_dict()
    assert doc["vantage"] == "engine" and not doc["skipped"]
    _check_model(doc["models"][str(TINY)], 64, True, report.opts)
    if "smol" in doc["models"]:
        _check_model(doc["models"]["smol"], 64, False, report.opts)
        # a KV-only model reuses every shared token (the course's rule), at most
        # prompt_n - 1: 0, 25, 50, 75, 100 % of 130
        rows = doc["models"]["smol"]["shared"]
        assert [r["cached_tokens"] for r in rows] == [min(r["shared_tokens"], 129) for r in rows]
        assert [r["shared_tokens"] for r in rows] == [0, 32, 65, 98, 130]


def test_the_section_and_the_plot(report: prefix.PrefixReport, tmp_path: Path) -> None:
    from harness.bench.plots import prefix_cache

    png = prefix_cache(report, tmp_path)
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "\n".join(prefix.markdown(report, png))
    assert "![Prefix cache](prefix_cache.png)" in text and "Measured on the engine" in text
    for head in ("| shared | shared tokens | from the cache |",
                 "| prompt tokens | from the cache (warm) | off | cold | warm |",
                 "| turn | prompt tokens | from the cache |"):
        assert text.count(head) == len(report.models), head
    assert "recurrent state" in text and "snapshot" in text  # the hybrid model's memory
    assert "nan" not in text.lower()


def test_a_missing_qwen_is_skipped_with_the_command_that_writes_it(tmp_path: Path) -> None:
    env = dict(os.environ, PYLLM_MODELS_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "prefix", "-m", "qwen",
                        "--reps", "1"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode != 0
    assert "qwen skipped: not installed" in r.stdout + r.stderr
    assert "harness models synth qwen" in r.stdout + r.stderr
