"""The AI user programs end to end: llmrun, aitest, aibench and ai_daemon in the booted guest.

Every test boots with `python -m harness run --model M -c CMDS` (tests/guest.py), so requests
go through the real path: syscall -> kernel slots and queue -> ai_daemon worker -> virtio AI
device -> pyllm engine. Models: SmolLM2-135M (`smol`, loads in well under a second) and the
tiny random Qwen3.5 checkpoint of the golden tests (tests/data/qwen35/tiny_text). The
reference ids come from `python -m harness generate` (greedy, no end-of-sequence stop, as
llmrun asks the device).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from guest import ROOT, GuestResult, run_guest, run_raw

from harness.run.hostapi import parse_llmrun

SMOL = "smol"
QWEN_TINY = str(ROOT / "tests" / "data" / "qwen35" / "tiny_text")
NO_STOP = "4294967295"  # a stop id no model produces: generate exactly -n tokens


def _model_available(model: str) -> str | None:
    if model == SMOL and not (ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists():
        return "SmolLM2 weights missing (harness models fetch smol)"
    return None


def ai_guest(cmds: str, model: str = SMOL, timeout: float = 300.0, *extra: str) -> GuestResult:
    """Run cmds in the guest booted with the AI device serving `model` (extra: more
    `harness run` options)."""
    why = _model_available(model)
    if why:
        pytest.skip(why)
    return run_guest(cmds, timeout, "--model", model, *extra)


@functools.cache
def generate(model: str, prompt: tuple[int, ...], n: int) -> list[int]:
    """`harness generate`'s greedy ids for prompt (exactly n of them)."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "generate", "--model", model, "--tokens",
         " ".join(map(str, prompt)), "-n", str(n), "--stop", NO_STOP, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    ids = json.loads(proc.stdout)["ids"]
    assert len(ids) == n
    return ids


@functools.cache
def smol_name() -> str:
    """SmolLM2's display name, what the AI device reports (pyllm/naming.py)."""
    from pyllm import naming
    from pyllm.loaders.gguf import open_gguf

    path = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return naming.from_gguf(open_gguf(path).metadata, path)


def ids_line(ids: list[int]) -> str:
    return " ".join(map(str, ids))


PROMPTS = [
    ((504, 3575, 282, 4649, 314), 8),   # "The capital of France is"
    ((1, 42, 314, 2718, 7, 99, 1234, 2048) * 2, 16),
    ((1, 2, 3), 1),
]


# ------------------------------------------------------------------ llmrun


def test_llmrun_equals_harness_generate() -> None:
    cmds = "; ".join(f"llmrun --predict {n} {ids_line(list(p))}" for p, n in PROMPTS)
    cmds += "; llmrun_smol --predict 4 --prompt-file /prompt.txt"
    r = ai_guest(cmds)
    want = [ids_line(generate(SMOL, p, n)) for p, n in PROMPTS]
    prompt_txt = tuple(int(x) for x in (ROOT / "user_c/files/prompt.txt").read_text().split())
    want.append(ids_line(generate(SMOL, prompt_txt, 4)))
    assert r.output.splitlines() == want, r.output
    assert r.status == 0


def test_llmrun_qwen_family_and_wrong_family() -> None:
    r = ai_guest("llmrun_qwen --predict 6 1 2 3 4 5; echo rc=$?; "
                 "llmrun --predict 3 7 8 9; echo rc=$?; "
                 "llmrun_smol 1 2 3; echo rc=$?", model=QWEN_TINY)
    assert r.output == (
        f"{ids_line(generate(QWEN_TINY, (1, 2, 3, 4, 5), 6))}\nrc=0\n"
        f"{ids_line(generate(QWEN_TINY, (7, 8, 9), 3))}\nrc=0\n"
        "llmrun_smol: expected SmolLM assets, got Qwen3.5\nrc=1\n")


def test_llmrun_smol_rejects_qwen_and_asset_dir_note() -> None:
    r = ai_guest("llmrun_qwen 1 2 3; echo rc=$?; "
                 "llmrun_smol --asset-dir /AI/SMOL --predict 2 1 2 3; echo rc=$?; "
                 "llmrun --asset-dir /AI/QWEN --predict 2 1 2 3; echo rc=$?")
    ref = ids_line(generate(SMOL, (1, 2, 3), 2))
    lines = r.output.splitlines()
    assert lines[0] == "llmrun_qwen: expected Qwen3.5 assets, got SmolLM"
    assert lines[1:4] == ["rc=1", ref, "rc=0"]
    assert lines[4] == (f"[llmrun] --asset-dir /AI/QWEN ignored: the AI device serves "
                        f"{smol_name()} (SmolLM); the model is chosen on the host (harness run "
                        "--model ...)")
    assert lines[5:] == [ref, "rc=0"]


