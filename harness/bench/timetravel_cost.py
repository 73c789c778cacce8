"""`harness bench timetravel`: what determinism, recording and going back cost.

- Recording: the same guest work booted three ways in interleaved rounds (the order
  rotates, so a load change on the host hits all alike): the ordinary machine (host
  clock), deterministic (`--schedule rr`), and deterministic with the journal written
  (`--record`). Two workloads: the `make run` demo (the model answers the demo question
  through llmrun: mostly the engine's time) and `usertests -q` (all guest CPU). Medians of
  wall time, the ratios of the medians, and the recording's size; also the medians of the
  process's CPU time, as the wall time of the ordinary machine includes the guest's waits
  for real time (a sleep, a timer), which the deterministic machine skips.
- Going back (deterministic, time travel on, 4 harts): reverse-stepi at random points
  of the first N instructions (N = 10^9 by default), each the first step back from a
  point reached going forward (so the nearest checkpoint is the periodic one), then a
  series of steps back from there; reverse-continue to a watchpoint whose last store is
  about 10^8 instructions back (`watch nextpid` after a long `sysbench cpu`, whose fork
  was the last store).

The host is shared: quote the ratios, not the seconds.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.errors import BenchError
from harness.det.schedule import ScheduleSpec
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig
from harness.run.launch import Launch
from harness.run.recording import new_recording

MODES = ("host", "det", "record")
USERTESTS = "usertests -q"


@dataclass
class Cost:
    """Wall seconds per mode, and the recordings' sizes."""

    wall: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    sizes: list[int] = field(default_factory=list)
    insns: int = 0

    def median(self, mode: str) -> float:
        return statistics.median(self.wall[mode])

    def median_cpu(self, mode: str) -> float:
        return statistics.median(self.cpu[mode])


def _boot(config: MachineConfig, mode: str, model: str | None,
          tmp: Path) -> tuple[float, int, int, float]:
    """One boot in `mode`; (wall seconds, recording bytes, instructions, CPU seconds of
    the process: every thread, the engine's too)."""
    if mode != "host":
        config.schedule = ScheduleSpec.parse("rr")
        config.clock = "icount"
    if mode == "record":
        config.journal = new_recording(config, model)
    t0, c0 = time.perf_counter(), time.process_time()
    run = Launch(config).run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if not run.ok:
        raise BenchError(f"'{config.cmd}' failed in the guest ({run.exit.value}):\n"
                                   f"{run.output[-600:]}")
    size = insns = 0
    m = run.machine
    if m.det is not None:
        insns = m.det.counter.total
    if mode == "record":
        from harness.run.recording import finish_recording

        size = finish_recording(m, run.result, tmp / "bench.nrec")
    return wall, size, insns, cpu


def recording_cost(rounds: int, cpus: int, tmp: Path, say,  # noqa: ANN001
                   cpu_cmd: str = USERTESTS) -> dict[str, Cost]:
    from harness.run.hostapi import AiSession
    from harness.run.launch import DEMO_QUESTION
    from harness.run.prompt import PROMPT_FILE, encode_prompt

    ids = encode_prompt("smol", DEMO_QUESTION, chat=True)
    demo_cmd = f"llmrun --stream --timing --stop-eos --predict 32 --prompt-file /{PROMPT_FILE}"
    files = {PROMPT_FILE: (" ".join(map(str, ids)) + "\n").encode()}
    out = {"demo": Cost(), cpu_cmd.split()[0]: Cost()}
    with AiSession("smol", cpus=cpus) as session:
        for r in range(rounds):
            order = MODES[r % 3:] + MODES[:r % 3]
            for mode in order:
                cfg = session.config(demo_cmd, timeout=900, output=lambda b: None,
                                     created=[], files=files)
                w, size, n, cpu = _boot(cfg, mode, "smol", tmp)
                c = out["demo"]
                c.wall[mode].append(w)
                c.cpu[mode].append(cpu)
                c.sizes += [size] if size else []
                c.insns = n or c.insns
                cfg = MachineConfig(kernel=DEFAULT_KERNEL, fs=DEFAULT_FS, cpus=cpus,
                                    cmd=cpu_cmd, timeout=900, output=lambda b: None)
                w, size, n, cpu = _boot(cfg, mode, None, tmp)
                c = out[cpu_cmd.split()[0]]
                c.wall[mode].append(w)
                c.cpu[mode].append(cpu)
                c.sizes += [size] if size else []
                c.insns = n or c.insns
            say(f"  round {r + 1}/{rounds} done")
    return out


def _travel_machine(cmd: str, cpus: int) -> tuple[Machine, object]:
    from harness.debug.commands import Interpreter
    from harness.debug.target import Target
    from harness.guest.programs import Programs

    cfg = MachineConfig(kernel=DEFAULT_KERNEL, fs=DEFAULT_FS, cpus=cpus, cmd=cmd, timeout=3600,
                        output=lambda b: None, schedule=ScheduleSpec.parse("rr"),
                        time_travel=True)
    m = Machine(cfg)
    return m, Interpreter(Target(m, Programs(DEFAULT_KERNEL, DEFAULT_KERNEL.parent.parent /
                                             "user")))


