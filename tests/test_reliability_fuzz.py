"""The system-call fuzzer (user_c/sysfuzz.c) against the real kernel, through
harness/run/fuzz_stress.py: concurrent processes make random calls, the AI ones included, with
hostile pointers, lengths, fds and request ids, while a killer kills them at random
moments. The kernel must not panic or hang (the hang detector is on), and afterwards every
page and every AI slot must be back (sysfuzz checks, and says OK).

The default suite runs a few thousand calls per case (seconds); `-m soak` runs minutes of
it on SmolLM2 with device faults.
"""

from __future__ import annotations

import pytest
from reliability_util import image_without_daemon, load_tiny, require_build

from harness.run.fuzz_stress import FuzzReport, run_fuzz

FAULTS = "fail=0.1,delay=30ms,reorder,engine-raise=0.05,seed={seed}"


@pytest.fixture(scope="module")
def tiny():  # -> LoadedModel
    yield from load_tiny("sysfuzz")


def _ok(rep: FuzzReport) -> None:
    b = rep.boot
    assert b is not None
    if not rep.passed:
        raise AssertionError(f"fuzz seed {rep.seed}: {rep.verdict} ({b.exit}: {b.message})\n"
                             f"{b.report}\n--- console ---\n{b.output[-4000:]}")
    assert rep.leaked_pages == 0


def test_fuzz_without_the_ai_device() -> None:
    require_build("sysfuzz")
    rep = run_fuzz(seed=1, calls=3000, procs=4, kill=20, hang_timeout=30, watchdog=3)
    _ok(rep)
    assert rep.calls > 2000 and rep.killed > 0
    assert rep.ai_submitted == 0


def test_fuzz_with_the_ai_device_and_faults(tiny) -> None:
    rep = run_fuzz(seed=2, calls=3000, procs=4, kill=20, model=tiny,
                   faults=FAULTS.format(seed=2), hang_timeout=30)
    _ok(rep)
    assert rep.calls > 2000
    assert rep.ai_submitted > 20 and rep.ai_completed > 0  # real requests, not just refusals


def test_fuzz_as_worker_without_the_daemon(tiny, tmp_path) -> None:
    """No ai_daemon: the fuzz processes register as workers themselves and take, run,
    complete (with hostile lengths and statuses) and abandon real requests."""
    rep = run_fuzz(seed=3, calls=3000, procs=4, kill=25, model=tiny, hang_timeout=30,
                   fs=image_without_daemon(tmp_path), quiet=False)
    _ok(rep)
    made, ok, _ = rep.table["ai_worker_register"]
    assert ok > 0, rep.table                       # someone became a worker
    assert rep.table["ai_worker_get"][1] > 0       # and took requests


def test_the_same_seed_makes_the_same_calls() -> None:
    """One process, no killer: the per-call table (made, ok, failed) is a function of
    the seed (but for which kills of a child find it still alive)."""
    require_build("sysfuzz")
    # (a process blocked for good, e.g. a registered worker waiting for requests that
    # never come, is killed by the watchdog after 1 s, at the same call every time)
    a, b, c = (run_fuzz(seed=s, calls=600, procs=1, kill=0, hang_timeout=30, quiet=False,
                        watchdog=1) for s in (5, 5, 6))
    for r in (a, b, c):
        _ok(r)
    assert a.table and _seeded(a.table) == _seeded(b.table)
    assert _seeded(a.table) != _seeded(c.table)


def _seeded(table: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, ...]]:
    """The part of a per-call table the seed fixes. Whether `kill` of our own last child
    succeeds depends on timing (the kernel refuses a zombie: the child may or may not have
    exited yet), so for `kill` only the number of calls made counts."""
    return {k: (v[0],) if k == "kill" else v for k, v in table.items()}


@pytest.mark.soak
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_soak_fuzz_on_smollm2_with_faults(seed: int) -> None:
    require_build("sysfuzz")
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load("smol")
    try:
        rep = run_fuzz(seed=seed, seconds=120, procs=6, kill=20, model=lm,
                       faults=FAULTS.format(seed=seed), hang_timeout=60)
    finally:
        lm.close()
    _ok(rep)
    assert rep.calls > 5000
