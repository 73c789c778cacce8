"""The AI service under load and faults (user_c/aistress.c through harness/run/fuzz_stress.py).

More clients than request slots send mixed short and long requests in four styles; a
killer kills clients mid-wait and ai_daemon's workers and supervisor mid-request; the AI
device injects failures, delays, reordered completions and engine exceptions. Afterwards:
every completed result equals this process's own engine's for that prompt (so no client
got another's result, and no fault corrupted one), every slot is free, nothing queued or
orphaned, the daemon's workers are all back, no client is stuck and free memory is where
it started.
"""

from __future__ import annotations

import pytest
from reliability_util import load_tiny, require_build

from harness.run.fuzz_stress import StressReport, boot, fnv1a, run_stress, verify

FAULTS = "fail=0.05,delay=30ms,reorder,engine-raise=0.03,seed={seed}"


@pytest.fixture(scope="module")
def tiny():  # -> LoadedModel
    yield from load_tiny("aistress")


def _ok(rep: StressReport) -> None:
    b = rep.boot
    assert b is not None
    if not rep.passed:
        raise AssertionError(f"stress seed {rep.seed}: {rep.verdict} ({b.exit}: {b.message}); "
                             f"{len(rep.mismatched)} mismatched: {rep.mismatched[:3]}\n"
                             f"{b.report}\n--- console ---\n{b.output[-4000:]}")
    assert rep.slots_free == 8 and rep.queued == 0 and rep.orphans == 0 and rep.stuck == 0
    a, z = rep.free_pages.split("->")
    assert a == z


def test_stress_with_kills_and_faults(tiny) -> None:
    rep = run_stress(tiny, seed=1, seconds=6, clients=12, kill=15, kill_daemon=6,
                     faults=FAULTS.format(seed=1), hang_timeout=30)
    _ok(rep)
    assert rep.ok > 100 and rep.verified == rep.ok
    assert rep.client_kills > 0 and rep.daemon_kills > 0
    assert rep.failed > 0                       # the faults were seen by clients ...
    faults = rep.boot.faults                    # ... and each kind was injected
    for kind in ("fail-at-notify", "fail-at-completion", "engine-raise", "delay", "reorder"):
        assert faults.get(kind, 0) > 0, faults


def test_stress_without_faults_every_request_completes(tiny) -> None:
    rep = run_stress(tiny, seed=2, seconds=4, clients=12, kill=0, kill_daemon=0,
                     hang_timeout=30)
    _ok(rep)
    assert rep.failed == 0 and rep.ok == rep.requests > 50


def test_verify_finds_a_result_given_to_the_wrong_client(tiny) -> None:
    """The check can fail: two results swapped between prompts are both reported."""
    from pyllm.request import GenParams

    p1, p2 = [5, 6, 7], [300, 2, 9, 11]
    h1, h2 = (fnv1a(" ".join(map(str, tiny.engine.run(p, GenParams(
        max_new_tokens=6, stop_ids=())).tokens)).encode()) for p in (p1, p2))
    assert h1 != h2
    assert verify(tiny.engine, [(0, p1, 6, h1), (1, p2, 6, h2)]) == (2, [])
    ok, bad = verify(tiny.engine, [(0, p1, 6, h2), (1, p2, 6, h1)])
    assert ok == 0 and len(bad) == 2


def test_a_device_taking_long_is_not_a_hang(tiny) -> None:
    """slow=3s on every request, hang timeout 1 s: the idle guest waits for a busy
    device, which is legitimate; the request still completes right."""
    b = boot("llmrun --predict 4 7 8 9", model=tiny, faults="slow=3s,slow-p=1",
             hang_timeout=1.0, timeout=60)
    assert b.exit == "poweroff" and b.status == 0, (b.message, b.report, b.output[-2000:])
    assert b.faults.get("slow") == 1 and b.wall_s >= 3


def test_every_request_failing_is_reported_cleanly(tiny) -> None:
    """fail=1: each request fails with an error status (at the notify or, with garbage
    ids and a lying ngenerated, at completion); programs say so and the service stays
    whole."""
    b = boot("llmrun --predict 4 1 2 3; echo st=$?; llmrun --predict 8 4 5 6; echo st=$?;"
             " aistress -t 2 -c 4 -k 0 -q", model=tiny, faults="fail=1,seed=5",
             hang_timeout=20, timeout=120)
    assert b.exit == "poweroff", (b.message, b.report)
    assert b.output.count("st=1") == 2 and "llmrun: request" in b.output
    assert "aistress: slots_free=8/8 queued=0 orphans=0" in b.output
    assert "ok=0 " in b.output          # nothing completed, nothing was made up
    assert b.faults.get("fail-at-notify", 0) + b.faults.get("fail-at-completion", 0) > 5


@pytest.mark.soak
@pytest.mark.parametrize("seed", [21, 22])
def test_soak_stress_on_smollm2(seed: int) -> None:
    require_build("aistress")
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load("smol")
    try:
        rep = run_stress(lm, seed=seed, seconds=180, clients=12, kill=10, kill_daemon=4,
                         faults="fail=0.05,delay=200ms,reorder,engine-raise=0.02,"
                                f"slow=20s,slow-p=0.01,seed={seed}",
                         hang_timeout=120)
    finally:
        lm.close()
    _ok(rep)
    assert rep.verified == rep.ok > 50


def test_fault_plan_parsing() -> None:
    from harness.devices.ai_faults import FaultPlan

    p = FaultPlan.parse("fail=0.1, delay=200ms,reorder,slow=2m,slow-p=0.5,engine-raise=0.05,seed=9")
    assert (p.fail, p.delay_s, p.reorder, p.slow_s, p.slow_p, p.engine_raise, p.seed) == (
        0.1, 0.2, True, 120.0, 0.5, 0.05, 9)
    assert FaultPlan.parse("") == FaultPlan()
    for bad in ("fail=1.5", "delay=fast", "reorder=1", "seed=x", "boom", "slow-p=-1"):
        with pytest.raises(ValueError):
            FaultPlan.parse(bad)