# every course error text, one command each: (command, expected output, exit status)
ERRORS = [
    ("llmrun --predict 0 1 2", "llmrun: bad --predict value 0", 1),
    ("llmrun --predict abc 1", "llmrun: bad --predict value abc", 1),
    ("llmrun --predict 2147483648 1", "llmrun: bad --predict value 2147483648", 1),
    ("llmrun 1 x 3", "llmrun: invalid token id x", 1),
    ("llmrun 1 4294967296", "llmrun: invalid token id 4294967296", 1),
    ("llmrun --stdin --prompt-file /prompt.txt",
     "llmrun: --stdin cannot be combined with --prompt-file", 1),
    ("llmrun --prompt-file /prompt.txt 1 2",
     "llmrun: cannot mix --prompt-file with inline token ids", 1),
    ("llmrun --prompt-file /nope.txt", "llmrun: failed to open prompt file /nope.txt", 1),
    ("llmrun --prompt-file /", "llmrun: bad prompt file /", 1),
    ("llmrun --prompt-file /bad.txt", "llmrun: invalid token id in /bad.txt near byte 4", 1),
    ("llmrun --prompt-file /of.txt", "llmrun: token id overflow in /of.txt near byte 11", 1),
    ("llmrun --prompt-file /empty.txt", "llmrun: no token ids found in /empty.txt", 1),
    ("llmrun --prompt-file /big.txt", "llmrun: prompt file /big.txt exceeds token limit 255", 1),
    ("llmrun 1 2 49152 3", "llmrun: token 2 out of range\nllmrun: request failed", 1),
    ("llmrun --predict 2147483647 1 2",
     "llmrun: request too long for runtime_seq_len=CTX\nllmrun: request failed", 1),
    ("llmrun --bogus 1", "llmrun: unknown option --bogus\nUSAGE", 1),
    ("llmrun --predict", "USAGE", 1),
    ("llmrun --stdin 1 2", "llmrun: --stdin cannot be combined with inline token ids", 1),
    ("llmrun --help", "USAGE", 0),
]

USAGE = """usage: llmrun [--asset-dir DIR] [--predict N] token0 token1 ...
       llmrun [--asset-dir DIR] [--predict N] --prompt-file FILE
       llmrun [--asset-dir DIR] --stdin
prompt file format: whitespace-separated token ids
stdin service format: <predict> <token0> <token1> ...
interactive mode: type exit or quit to return to the shell"""


def test_llmrun_error_texts() -> None:
    setup = ("echo 1 2 x > /bad.txt; echo 1 99999999999 > /of.txt; echo > /empty.txt; "
             "cat /prompt.txt /prompt.txt /prompt.txt /prompt.txt /prompt.txt /prompt.txt "
             "/prompt.txt /prompt.txt > /big.txt; llmrun --predict 1 1 > /dev-null-ish; "
             "rm /dev-null-ish; ")
    marker = "=====case"
    cmds = setup + "; ".join(f"echo {marker}; {cmd}; echo rc=$?" for cmd, _, _ in ERRORS)
    r = ai_guest(cmds)
    chunks = r.output.split(marker + "\n")[1:]
    assert len(chunks) == len(ERRORS), r.output
    ctx = None
    for (cmd, want, rc), got in zip(ERRORS, chunks, strict=True):
        text, _, status = got.rstrip("\n").rpartition("\n")
        assert status == f"rc={rc}", (cmd, got)
        if "CTX" in want:
            m = re.search(r"runtime_seq_len=(\d+)", text)
            assert m, (cmd, text)
            ctx = int(m.group(1))
            want = want.replace("CTX", m.group(1))
        if "USAGE" in want:
            # the course's six lines, then our notes
            assert text.startswith(want.replace("USAGE", USAGE)), (cmd, text)
        else:
            assert text == want, cmd
    assert ctx is not None and ctx >= 2048  # SmolLM2's context


