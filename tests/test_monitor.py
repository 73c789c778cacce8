"""`harness top` (harness/monitor/): the AI service watched while aibench overloads it.

The snapshots are the monitor's own, recorded by `harness run --monitor-record`; what
they must show is checked against the kernel: full slots and blocked submitters while
16 clients share 8 slots, every worker back on the empty queue at the end, and the
kernel counters the view printed equal to aibench's `ai_stats` line. The terminal view
itself runs under tmux (capture-pane).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from guest import ROOT, run_guest
from test_ai_user import SMOL, _model_available

from harness.monitor.view import PANELS, read_record, render

AIBENCH = "aibench -c 16 -n 3 -p 8 -g 16 -q"


def _skip() -> None:
    why = _model_available(SMOL)
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    """aibench -c 16 under `harness run --monitor-record`: (its output, the snapshots)."""
    _skip()
    rec = tmp_path_factory.mktemp("top") / "bp.jsonl"
    r = run_guest(AIBENCH, 300.0, "--model", SMOL, "--monitor-record", str(rec))
    assert r.status == 0 and "aibench: PASS" in r.output, r.output[-2000:]
    return r.output, read_record(rec)


def test_snapshots_show_back_pressure_and_who_wakes_whom(recorded) -> None:
    _, snaps = recorded
    full = [s for s in snaps if s["stats"]["slots"][0] == 0]
    assert full, "no snapshot with all 8 slots taken"
    blocked = [p for s in snaps for p in s["sleepers"] if p["where"] == "submit"]
    assert blocked, "no submitter seen blocked"
    assert {p["why"] for p in blocked} == {"all 8 slots taken"}
    assert all(p["name"] == "aibench" and "frees a slot" in p["waker"] for p in blocked)
    # a blocked submitter is only ever seen while every slot is taken
    for s in snaps:
        if any(p["where"] == "submit" for p in s["sleepers"]):
            assert s["stats"]["slots"][0] == 0, render(s)
    # an ai_wait sleeper names its own request, and that request's slot is its own (DONE
    # too: a snapshot can fall between the completion and the sleeper's wakeup on another
    # hart; seen once in a CI run)
    waits = [(s, p) for s in snaps for p in s["sleepers"] if p["where"] == "ai_wait"]
    assert waits
    for s, p in waits:
        slot = next(sl for sl in s["slots"] if sl["id"] == p["request"])
        assert slot["owner"] == p["pid"] and slot["state"] in ("QUEUED", "RUNNING", "DONE")
    assert snaps[-1]["counters"]["blocked_submits"] >= 1
    assert snaps[-1]["counters"]["wakeups"] > 0


def test_end_workers_idle_and_counts_equal_ai_stats(recorded) -> None:
    out, snaps = recorded
    last = snaps[-1]
    assert len(last["workers"]) == 8
    assert all(w["doing"] == "queue empty" for w in last["workers"]), render(last)
    assert {p["why"] for p in last["sleepers"]} == {"queue empty"}
    assert last["queue"] == [] and last["stats"]["slots"][0] == 8
    m = re.search(r"stats: free=(\d+) queued=(\d+) running=(\d+) done=(\d+) failed=(\d+) "
                  r"orphans=(\d+) workers=(\d+) submitted=\+(\d+) completed=\+(\d+) "
                  r"failed=\+(\d+)", out)
    assert m, out[-2000:]
    free, queued, running, done, failed, orphans, workers, sub, comp, fail = map(int, m.groups())
    st = last["stats"]
    assert st["slots"] == [free, queued, running, done, failed]
    assert (st["queued"], st["orphans"], st["workers"]) == (queued, orphans, workers)
    # aibench is the first AI program of the boot: its deltas are the totals
    assert (st["submitted"], st["completed"], st["failed"]) == (sub, comp, fail) == \
        (16 * 3 + 1, 16 * 3 + 1, 0)
    text = "\n".join(render(last))
    for panel in PANELS:
        assert panel in text
    assert "DEVICE: SmolLM2-135M-Instruct: " in text  # the name its users know it by


def test_replay_frames_and_bad_record(recorded, tmp_path: Path) -> None:
    _, snaps = recorded
    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(__import__("json").dumps(s) + "\n" for s in snaps))
    r = subprocess.run([sys.executable, "-m", "harness", "top", "--replay", str(rec),
                        "--frame", "-1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "WORKERS (8)" in r.stdout, r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    r = subprocess.run([sys.executable, "-m", "harness", "top", "--replay", str(bad)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad.jsonl:1: not a harness top snapshot" in r.stderr


# ------------------------------------------------------------------ the terminal view
def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _wait_pane(target: str, want: str, timeout: float = 120.0) -> str:
    t0, text = time.monotonic(), ""
    while time.monotonic() - t0 < timeout:
        text = _tmux("capture-pane", "-p", "-t", target)
        if want in text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"{want!r} never appeared in the pane:\n{text}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_terminal_view_under_tmux(tmp_path: Path) -> None:
    """`harness run --monitor` with aibench inside tmux opens `harness top` in a split
    pane beside it (the view, live); then the run's record stepped through with keys."""
    _skip()
    sess = f"htop{time.monotonic_ns() % 10**9}"
    rec = tmp_path / "seen.jsonl"
    env = "XDG_RUNTIME_DIR=" + str(tmp_path)  # a private socket dir
    _tmux("new-session", "-d", "-s", sess, "-x", "220", "-y", "70", "-c", str(ROOT),
          f"env {env} {sys.executable} -m harness run --model smol --monitor-record {rec} "
          f"-c 'sleep 2; {AIBENCH}; sleep 2'")
    try:
        _tmux("set-option", "-t", sess, "remain-on-exit", "on")
        t0 = time.monotonic()
        while "1" not in _tmux("list-panes", "-t", sess, "-F", "#{pane_index}").split():
            assert time.monotonic() - t0 < 60, "harness run --monitor opened no split pane"
            time.sleep(0.2)
        right = f"{sess}:0.1"
        live = _wait_pane(right, "REQUEST SLOTS")
        for panel in PANELS:
            assert panel in live, live
        assert "harness top  run-" in live  # attached to the run's socket
        end = _wait_pane(right, "the machine stopped", 240)
        assert "WORKERS (8)" in end and end.count("queue empty") >= 8, end
        snaps = read_record(rec)
        assert any(s["stats"]["slots"][0] == 0 for s in snaps), "no frame with full slots"
        # the same record, stepped through in a pane
        _tmux("new-window", "-t", sess, "-c", str(ROOT),
              f"{sys.executable} -m harness top --replay {rec}")
        _wait_pane(f"{sess}:1", f"frame 1/{len(snaps)}")
        _tmux("send-keys", "-t", f"{sess}:1", "n")
        _wait_pane(f"{sess}:1", f"frame 2/{len(snaps)}")
        _tmux("send-keys", "-t", f"{sess}:1", "G")
        last = _wait_pane(f"{sess}:1", f"frame {len(snaps)}/{len(snaps)}")
        assert "WORKERS (8)" in last and "queue empty" in last
        _tmux("send-keys", "-t", f"{sess}:1", "q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", sess], capture_output=True, check=False)


def test_counters_count_episodes_not_snapshots() -> None:
    """A submitter asleep on full slots across three snapshots is one blocked submit; its
    leaving that channel is one wake-up; requests/s follows the kernel's completed."""
    from harness.monitor.counters import Counters

    def snap(t: float, done: int, asleep: list[tuple[int, str, str]]) -> dict:
        return {"t": t, "stats": {"completed": done, "slots": [0, 0, 8, 0, 0]},
                "slots": [], "sleepers": [{"pid": p, "where": w, "why": y}
                                          for p, w, y in asleep]}

    c = Counters()
    full = (21, "submit", "all 8 slots taken")
    for i in range(3):
        c.feed(snap(i * 0.5, 0, [full]))
    last = c.feed(snap(1.5, 4, [(21, "ai_wait", "request 9 not done")]))["counters"]
    assert last["blocked_submits"] == 1 and last["wakeups"] == 1
    assert last["requests_per_s"] == 8.0 and last["full_snapshots"] == 4
