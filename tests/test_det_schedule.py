"""Deterministic mode (harness/det/mode.py): seeded schedules repeat exactly, with the AI
device and the disk; different seeds interleave differently; recordings replay byte for
byte, also without the model."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_ai_host import _need_build, _need_smol

from harness.det.counter import Counter
from harness.det.schedule import PctPolicy, RandomPolicy, ScheduleError, ScheduleSpec
from harness.machine.config import MachineConfig
from harness.run.launch import GuestRun, add_ai_device, launch
from harness.run.recording import Replay, check_replay, finish_recording, new_recording

ROOT = Path(__file__).resolve().parent.parent
KERNEL, FS = ROOT / "build/kernel/kernel.elf", ROOT / "build/fs.img"
# 4 harts, the AI service with two clients at once, the disk, pipes
WORKLOAD = ("llmrun --predict 6 504 3575 282 4649 314 & llmrun --predict 5 504 3575; "
            "echo one two three | wc; ps")


# ---------------------------------------------------------------- the schedule's words
def test_schedule_spec_parses_and_refuses() -> None:
    assert ScheduleSpec.parse("random:42") == ScheduleSpec("random", 42)
    assert ScheduleSpec.parse("pct:7:4") == ScheduleSpec("pct", 7, 4)
    assert ScheduleSpec.parse("rr") == ScheduleSpec("rr", 0)
    assert str(ScheduleSpec.parse("pct:7:4")) == "pct:7:4"
    assert str(ScheduleSpec.parse("random:0x10")) == "random:16"
    for bad, words in [("chaos:1", "unknown schedule"), ("random:x", "integers"),
                       ("pct:1:0", "depth"), ("random:1:2", "too many"),
                       ("random:-1", "seed")]:
        with pytest.raises(ScheduleError, match=words):
            ScheduleSpec.parse(bad)


def test_generator_repeats_per_seed() -> None:
    a, b, c = Counter(5), Counter(5), Counter(6)
    draws = [a.below(1000) for _ in range(50)]
    assert draws == [b.below(1000) for _ in range(50)]
    assert draws != [c.below(1000) for _ in range(50)]
    assert all(0 <= x < 1000 for x in draws)
    state = a.state()
    after = [a.below(10**9) for _ in range(5)]
    a.restore(state)
    assert [a.below(10**9) for _ in range(5)] == after


def test_pct_priorities_and_change_points() -> None:
    p = PctPolicy(4, Counter(3), depth=3, points=1000)
    assert sorted(p.prio.values()) == [3, 4, 5, 6]  # d .. d+n-1
    assert len(p.changes) == 2 and all(1 <= x <= 1000 for x in p.changes)
    top = max(p.prio, key=p.prio.get)
    assert p.pick([0, 1, 2, 3], False)[0] == top
    p.ended(top, 10, "point")  # the first change point: below every other hart
    assert p.prio[top] == 2
    assert p.pick([0, 1, 2, 3], False)[0] != top
    second = p.pick([0, 1, 2, 3], False)[0]
    p.ended(second, 10, "yield")  # spinning on a lock: blocked for one choice
    assert p.pick([0, 1, 2, 3], False)[0] != second
    assert p.pick([top], False)[0] == top  # alone, it runs whatever its priority


def test_random_policy_slices_are_fine_grained() -> None:
    p = RandomPolicy(4, Counter(1))
    lengths = [p.pick([0, 1, 2, 3], False)[1] for _ in range(2000)]
    assert min(lengths) == 1 and max(lengths) == 1 << 16
    harts = {p.pick([0, 1, 2, 3], False)[0] for _ in range(100)}
    assert harts == {0, 1, 2, 3}


# ---------------------------------------------------------------- whole runs
@pytest.fixture(scope="module")
def smol():
    _need_build()
    _need_smol()
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load("smol")
    yield lm
    lm.close()


def _run(spec: str, model, cmd: str = WORKLOAD, **kw) -> GuestRun:
    config = MachineConfig(kernel=KERNEL, fs=FS, cpus=4, cmd=cmd, timeout=300,
                           schedule=ScheduleSpec.parse(spec), **kw)
    if model is not None:
        add_ai_device(config, model)
    return launch(config)


def _transcript(r: GuestRun) -> tuple:
    m = r.machine
    assert m is not None and m.det is not None
    from harness.det.mode import ram_hash

    return (r.output, r.exit, r.status, m.det.counter.total, tuple(m.det.counter.counts()),
            ram_hash(m.ram.view))


@pytest.mark.slow
def test_same_seed_same_run_different_seed_other_interleaving(smol) -> None:
    """3 runs x 5 seeds of a 4-hart workload with the AI device (two requests at once):
    identical console bytes, instruction counts (per hart) and final RAM per seed; the
    seeds' interleavings (instructions per hart) all differ."""
    seen = {}
    for spec in ["random:1", "random:2", "random:3", "pct:1", "pct:2"]:
        runs = [_transcript(_run(spec, smol)) for _ in range(3)]
        assert runs[0][1].value == "poweroff" and runs[0][2] == 0, runs[0][0][-500:]
        assert "1 3 14" in runs[0][0]  # the workload really ran (wc's line)
        assert runs[1] == runs[0] and runs[2] == runs[0], spec
        seen[spec] = runs[0][4]
    assert len(set(seen.values())) == len(seen), seen


def test_schedules_repeat_without_devices_too() -> None:
    _need_build()
    a, b = (_transcript(_run("random:9", None, "echo hi | wc; cat README | wc")) for _ in "ab")
    assert a == b and a[1].value == "poweroff"