def test_llmrun_stdin_service() -> None:
    lines = ["4 504 3575 282 4649 314", "", "   2 1 2 3   ", "0 1 2", "x y", "5",
             "3 1 2 49152", "1 " + " ".join(["7"] * 256), "exit", "4 1 2"]
    setup = "; ".join(f"echo '{line}' >> /req.txt" for line in lines)
    r = ai_guest(f"{setup}; llmrun --stdin < /req.txt; echo rc=$?; "
                 "echo 2 1 2 3 | llmrun_smol; echo rc=$?")
    bad = "llmrun: bad request line; expected: <predict> <token0> <token1> ..."
    ready = ("[{}] stdin service ready; format: <predict> <token0> <token1> ...; "
             "type exit or quit to return to sh")
    assert r.output.splitlines() == [
        ready.format("llmrun"),
        ids_line(generate(SMOL, (504, 3575, 282, 4649, 314), 4)),
        ids_line(generate(SMOL, (1, 2, 3), 2)),
        bad, bad, bad,
        "llmrun: token 2 out of range", "llmrun: request failed",
        bad,
        "[llmrun] leaving stdin service",
        "rc=0",
        ready.format("llmrun_smol"),      # no ids: interactive; ends at end of input
        ids_line(generate(SMOL, (1, 2, 3), 2)),
        "rc=0",
    ]


TIMING = re.compile(
    r"Model Loading Time: (\d+) us\n(?:  of which the one-time int8 repack: \d+ us [^\n]*\n)?"
    r"TTFT: (\d+) us\nTPOT: (\d+ us|n/a \(1 token\))\n"
    r"E2E: (\d+) us\nPrefix cache: \d+ of \d+ prompt tokens\n"
    r"(?:Tokens per step: \d+\.\d\d \(\d+ decode steps after the first token\)\n)?"
    r'timing: model="([^"]*)" synthetic=([01]) load_us=(\d+) ttft_us=(\d+) tpot_us=(-?\d+) '
    r"e2e_us=(\d+) prompt=(\d+) generated=(\d+) submit=(\d+) dispatch=(\d+) accept=(\d+) "
    r"first=(\d+) done=(\d+) waited=(\d+) cached=0 repack_us=(\d+) shown=(\d+) reqid=(\d+) "
    r"tokenize=0 tokenized=0 decoded=0 detok_us=0 steps=(\d+)\n")  # nothing cached (one block)


def test_llmrun_timing_format() -> None:
    r = ai_guest("llmrun --timing --predict 8 504 3575 282 4649 314; "
                 "llmrun --timing 1 2 3")
    ref = ids_line(generate(SMOL, (504, 3575, 282, 4649, 314), 8))
    assert r.output.startswith(ref + "\n")
    runs = list(TIMING.finditer(r.output))
    assert len(runs) == 2, r.output
    for m, (nprompt, ngen) in zip(runs, [(5, 8), (3, 1)], strict=True):
        g = m.groups()
        load, ttft, e2e = int(g[0]), int(g[1]), int(g[3])
        assert g[4] == smol_name() and g[5] == "0"
        assert (int(g[6]), int(g[7]), int(g[9])) == (load, ttft, e2e)
        assert (int(g[10]), int(g[11])) == (nprompt, ngen)
        submit, dispatch, accept, first, done, waited = map(int, g[12:18])
        # the lifecycle in order, and the reported figures are its differences
        assert 0 < submit <= dispatch <= accept <= first <= done <= waited
        assert ttft == first - submit and e2e == waited - submit
        assert g[19] == "0" and int(g[20]) > 0  # no --stream: nothing shown early
        if ngen > 1:
            assert g[2] == f"{(done - first) // (ngen - 1)} us" and int(g[8]) > 0
        else:
            assert g[2] == "n/a (1 token)" and g[8] == "-1"
        assert load > 0
        assert 0 <= int(g[21]) <= ngen - 1  # decode steps: a token each at most
    assert "synthetic" not in r.output.replace("synthetic=0", "")


QUOTE_TEXT = ("Repeat exactly: the quick brown fox jumps over the lazy dog. "
              "the quick brown fox jumps over the lazy dog.")


