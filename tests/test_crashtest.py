"""harness crashtest: power cuts after every disk write of the fscrash workload, in order
and with the writes between flushes reordered, recover to the last committed state; the
checker catches a commit protocol without flushes; kill -9 of `harness run --persist`
leaves a sound image. The long run is in the soak set (-m soak)."""

from __future__ import annotations

import pytest

from harness.disk.crashtest import check_markers, kill_runs, record, run_crashtest
from tests.reliability_util import require_build


@pytest.fixture(autouse=True)
def _built() -> None:
    require_build("fscrash", "ls")


def test_every_crash_point_recovers() -> None:
    rep = run_crashtest(rounds=1, reorder_samples=1, seed=1)
    assert rep.failures == []
    assert rep.in_order == rep.writes + 1 and rep.writes > 100
    assert rep.reordered > 20
    assert rep.commits == rep.calls     # one process: each call commits before returning


def test_recording_sees_each_call_commit() -> None:
    rec = record(1)
    assert len(rec.markers) == 20 and len(rec.commits) >= 20
    assert check_markers(rec) == []
    # when a call returns, its commit is installed and cleared: no write after the last
    # commit's clear but flushes
    for m in rec.markers:
        last_end = max(end for _, end in rec.commits if end < m)
        assert all(rec.journal[i] is None for i in range(last_end + 1, m))


def test_missing_flushes_are_caught() -> None:
    """Without the barriers a reordering disk can keep a commit record whose log blocks
    never landed: the checker must see the damage."""
    rep = run_crashtest(rounds=1, sample=1, reorder_samples=4, ignore_flushes=True, seed=1)
    assert rep.failures and all(f.point.startswith("r") for f in rep.failures)


def test_kill_of_persisting_harness_leaves_a_sound_image() -> None:
    killed, _, bad = kill_runs(2, seed=1)
    assert bad == []
    assert killed == 2


def test_concurrent_calls_share_commits_and_stay_atomic() -> None:
    """Three processes at once: group commit puts several calls in one transaction, and a
    seeded sample of crash points still recovers to a committed state."""
    rep = run_crashtest(rounds=1, procs=3, sample=40, reorder_samples=1, seed=3)
    assert rep.failures == []
    assert rep.commits < rep.calls


@pytest.mark.soak
def test_soak_crashtest_concurrent() -> None:
    rep = run_crashtest(rounds=2, procs=3, reorder_samples=4, seed=5)
    assert rep.failures == []


@pytest.mark.soak
def test_soak_crashtest_bigger_workload() -> None:
    rep = run_crashtest(rounds=3, reorder_samples=6, seed=7)
    assert rep.failures == [] and rep.in_order > 400


@pytest.mark.soak
def test_soak_kill_persist() -> None:
    _, _, bad = kill_runs(20, seed=3)
    assert bad == []


@pytest.mark.parametrize("k", [0, 7, 41, 120])
def test_live_power_cut_matches_the_rebuilt_image(k: int) -> None:
    """The disk cut live after k writes holds exactly the image crashtest rebuilds from the
    journal (the workload is deterministic up to the cut)."""
    from harness.disk.crashtest import _apply
    from harness.disk.diskboot import boot_disk

    rec = record(1)
    live = boot_disk(rec.base, "fscrash 1", cut_after=k, timeout=120)
    rebuilt = _apply(rec.base, [rec.journal[i] for i in rec.writes[:k]])  # type: ignore[misc]
    assert bytes(live.disk) == rebuilt