# ---------------------------------------------------------------- record and replay
def _type(m, chunks: list[bytes]) -> None:
    for data in chunks:
        time.sleep(0.2)
        m.send_input(data)


@pytest.mark.slow
def test_recording_replays_byte_for_byte_without_the_model(smol, tmp_path: Path) -> None:
    """A recorded 4-hart run with the AI device and console input replays identically,
    3 times, with no model loaded (the journal serves the AI results)."""
    path = tmp_path / "run.nrec"
    cmd = "llmrun --predict 6 504 3575 282 4649 314; wc; llmrun --predict 4 504 3575; ps"
    config = MachineConfig(kernel=KERNEL, fs=FS, cpus=4, cmd=cmd, timeout=300,
                           schedule=ScheduleSpec.parse("random:11"))
    config.journal = new_recording(config, "smol")
    add_ai_device(config, smol)
    chunks = [b"hello world\n", b"typed while the model works\n\x04"]
    rec = launch(config, during=lambda m: _type(m, chunks))
    assert rec.ok, rec.output[-500:]
    text = b"".join(chunks).rstrip(b"\x04")
    lines, words = text.count(b"\n"), len(text.split())
    assert f"{lines} {words} {len(text)}" in rec.output  # wc saw what was typed
    size = finish_recording(rec.machine, rec.result, path)
    assert 0 < size < 100_000
    for _ in range(3):
        replay = Replay.open(path)
        cfg = MachineConfig(kernel=KERNEL, fs=FS, timeout=300)
        replay.configure(cfg)
        assert cfg.cpus == 4 and cfg.cmd == cmd
        add_ai_device(cfg, replay.ai_model())  # nothing is loaded in a replay
        got = launch(cfg)
        assert check_replay(got.machine, got.result) == []
        assert got.output == rec.output


def test_replay_refuses_another_kernel_or_disk(tmp_path: Path) -> None:
    _need_build()
    path = tmp_path / "r.nrec"
    config = MachineConfig(kernel=KERNEL, fs=FS, cpus=2, cmd="echo hi", timeout=60,
                           schedule=ScheduleSpec.parse("rr"))
    config.journal = new_recording(config, None)
    r = launch(config)
    finish_recording(r.machine, r.result, path)
    other = tmp_path / "other.img"
    other.write_bytes(FS.read_bytes()[:-512] + b"x" * 512)
    from harness.det.journal import JournalError

    cfg = MachineConfig(kernel=KERNEL, fs=other)
    with pytest.raises(JournalError, match="another disk"):
        Replay.open(path).configure(cfg)
    (tmp_path / "junk.nrec").write_bytes(b"not a recording")
    with pytest.raises(JournalError, match="not a recording"):
        Replay.open(tmp_path / "junk.nrec")
    with pytest.raises(JournalError, match="no such recording"):
        Replay.open(tmp_path / "missing.nrec")


def test_console_input_during_a_host_wait_is_taken_at_a_slice_boundary(smol, tmp_path):
    """Input typed while the guest waits for the engine is recorded where the schedule
    next ends a slice, so the replay finds it there (no divergence)."""
    path = tmp_path / "w.nrec"
    config = MachineConfig(kernel=KERNEL, fs=FS, cpus=2, cmd="llmrun --predict 12 504 & wc",
                           timeout=300, schedule=ScheduleSpec.parse("random:3"))
    config.journal = new_recording(config, "smol")
    add_ai_device(config, smol)
    typed = threading.Event()

    def during(m) -> None:
        for data in (b"a b\n", b"c\n", b"\x04"):
            time.sleep(0.05)
            m.send_input(data)
        typed.set()

    rec = launch(config, during=during)
    assert typed.is_set() and rec.ok
    finish_recording(rec.machine, rec.result, path)
    replay = Replay.open(path)
    cfg = MachineConfig(kernel=KERNEL, fs=FS, timeout=300)
    replay.configure(cfg)
    add_ai_device(cfg, replay.ai_model())
    got = launch(cfg)
    assert check_replay(got.machine, got.result) == [] and got.output == rec.output


def test_stops_and_steps_do_not_change_the_run() -> None:
    """A run stopped at many points (as a debugger does: goals, single steps of any hart)
    and resumed is the same run as one that never stopped."""
    _need_build()
    from harness.machine.board import Machine
    from harness.machine.config import REACHED, Exit

    cmd = "echo hi | wc; cat README | wc; ps"
    whole = _transcript(_run("random:5", None, cmd))

    config = MachineConfig(kernel=KERNEL, fs=FS, cpus=4, cmd=cmd, timeout=300,
                           schedule=ScheduleSpec.parse("random:5"))
    out = bytearray()
    config.output = out.extend
    m = Machine(config)
    try:
        goal = 0
        while True:
            goal = m.det.counter.total + 97_003  # (a step may have run others past goals)
            res = m.run_to(total=goal)
            if res.exit != Exit.PAUSE:
                break
            assert res.message == REACHED and m.det.counter.total == goal
            if goal % 3 == 0:  # now and then a single step of some hart
                m.cur = goal % 4
                before = m.det.counter.count(m.cur)
                if m.cpus[m.cur].started and m.step() is None:
                    assert m.det.counter.count(m.cur) == before + 1
        from harness.det.mode import ram_hash

        got = (bytes(out).decode().replace("\r\n", "\n"), res.exit, res.status,
               m.det.counter.total, tuple(m.det.counter.counts()), ram_hash(m.ram.view))
    finally:
        m.close()
    assert got == whole