def test_llmrun_speculate_same_ids_fewer_steps() -> None:
    """--speculate: the device verifies drafted tokens, the ids stay those of plain decoding
    (greedy); --speculate 0 takes a step per token; a quoting prompt takes fewer steps than
    tokens, and the timing says so (`Tokens per step`, steps=); a bad value is refused."""
    from pyllm.registry import load_tokenizer

    n = 40
    QUOTE = " ".join(map(str, load_tokenizer(SMOL).encode(QUOTE_TEXT)))  # noqa: N806
    r = ai_guest(f"llmrun --timing --speculate 0 --predict {n} {QUOTE}; "
                 f"llmrun --timing --predict {n} {QUOTE}; "
                 f"llmrun --timing --speculate 3 --predict {n} {QUOTE}; "
                 "llmrun --speculate 17 1 2", timeout=300.0)
    runs = parse_llmrun(r.output)
    assert len(runs) == 3, r.output
    ref = generate(SMOL, tuple(int(x) for x in QUOTE.split()), n)
    assert all(x.ids == list(ref) for x in runs), r.output
    off, default, three = (x.timing["steps"] for x in runs)
    assert off == n - 1
    assert 0 < default < n - 1 and 0 < three < n - 1, (off, default, three)
    per_step = re.findall(r"Tokens per step: (\d+\.\d\d) \((\d+) decode steps", r.output)
    assert [int(s) for _, s in per_step] == [off, default, three]
    assert float(per_step[1][0]) > 1.0
    assert "llmrun: bad --speculate value 17 (0..16)" in r.output


# ------------------------------------------------------------------ aitest


def ai_state_names() -> dict[int, str]:
    """kernel_c/ai.h's AI_STATE_NAMES by state number (the header is the one source)."""
    from harness.abi import cheader

    h = cheader.load("ai.h")
    body = re.search(r"#define AI_STATE_NAMES\s*\{(.*?)\}", h.path.read_text(), re.S)
    assert body, "ai.h defines AI_STATE_NAMES"
    names = {h[f"AI_{k}"]: v for k, v in re.findall(r'\[AI_(\w+)\]\s*"(\w+)"', body.group(1))}
    assert sorted(names) == list(range(5)), names
    return names


def test_aitest_course_checks() -> None:
    r = ai_guest("aitest; echo rc=$?; "
                 "aitest --badwait; echo rc=$?; "
                 "aitest --async --query --fork-unauth --doublewait --predict 4 1 2 3; "
                 "echo rc=$?; "
                 "aitest --batch 8 --predict 3 5 6; echo rc=$?; "
                 "aitest --cacheprobe --predict 2 9; echo rc=$?; "
                 "aitest --predict 33; echo rc=$?; aitest --batch 9; echo rc=$?; "
                 "aitest -1; echo rc=$?; aitest -- 5x; echo rc=$?")
    out = r.output
    one = ids_line(generate(SMOL, (0,), 1))
    four = ids_line(generate(SMOL, (1, 2, 3), 4))
    three = ids_line(generate(SMOL, (5, 6), 3))
    blocks = out.split("rc=")
    # default: token 0, predict 1, synchronous ai_call
    assert blocks[0] == (f"[aitest] tokens: 0\n[aitest] token_count: 1\n[aitest] predict_count: 1\n"
                         f"[aitest] result: {one}\n[aitest] bytes: {len(one)}\n")
    assert blocks[1] == "0\n[aitest] badwait: PASS\n[aitest] tokens: 0\n" \
        "[aitest] token_count: 1\n[aitest] predict_count: 1\n" \
        f"[aitest] result: {one}\n[aitest] bytes: {len(one)}\n"
    m = re.fullmatch(r"0\n\[aitest\] reqid: (\d+)\n"
                     r"\[aitest\] query: reqid=(\d+) state=([123]) err=0 result_len=(\d+) "
                     r"state_name=(\w+)\n"
                     r"\[aitest\] query: PASS\n\[aitest\] fork-unauth: PASS\n"
                     r"\[aitest\] doublewait: PASS\n(.*)", blocks[2], re.S)
    assert m and m.group(1) == m.group(2), blocks[2]
    assert m.group(5) == ai_state_names()[int(m.group(3))]  # the course's fields, then the name
    assert m.group(6) == (f"[aitest] tokens: 1 2 3\n[aitest] token_count: 3\n"
                          f"[aitest] predict_count: 4\n[aitest] result: {four}\n"
                          f"[aitest] bytes: {len(four)}\n")
    batch = blocks[3]
    ids = [int(x) for x in re.findall(r"\[aitest\] batch submit\[\d\] reqid=(\d+)", batch)]
    assert len(ids) == 8 and ids == sorted(set(ids))
    results = re.findall(r"\[aitest\] batch result\[(\d)\]: (.*) \((\d+) bytes\)", batch)
    assert [int(i) for i, _, _ in results] == list(range(8))
    assert all(res == three and int(n) == len(three) for _, res, n in results)
    assert "[aitest] batch: PASS\n" in batch
    assert re.search(r"\[aitest\] cacheprobe: cold run\n\[aitest\] cacheprobe cold ticks: \d+\n"
                     r"\[aitest\] cacheprobe: warm run\n\[aitest\] cacheprobe warm ticks: \d+\n"
                     r"\[aitest\] cacheprobe cold us: \d+ warm us: \d+\n"
                     r"prefix_cache: valid=\d prefix_len=0 hits=\d+ misses=\d+ restores=\d+ "
                     r"saves=\d+ bypasses=[1-9]\d*\n"  # one token: nothing to reuse
                     r"\[aitest\] cacheprobe cache: .*\n"
                     r"\[aitest\] cacheprobe note: the warm run bypassed the cache \(a prompt "
                     r"of 1 token\)\n"
                     r"\[aitest\] cacheprobe: PASS\n", blocks[4])
    assert blocks[5] == "0\naitest: invalid predict count 33\n"
    assert blocks[6] == "1\naitest: batch too large\n"
    assert blocks[7] == "1\naitest: invalid token id -1\n"
    assert blocks[8] == "1\naitest: invalid token id 5x\n"
    assert blocks[9] == "1\n"
    for rc in blocks[1:5]:
        assert rc.startswith("0\n")