def reverse_costs(span: int, points: int, cpus: int, say) -> dict[str, object]:  # noqa: ANN001
    """reverse-stepi at random points of the first `span` instructions."""
    from harness.machine.config import REACHED, Exit

    loops = span // 8 + 1
    m, interp = _travel_machine(f"usertests -q; sysbench cpu {loops}", cpus)
    rng = random.Random(1)
    marks = sorted(rng.randrange(span // 20, span) for _ in range(points))
    first: list[float] = []
    series: list[float] = []
    t0 = time.perf_counter()
    try:
        for p in marks:
            res = m.run_to(total=p)
            if res.exit != Exit.PAUSE or res.message != REACHED:
                break
            t = time.perf_counter()
            interp.execute("reverse-stepi")
            first.append(time.perf_counter() - t)
            for _ in range(5):
                t = time.perf_counter()
                interp.execute("reverse-stepi")
                series.append(time.perf_counter() - t)
            m.travel.goto(p)  # back to the frontier's side, for the next mark
            say(f"  at {p:,}: reverse-stepi {first[-1] * 1e3:.0f} ms")
        forward = time.perf_counter() - t0
        cps = m.travel.cps
        return {"first": first, "series": series, "reached": m.det.counter.total,
                "checkpoints": len(cps.points), "cp_mb": cps.size / 2**20,
                "take_ms": 1e3 * cps.take_s / max(1, cps.taken), "wall": forward}
    finally:
        m.close()


def watch_cost(back: int, cpus: int) -> dict[str, float]:
    """reverse-continue to the last store to nextpid, `back` instructions before now."""
    loops = back // 8
    m, interp = _travel_machine(f"sysbench cpu {loops}", cpus)
    try:
        interp.execute("break sys_exit")
        interp.execute("continue")  # (sysbench exits: its fork is the last store)
        here = m.det.counter.total
        interp.execute("watch nextpid")
        t = time.perf_counter()
        out = interp.execute("reverse-continue")
        dt = time.perf_counter() - t
        if "Hardware watchpoint" not in out:
            raise BenchError(f"reverse-continue did not stop at the watchpoint:\n{out}")
        return {"seconds": dt, "distance": here - m.det.counter.total}
    finally:
        m.close()


def cost_report(rounds: int, span: int, points: int, back: int, cpus: int, cpu_cmd: str,
                record: bool = True, reverse: bool = True,
                say: Callable[[str], None] = print) -> list[str]:
    """What the deterministic machine, --record and reverse execution cost: the report's
    lines (progress through `say`)."""
    out: list[str] = []
    import tempfile

    if record:
        say(f"recording cost: {rounds} rounds x (demo, usertests) x {', '.join(MODES)}")
        with tempfile.TemporaryDirectory() as tmp:
            costs = recording_cost(rounds, cpus, Path(tmp), say, cpu_cmd)
        out.append(f"recording cost, {cpus} harts, medians of {rounds} interleaved rounds:")
        out.append(f"  {'workload':<12}{'host s':>8}{'det s':>8}{'record s':>10}"
                   f"{'record/det':>12}{'record/host':>13}{'journal':>10}{'insns':>14}")
        for name, c in costs.items():
            h, d, r = (c.median(x) for x in MODES)
            size = statistics.median(c.sizes) if c.sizes else 0
            out.append(f"  {name:<12}{h:8.2f}{d:8.2f}{r:10.2f}{r / d:12.2f}{r / h:13.2f}"
                       f"{size / 1024:9.1f}K{c.insns:14,}")
        out.append("  the same runs' CPU time (the process's, every thread):")
        for name, c in costs.items():
            h, d, r = (c.median_cpu(x) for x in MODES)
            out.append(f"  {name:<12}{h:8.2f}{d:8.2f}{r:10.2f}{r / d:12.2f}{r / h:13.2f}")
    if reverse:
        say(f"reverse-stepi at {points} points of the first {span:,} instructions ...")
        rc = reverse_costs(span, points, cpus, say)
        first, series = rc["first"], rc["series"]
        out.append(f"reverse-stepi, {len(first)} points up to {rc['reached']:,} instructions "
                   f"({rc['checkpoints']} checkpoints, {rc['cp_mb']:.0f} MiB, "
                   f"{rc['take_ms']:.1f} ms each):")
        if first:
            out.append(f"  first step back: median {statistics.median(first) * 1e3:.0f} ms, "
                       f"max {max(first) * 1e3:.0f} ms (target < 500 ms)")
            out.append(f"  the next 5 steps: median {statistics.median(series) * 1e3:.1f} ms, "
                       f"max {max(series) * 1e3:.1f} ms")
        say(f"reverse-continue to a watchpoint {back:,} instructions back ...")
        w = watch_cost(back, cpus)
        out.append(f"reverse-continue to `watch nextpid`, {w['distance']:,.0f} instructions "
                   f"back: {w['seconds']:.1f} s (target < 10 s)")
    out.append("(host shared with other work: the ratios and targets, not the seconds)")
    return out
