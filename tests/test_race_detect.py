"""`harness race` finds what a student's one-line change breaks: kernels built from the
real sources with one change each (tests/race_kernels.py) are reported with the right
`file:line` within the seeds used here, and the unmodified kernel gives no report in
the same runs. Also: a seed's report comes back with the seed, the data-race watch's
holds are snapshotted by time travel, and `harness debug --race` stops at a race."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.guest.programs import Programs
from harness.run.race_seeds import RaceOptions, render, run_seed
from tests.race_kernels import Variant, build, line_of

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
FS = ROOT / "build" / "fs.img"
USER = ROOT / "build" / "user"

pytestmark = pytest.mark.skipif(not (KERNEL.is_file() and FS.is_file()),
                                reason="needs `make build` (kernel and fs.img)")

FORKS = "echo hi | wc; ls | wc; cat README | wc; echo a | cat | cat | wc"

KFREE_UNLOCKED = Variant("kfree-unlocked", (("kalloc.c", """\
  acquire(&kmem.lock);
  r->next = kmem.freelist;
  kmem.freelist = r;
  kmem.nfree++;
  release(&kmem.lock);""", """\
  r->next = kmem.freelist;   // (the broken change: no kmem.lock)
  kmem.freelist = r;
  kmem.nfree++;"""),))

FORK_ORDER = Variant("fork-order", (("proc.c", """\
  pid = np->pid;
  release(&np->lock);

  acquire(&wait_lock);
  np->parent = p;
  release(&wait_lock);
""", """\
  pid = np->pid;

  acquire(&wait_lock);       // (the broken change: still holding np->lock)
  np->parent = p;
  release(&wait_lock);
  release(&np->lock);
"""),))

SLEEP_LOCKED = Variant("sleep-locked", (
    ("timer.c", "struct spinlock tickslock;\n",
     "struct spinlock tickslock;\nstatic struct spinlock sleepextra;\n"),
    ("timer.c", "    sleep(&ticks, &tickslock);\n",
     "    acquire(&sleepextra);      // (the broken change)\n"
     "    sleep(&ticks, &tickslock);\n    release(&sleepextra);\n")))


def _runs(kernel: Path, cmd: str, seeds: range, **kw: object) -> list:
    programs = Programs(kernel, USER)
    opts = RaceOptions(cmd=cmd, kernel=kernel, fs=FS, cpus=4, timeout=300, **kw)  # type: ignore[arg-type]
    return [(r, [render(f, programs) for f in r.findings])
            for r in (run_seed(opts, f"random:{s}", programs) for s in seeds)]


def _sites(text: str) -> set[str]:
    """The `file:line` of each chain's first frame in a rendered report."""
    return set(re.findall(r"#0\s+0x[0-9a-f]+ in \S+ at \S*?([a-z_]+\.c:\d+)", text))


def test_the_unmodified_kernel_gives_no_report() -> None:
    for r, texts in _runs(KERNEL, FORKS, range(1, 4)):
        assert r.exit == "ok" and texts == [], "\n".join(texts)
        assert r.watched > 50 and r.events > 1000


def test_a_spinlock_removed_around_the_free_list_is_a_data_race() -> None:
    elf = build(KFREE_UNLOCKED)
    want = {f"kalloc.c:{line_of(KFREE_UNLOCKED, 'kalloc.c', t)}"
            for t in ("r->next = kmem.freelist;", "kmem.freelist = r;", "kmem.nfree++;")}
    races = [t for _, texts in _runs(elf, FORKS, range(4, 10)) for t in texts
             if t.startswith("=== data race")]
    assert races, "no data race reported in seeds 4..9"
    assert any(_sites(t) & want for t in races), races[0]
    assert any("kmem.freelist" in t or "kmem.nfree" in t for t in races)


def test_two_locks_in_opposite_orders_is_an_order_cycle() -> None:
    elf = build(FORK_ORDER)
    line = line_of(FORK_ORDER, "proc.c", "(the broken change: still holding np->lock)")
    (r, texts), = _runs(elf, "echo hi | wc", range(1, 2), data=False)
    order = [t for t in texts if t.startswith("=== lock order")]
    assert order and f"proc.c:{line}" in order[0], texts
    assert '"wait_lock" then "proc"' in order[0] or '"proc" then "wait_lock"' in order[0]