@pytest.mark.parametrize("model", [SMOL, QWEN_TINY], ids=["smol", "qwen"])
def test_cacheprobe_warm_run_reuses_the_prompt(model: str, tmp_path: Path) -> None:
    """A prompt of 200 ids, twice: the warm run takes all of it but its last token from the
    device's prefix cache (the course's counters line says so, llmrun --timing and the trace),
    with the same result."""
    write = "; ".join("echo " + " ".join(str(10 + 25 * k + i) for i in range(25)) + " >> p.txt"
                      for k in range(8))  # 200 ids, in pieces (exec takes 32 arguments)
    r = ai_guest(f"{write}; aitest --cacheprobe --predict 4 --prompt-file p.txt; echo rc=$?; "
                 "llmrun --timing --predict 2 --prompt-file p.txt", model, 300.0,
                 "--trace", str(tmp_path / "t.json"))
    out = r.output
    assert "[aitest] cacheprobe: PASS" in out and "rc=0" in out
    # 3 full blocks of 64 and 7 ids of a tail (Qwen3.5: its DeltaNet snapshot at 199 too)
    assert "prefix_cache: valid=1 prefix_len=199 hits=1 misses=1 restores=1 saves=1 " \
           "bypasses=0\n" in out, out
    cold, warm = map(int, re.search(r"cold us: (\d+) warm us: (\d+)", out).groups())
    print(f"[cacheprobe {Path(model).name}] cold {cold} us, warm {warm} us")  # not asserted
    assert re.search(r"Prefix cache: 199 of 200 prompt tokens\n", out), out
    assert re.search(r"timing: .* cached=199 repack_us=\d+ ", out)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    firsts = [e["args"]["cached_prompt_tokens"] for e in events if e["name"] == "first"]
    assert firsts == [0, 199, 199]  # cold, warm, llmrun


def test_aitest_our_checks() -> None:
    r = ai_guest("aitest --nonblock --predict 8 1 2; echo rc=$?; "
                 "aitest --smallcap --predict 5 3 4; echo rc=$?; "
                 "aitest --all --predict 2 1; echo rc=$?")
    out = r.output
    assert "[aitest] nonblock: 8 slots filled, then AI_EBUSY\n[aitest] nonblock: PASS\n" in out
    assert "[aitest] smallcap: PASS\n" in out
    assert "FAIL" not in out, out
    assert re.search(r"\[aitest\] stats: busy slots 0 -> 0, submitted \+\d+, completed \+\d+, "
                     r"failed \+0\n\[aitest\] stats: PASS\n", out), out
    for name in ("badwait", "batch", "nonblock", "smallcap", "query", "fork-unauth",
                 "doublewait", "stats"):
        assert f"[aitest] {name}: PASS" in out.split("rc=0\n")[2], name
    assert out.count("rc=0\n") == 3


# ------------------------------------------------------------------ aibench


def test_aibench_8_clients_all_correct_no_leaks(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    r = ai_guest("aibench -c 8 -n 4 -p 8 -g 8; echo rc=$?", SMOL, 300.0, "--trace", str(trace))
    out = r.output
    assert out.endswith("aibench: PASS\nrc=0\n"), out
    head = re.search(r'aibench: model="([^"]*)" synthetic=0 clients=8 requests=4 prompt=8 '
                     r"predict=8\nreference: ([\d ]+)\n", out)
    assert head, out
    prompt = (1, 42, 314, 2718, 7, 99, 1234, 2048)
    assert head.group(1) == smol_name() and head.group(2) == ids_line(generate(SMOL, prompt, 8))
    reqs = re.findall(r"^req client=(\d+) i=(\d+) reqid=(\d+) ok=(\d) err=(\d+) gen=(\d+) "
                      r"queue_us=(\d+) ttft_us=(\d+) tpot_us=(-?\d+) e2e_us=(\d+) submit=(\d+)$",
                      out, re.M)
    assert len(reqs) == 32
    assert sorted((int(c), int(i)) for c, i, *_ in reqs) == [(c, i) for c in range(8)
                                                               for i in range(4)]
    assert len({rq[2] for rq in reqs}) == 32  # request ids are never reused
    for rq in reqs:
        assert rq[3] == "1" and rq[4] == "0" and rq[5] == "8"
        assert int(rq[7]) <= int(rq[9])  # TTFT within E2E
    assert re.search(r"^total: requests=32 ok=32 failed=0 tokens=256 wall_us=\d+ "
                     r"req_per_s=\d+\.\d tok_per_s=\d+\.\d$", out, re.M)
    for name in ("ttft_us", "tpot_us", "e2e_us", "queue_us"):
        assert re.search(rf"^{name}: mean=\d+ median=\d+ p99=\d+ min=\d+ max=\d+$", out, re.M)
    assert re.search(r"^stats: free=8 queued=0 running=0 done=0 failed=0 orphans=0 workers=8 "
                     r"submitted=\+33 completed=\+33 failed=\+0$", out, re.M), out
    # the trace's counter: several requests in the engine at once, none left at the end
    counts = [e["args"] for e in json.loads(trace.read_text())["traceEvents"]
              if e["ph"] == "C" and e["name"] == "requests in flight"]
    assert max(c["engine"] for c in counts) >= 2
    assert counts[-1] == {"kernel queue": 0, "engine": 0}


def test_aibench_usage_errors() -> None:
    r = ai_guest("aibench -c 0; echo rc=$?; aibench -g 0; echo rc=$?; aibench -x 1; echo rc=$?")
    assert r.output.startswith("aibench: -c wants 1..32 clients\nrc=2\n"
                               "aibench: -g wants 1..4096 tokens\nrc=2\nusage: aibench")
    assert r.output.endswith("rc=2\n")


# ------------------------------------------------------------------ ai_daemon and init


def _ps(out: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, name) rows of every ps table in out."""
    return [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in
            re.finditer(r"^\s*(\d+)\s+(\d+)\s+\S+\s+[\d-]\s+\d+K (\S+)", out, re.M)]


def test_init_starts_ai_daemon_with_workers() -> None:
    proc = run_raw("ps", 120.0, "--model", SMOL) if not _model_available(SMOL) else None
    if proc is None:
        pytest.skip("SmolLM2 weights missing")
    out = proc.stdout.replace("\r\n", "\n")
    m = re.search(r"^\[init\] ai_daemon ready \(pid=(\d+)\)$", out, re.M)
    assert m, out
    daemon = int(m.group(1))
    rows = _ps(out)
    assert (daemon, 1, "ai_daemon") in rows
    workers = [pid for pid, ppid, name in rows if ppid == daemon and name == "ai_worker"]
    assert len(workers) == 8 and [name for _, _, name in rows].count("ai_daemon") == 1
    # no daemon without an AI model
    plain = run_raw("ps", 120.0)
    assert "ai_daemon" not in plain.stdout and plain.returncode == 0


def test_a_second_ai_daemon_names_the_one_running() -> None:
    """One line with the running daemon's pid (the kernel's ai_stats tells who the
    registered workers are), not a failed registration per worker; nothing changes."""
    r = ai_guest("ai_daemon; echo rc=$?; ai_daemon -w 1; echo rc=$?; ps; "
                 "llmrun --predict 3 1 2 3")
    daemon = re.search(r"^\[init\] ai_daemon ready \(pid=(\d+)\)$", r.raw.stdout, re.M)
    assert daemon, r.raw.stdout
    refusal = (f"ai_daemon: already running (pid {daemon.group(1)}, 8 workers registered); "
               "not starting another\nrc=1\n")
    assert r.output.startswith(refusal * 2), r.output
    assert "ai_worker_register" not in r.output
    rows = _ps(r.output)
    assert [pid for pid, _, name in rows if name == "ai_daemon"] == [int(daemon.group(1))]
    assert sum(name == "ai_worker" for _, _, name in rows) == 8
    assert r.output.endswith(ids_line(generate(SMOL, (1, 2, 3), 3)) + "\n"), r.output


def test_worker_killed_while_running_is_replaced() -> None:
    r = ai_guest("aitest --killworker --predict 3 1 2 3; echo rc=$?; "
                 "llmrun --predict 3 1 2 3; aitest --stats --predict 2 4; echo rc=$?")
    out = r.output
    assert re.search(r"^\[aitest\] killworker: killed 8 workers; the request got the worker "
                     r"died while running the request$", out, re.M), out
    assert "[aitest] killworker: PASS" in out and "FAIL" not in out, out
    exits = re.findall(r"^\[ai_daemon\] worker pid (\d+) exited status=-?\d+; starting another$",
                       out, re.M)
    assert len(set(exits)) == 8, out
    assert ids_line(generate(SMOL, (1, 2, 3), 3)) + "\n" in out
    assert "[aitest] stats: PASS" in out
    assert out.count("rc=0\n") == 2


def test_daemon_killed_is_restarted_by_init() -> None:
    r = ai_guest("aitest --killdaemon --predict 3 1 2 3; echo rc=$?; ps; "
                 "llmrun --predict 3 1 2 3")
    out = r.output
    assert "[aitest] killdaemon: PASS" in out and "FAIL" not in out, out
    m = re.search(r"^\[aitest\] killdaemon: ai_daemon (\d+) replaced by (\d+)$", out, re.M)
    assert m, out
    old, new = int(m.group(1)), int(m.group(2))
    assert re.search(r"^\[init\] ai_daemon exited status=-?\d+$", out, re.M), out
    assert f"[init] ai_daemon ready (pid={new})" in out
    retired = re.findall(r"^\[ai_daemon\] retiring worker pid (\d+) of an earlier ai_daemon$",
                         out, re.M)
    assert len(retired) == 8, out
    rows = _ps(out)
    assert [(pid, ppid) for pid, ppid, name in rows if name == "ai_daemon"] == [(new, 1)], rows
    workers = [(pid, ppid) for pid, ppid, name in rows if name == "ai_worker"]
    assert [ppid for _, ppid in workers] == [new] * 8, rows
    assert not {old, *map(int, retired)} & {pid for pid, _, _ in rows}
    assert out.endswith(ids_line(generate(SMOL, (1, 2, 3), 3)) + "\n"), out


# ------------------------------------------------------------------ course assets, synthetic


def image_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """build/fs.img's contents plus `files` (image name -> bytes), made by user.mk's own rule."""
    img = tmp_path / "fs.img"
    base = subprocess.run(["make", "-s", "--eval", "printfs: ; @echo $(FS_FILES)", "printfs"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    extra = []
    for name, data in files.items():
        host = tmp_path / name.replace("/", "_")
        host.write_bytes(data)
        extra.append(f"{name}={host}")
    subprocess.run(["make", "-s", f"FS_IMG={img}", f"FS_FILES={' '.join(base + extra)}", str(img)],
                   cwd=ROOT, check=True, capture_output=True)
    return img


def u32_list(ids: list[int] | tuple[int, ...]) -> bytes:
    """The course's PMT.BIN/EXP.BIN format: u32 count, then count u32."""
    return struct.pack(f"<I{len(ids)}I", len(ids), *ids)