def test_sleep_with_a_second_spinlock_is_reported() -> None:
    elf = build(SLEEP_LOCKED)
    line = line_of(SLEEP_LOCKED, "timer.c", "sleep(&ticks, &tickslock);")
    (r, texts), = _runs(elf, "sleep 1", range(1, 2))
    sleep = [t for t in texts if t.startswith("=== sleep")]
    assert sleep and f"timer.c:{line}" in sleep[0], texts
    assert r.exit == "panic"  # sched() then finds two locks held: the report said why first


def test_a_seed_shows_its_race_again() -> None:
    elf = build(KFREE_UNLOCKED)
    first = [(r.instructions, texts) for r, texts in _runs(elf, FORKS, range(6, 7))]
    again = [(r.instructions, texts) for r, texts in _runs(elf, FORKS, range(6, 7))]
    assert first == again


def test_harness_debug_race_stops_at_the_second_access() -> None:
    elf = build(KFREE_UNLOCKED)
    seed = next(f"random:{s}" for s in range(4, 10)
                for r, texts in _runs(elf, FORKS, range(s, s + 1))
                if any(t.startswith("=== data race") for t in texts))
    r = subprocess.run(
        [sys.executable, "-m", "harness", "debug", "--kernel", str(elf), "--cpus", "4",
         "--schedule", seed, "--race", "-c", FORKS, "--batch", "--ex", "continue",
         "--ex", "bt", "--ex", "info locks"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert "=== data race" in out and "race detector: data race" in out, out[-3000:]
    after = out.split("race detector: data race", 1)[1]
    assert "kalloc.c:" in after, out[-3000:]
    # the second access is kalloc's, under kmem.lock: info locks shows it held
    assert re.search(r"hart \d \(pid \d+ \w+\): kmem\.lock \[kmem\]", after), after


AI_COUNTER = Variant("ai-counter", (
    ("ai_slots.c", "  sv->submitted++;\n", ""),
    ("ai_service.c", """\
  wakeone(&ai.sv.queue);   // one worker per request (it takes it or passes it on)
  release(&ai_lock);
  return id;""", """\
  wakeone(&ai.sv.queue);   // one worker per request (it takes it or passes it on)
  release(&ai_lock);
  ai.sv.submitted++;       // (the broken change: counted after the lock is gone)
  return id;""")))
AISTRESS = "aistress -c 4 -t 1 -k 0 -d 0 -L 0 -q"


@pytest.fixture(scope="module")
def smol():
    from tests.test_ai_host import _need_smol

    _need_smol()
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load("smol")
    yield lm
    lm.close()


@pytest.mark.slow
def test_an_ai_service_counter_outside_its_lock_is_a_data_race(smol) -> None:
    """The student's own file in focus (--focus): every sample lands in it."""
    elf = build(AI_COUNTER)
    line = line_of(AI_COUNTER, "ai_service.c", "(the broken change")
    focus = ("ai_service.c",)
    found = []
    for s in range(1, 5):
        (r, texts), = _runs(elf, AISTRESS, range(s, s + 1), model=smol, focus=focus)
        found += [t for t in texts if t.startswith("=== data race")]
        if found:
            break
    assert found, "no data race in seeds 1..4"
    assert "ai.sv.submitted" in found[0] and f"ai_service.c:{line}" in found[0], found[0]
    for r, texts in _runs(KERNEL, AISTRESS, range(1, 3), model=smol, focus=focus):
        assert r.exit == "ok" and texts == [], "\n".join(texts)


@pytest.mark.soak
@pytest.mark.parametrize("cmd,model", [("usertests -q", False), ("aitest --all", True)])
def test_our_kernel_is_clean_over_50_seeds(cmd: str, model: bool, request) -> None:  # noqa: ANN001
    """The issue's run: our usertests and `aitest --all` on 4 harts under both detectors,
    50 schedules each: no report (every one found so far is fixed or marked with its
    reason: docs/DEBUGGING.md, "What it found in our kernel"). A soak run (`pytest -m soak
    -k 50_seeds`): usertests is 425 M instructions a schedule, 2-3 minutes each on this
    2-core machine; `aitest --all` is 3 M, 80 s for the 50, too long for every `make test`
    as well (the suite's other AI-service race cases run there)."""
    smol = request.getfixturevalue("smol") if model else None
    bad = [(r.spec, r.exit, texts) for r, texts in
           _runs(KERNEL, cmd, range(1, 51), model=smol)
           if texts or r.exit != "ok"]
    assert not bad, bad