def test_aitest_defaults_from_course_asset_files(tmp_path: Path) -> None:
    pmt = (504, 3575, 282, 4649, 314)
    exp = generate(SMOL, pmt, 6)
    img = image_with(tmp_path, {"AI/SMOL/PMT.BIN": u32_list(pmt), "AI/SMOL/EXP.BIN": u32_list(exp),
                                "AI/QWEN/EXP.BIN": u32_list([1] * 33)})
    r = ai_guest("aitest; echo rc=$?; aitest --predict 2; echo rc=$?; aitest --async 7; "
                 "echo rc=$?", SMOL, 300.0, "--fs", str(img))
    res = ids_line(exp)
    two = ids_line(generate(SMOL, pmt, 2))
    seven = ids_line(generate(SMOL, (7,), 6))
    reqid = re.search(r"reqid: (\d+)", r.output)
    assert reqid, r.output
    assert r.output == (
        f"[aitest] tokens: {ids_line(list(pmt))}\n[aitest] token_count: 5\n"
        f"[aitest] predict_count: 6\n[aitest] result: {res}\n[aitest] bytes: {len(res)}\n"
        "[aitest] expected: PASS\nrc=0\n"
        f"[aitest] tokens: {ids_line(list(pmt))}\n[aitest] token_count: 5\n"
        f"[aitest] predict_count: 2\n[aitest] result: {two}\n[aitest] bytes: {len(two)}\nrc=0\n"
        f"[aitest] reqid: {reqid.group(1)}\n[aitest] tokens: 7\n[aitest] token_count: 1\n"
        f"[aitest] predict_count: 6\n[aitest] result: {seven}\n"
        f"[aitest] bytes: {len(seven)}\nrc=0\n")


def test_aitest_bad_course_asset_files(tmp_path: Path) -> None:
    img = image_with(tmp_path, {"AI/SMOL/PMT.BIN": u32_list([1, 2, 3])[:-2],
                                "AI/QWEN/EXP.BIN": u32_list([1] * 33)})
    r = ai_guest("aitest; echo rc=$?; aitest 5; echo rc=$?", SMOL, 300.0, "--fs", str(img))
    assert r.output == ("aitest: failed to load default prompt tokens\nrc=1\n"
                        "aitest: failed to load default predict count\nrc=1\n")


def test_synthetic_weights_are_labelled(tmp_path: Path) -> None:
    # a folder name with dots (as qwen3.5-0.8b-synthetic) is shown whole
    synth = tmp_path / "qwen3.5-0.8b-tiny"
    shutil.copytree(QWEN_TINY, synth)
    (synth / "SYNTHETIC").write_text("random weights (test)\n")
    r = ai_guest("llmrun --timing --predict 3 1 2 3; aibench -c 2 -n 1 -g 2 -q", str(synth))
    assert re.search(r'^timing: model="qwen3.5-0.8b-tiny" synthetic=1 ', r.output, re.M), r.output
    assert ("note: synthetic weights (qwen3.5-0.8b-tiny): the ids are not meaningful, the "
            "timings are real\n") in r.output
    assert re.search(r'^aibench: model="qwen3.5-0.8b-tiny" synthetic=1 ', r.output, re.M)
    assert r.output.endswith("aibench: PASS\n")
    boot = r.raw.stdout
    assert re.search(r"^\[ai_daemon\] model qwen3.5-0.8b-tiny \(qwen3_5, .* ready on the AI "
                     r"device, loaded in \d+ us( \(of which one-time int8 repack \d+ us\))?; "
                     r"synthetic weights$", boot, re.M), boot


def test_without_ai_device_every_program_says_so() -> None:
    from guest import run_guest

    r = run_guest("llmrun 1 2 3; echo rc=$?; aitest; echo rc=$?; aibench; echo rc=$?; "
                  "ai_daemon; echo rc=$?; ps")
    lines = r.output.splitlines()
    assert lines[:8] == [
        "llmrun: no AI device (boot with: harness run --model smol)", "rc=1",
        "aitest: ai_call failed (no AI device or no model loaded)", "rc=1",
        "aibench: no AI device with a ready model (boot with: harness run --model smol)", "rc=2",
        "ai_daemon: no AI device", "rc=1",
    ]
    assert "ai_daemon" not in r.output.split("rc=1\n")[-1]  # init did not start one


# ------------------------------------------------------------------ ai_read (streaming)


def test_aireadtest_semantics_table_timeouts_and_kill() -> None:
    """Every row of the semantics table with ai_read, timeouts, bad arguments and a reader
    killed in its sleep (user_c/aireadtest.c); ids arrive while the request still runs."""
    r = ai_guest("aireadtest --predict 48; echo rc=$?")
    out = r.output
    for name in ("stream", "done", "fork-unauth", "consumed", "timeout", "badargs", "kill"):
        assert f"[aireadtest] {name}: PASS\n" in out, out
    m = re.search(r"\[aireadtest\] stream: 48 ids in (\d+) reads, (\d+) while running\n", out)
    assert m and int(m.group(2)) >= 1, out
    assert out.endswith("rc=0\n"), out
