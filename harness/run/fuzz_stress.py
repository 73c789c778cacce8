"""`harness fuzz` and `harness stress`: the guest's sysfuzz and aistress, run and checked.

    harness fuzz --model smol --seconds 60 --seed 7          # user_c/sysfuzz.c
    harness stress --model smol --seconds 120 --faults 'fail=0.05,delay=200ms,reorder'

Both boot the kernel with hang detection (harness/machine/watchdog.py) and, when a model is given,
the AI device (with --faults, the fault-injecting one: harness/devices/ai_faults.py).
A panic, machine fault or hang fails the run with the usual report. `stress` then checks
every request the guest saw complete against this process's own engine: the same prompt,
greedy, exactly the tokens asked for, must give the same text (FNV-1a of "id id id"), so
a result handed to the wrong client, truncated or corrupted by a fault is found. The
guest side checks the service afterwards (slots, queue, orphans, workers, free pages,
leftover clients). Exit status 0 only if everything held.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.det.schedule import ScheduleSpec
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig
from harness.run.launch import add_ai_device, launch, report

if TYPE_CHECKING:
    pass

OK_LINE = re.compile(r"^ok c=(\d+) id=(-?\d+) n=(\d+) p=(\d+) prompt=([\d,]+) len=(\d+) "
                     r"fnv=([0-9a-f]+)$", re.M)


def fnv1a(text: bytes) -> int:
    """32-bit FNV-1a, as user_c/aistress.c computes it."""
    h = 2166136261
    for b in text:
        h = ((h ^ b) * 16777619) & 0xFFFF_FFFF
    return h


@dataclass
class Boot:
    """One guest run: console text, how it ended, the device's fault counts."""

    output: str
    exit: str
    status: int
    message: str
    report: str              # the panic/fault/hang report, "" if it powered off
    wall_s: float
    faults: dict[str, int] = field(default_factory=dict)
    device_requests: int = 0


def boot(cmd: str, *, model: object = None, faults: str | None = None,
         hang_timeout: float = 60.0, timeout: float = 3600.0, kernel: Path = DEFAULT_KERNEL,
         fs: Path = DEFAULT_FS, echo: Callable[[bytes], None] | None = None,
         cpus: int = 1, schedule: str | None = None) -> Boot:
    """Run `cmd` in the guest (`model`: a LoadedModel or a registry name/path, or None);
    `schedule`: a deterministic machine (harness/det/schedule.py's SPEC)."""
    config = MachineConfig(kernel=kernel, fs=fs, cmd=cmd, timeout=timeout,
                           hang_timeout=hang_timeout, cpus=cpus, schedule=schedule)
    if schedule is not None:
        config.schedule = ScheduleSpec.parse(schedule)
        config.clock = "icount"
    if model is not None:
        plan = None
        if faults:
            from harness.devices.ai_faults import FaultPlan

            plan = FaultPlan.parse(faults)
        add_ai_device(config, model, plan=plan)  # type: ignore[arg-type]
    run = launch(config, echo=echo)
    dev = run.device
    assert run.machine is not None and run.result is not None
    return Boot(run.output, run.exit.value, run.status, run.message,
                report(run.machine, run.result), run.wall_s,
                dict(dev.injector.faults) if dev is not None and dev.injector is not None else {},
                getattr(dev, "requests", 0))


# ---------------------------------------------------------------- sysfuzz


@dataclass
class FuzzReport:
    seed: int
    calls: int = 0
    ok: int = 0
    failed: int = 0
    processes: int = 0
    killed: int = 0
    leaked_pages: int = 0
    ai_submitted: int = 0
    ai_completed: int = 0
    ai_failed: int = 0
    verdict: str = "?"        # OK / FAIL from the guest, or the machine's exit
    table: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # call: made, ok, failed
    boot: Boot | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "OK" and self.boot is not None and self.boot.exit == "poweroff"


def parse_fuzz(seed: int, b: Boot) -> FuzzReport:
    rep = FuzzReport(seed, boot=b)
    m = re.search(r"^sysfuzz: (\d+) calls \((\d+) ok, (\d+) failed\) in \d+ ms by (\d+) "
                  r"processes; (\d+) killed", b.output, re.M)
    if m:
        rep.calls, rep.ok, rep.failed, rep.processes, rep.killed = map(int, m.groups())
    m = re.search(r"^sysfuzz: AI requests (\d+) submitted, (\d+) completed, (\d+) failed",
                  b.output, re.M)
    if m:
        rep.ai_submitted, rep.ai_completed, rep.ai_failed = map(int, m.groups())
    m = re.search(r"^sysfuzz: (OK|FAIL) seed=\d+ calls=\d+ ok=\d+ killed=\d+ leaked=(-?\d+)",
                  b.output, re.M)
    if m:
        rep.verdict, rep.leaked_pages = m.group(1), int(m.group(2))
    for m in re.finditer(r"^  (\S+(?: >= 64\))?) +(\d+) +(\d+) +(\d+)$", b.output, re.M):
        rep.table[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    if b.exit != "poweroff":
        rep.verdict = b.exit.upper()
    return rep


def run_fuzz(*, seed: int = 1, calls: int = 2000, seconds: int = 0, procs: int = 4,
             kill: int = 20, model: object = None, faults: str | None = None,
             hang_timeout: float = 60.0, quiet: bool = True, watchdog: int = 10,
             **kw: object) -> FuzzReport:
    what = f"-t {seconds}" if seconds else f"-n {calls}"
    cmd = (f"sysfuzz -s {seed} {what} -p {procs} -k {kill} -w {watchdog}"
           + (" -q" if quiet else ""))
    limit = (seconds or calls / 100) + 600
    return parse_fuzz(seed, boot(cmd, model=model, faults=faults, hang_timeout=hang_timeout,
                                 timeout=limit, **kw))  # type: ignore[arg-type]


# ---------------------------------------------------------------- aistress


@dataclass
class StressReport:
    seed: int
    requests: int = 0
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    client_kills: int = 0
    daemon_kills: int = 0
    respawns: int = 0
    verified: int = 0
    mismatched: list[str] = field(default_factory=list)
    slots_free: int = -1
    queued: int = -1
    orphans: int = -1
    workers: str = ""
    free_pages: str = ""
    stuck: int = -1
    verdict: str = "?"
    boot: Boot | None = None

    @property
    def passed(self) -> bool:
        return (self.verdict == "PASS" and not self.mismatched and self.verified == self.ok
                and self.boot is not None and self.boot.exit == "poweroff")


def parse_stress(seed: int, b: Boot) -> tuple[StressReport, list[tuple[int, list[int], int, int]]]:
    """The report and the completed requests: (client, prompt, npredict, fnv) each."""
    rep = StressReport(seed, boot=b)
    done = []
    for m in OK_LINE.finditer(b.output):
        prompt = [int(x) for x in m.group(5).split(",")]
        if len(prompt) != int(m.group(3)):
            rep.mismatched.append(f"line with {len(prompt)} prompt ids for n={m.group(3)}")
            continue
        done.append((int(m.group(1)), prompt, int(m.group(4)), int(m.group(7), 16)))
    m = re.search(r"^aistress: requests=(\d+) ok=(\d+) failed=(\d+) \((.*?)\) client_kills=(\d+) "
                  r"daemon_kills=(\d+) respawns=(\d+)", b.output, re.M)
    if m:
        rep.requests, rep.ok, rep.failed = int(m.group(1)), int(m.group(2)), int(m.group(3))
        for part in re.findall(r"([^=]+?)=(\d+)(?: |$)", m.group(4)):
            rep.errors[part[0].strip()] = int(part[1])
        rep.client_kills, rep.daemon_kills, rep.respawns = map(int, m.group(5, 6, 7))
    m = re.search(r"^aistress: slots_free=(\d+)/\d+ queued=(\d+) orphans=(\d+) workers=(\S+) "
                  r"free_pages=(\S+) stuck=(\d+)", b.output, re.M)
    if m:
        rep.slots_free, rep.queued, rep.orphans = map(int, m.group(1, 2, 3))
        rep.workers, rep.free_pages, rep.stuck = m.group(4), m.group(5), int(m.group(6))
    m = re.search(r"^aistress: (PASS|FAIL)", b.output, re.M)
    if m:
        rep.verdict = m.group(1)
    if b.exit != "poweroff":
        rep.verdict = b.exit.upper()
    return rep, done


def verify(backend: object, done: list[tuple[int, list[int], int, int]]
           ) -> tuple[int, list[str]]:
    """Recompute each completed request on the host's backend (the device's: the
    in-process engine, or the --engine server; or a bare pyllm Engine), greedy, exactly
    npredict tokens (what the guest asked for), and compare the text's hash."""
    from harness.engines.base import Collected, Sampling
    from pyllm.engine import Engine
    from pyllm.request import GenParams

    want: dict[tuple[tuple[int, ...], int], object] = {}
    for _, prompt, npredict, _ in done:
        key = (tuple(prompt), npredict)
        if key in want:
            continue
        try:
            want[key] = (backend.submit(prompt, GenParams(max_new_tokens=npredict, stop_ids=()))
                         if isinstance(backend, Engine) else
                         Collected(backend, prompt, Sampling(max_new_tokens=npredict)))  # type: ignore[arg-type]
        except Exception as exc:  # SubmitError, PyllmError: reported per result below
            want[key] = exc
    verified, bad = 0, []
    for client, prompt, npredict, got in done:
        req = want[(tuple(prompt), npredict)]
        try:
            if isinstance(req, Exception):
                raise req
            ids = req.wait()  # type: ignore[attr-defined]
        except Exception as exc:  # BackendFailure, the engine's error
            bad.append(f"client {client}: prompt {prompt} predict {npredict}: the host's "
                       f"request failed ({exc})")
            continue
        text = " ".join(map(str, ids)).encode()
        if fnv1a(text) == got:
            verified += 1
        else:
            bad.append(f"client {client}: prompt {prompt} predict {npredict}: guest fnv "
                       f"{got:08x}, engine {fnv1a(text):08x} ({text[:60].decode()}...)")
    return verified, bad


def run_stress(lm: object, *, seed: int = 1, seconds: int = 10, clients: int = 12,
               kill: int = 10, kill_daemon: int = 0, long: int = 20, faults: str | None = None,
               hang_timeout: float = 60.0, **kw: object) -> StressReport:
    """aistress in the guest on LoadedModel `lm`, every completed result verified."""
    cmd = (f"aistress -s {seed} -t {seconds} -c {clients} -k {kill} -d {kill_daemon} "
           f"-L {long}")
    b = boot(cmd, model=lm, faults=faults, hang_timeout=hang_timeout,
             timeout=seconds + 900, **kw)  # type: ignore[arg-type]
    rep, done = parse_stress(seed, b)
    if len(done) != rep.ok:
        rep.mismatched.append(f"{len(done)} ok lines for {rep.ok} ok requests")
    v, bad = verify(lm, done)  # type: ignore[arg-type]
    rep.verified = v
    rep.mismatched += bad
    return rep


def fuzz_lines(rep: FuzzReport, seed: int) -> list[str]:
    """What `harness fuzz` says of a run."""
    b = rep.boot
    out = [f"fuzz: seed {seed}: {rep.calls} calls ({rep.ok} ok, {rep.failed} failed) by "
           f"{rep.processes} processes, {rep.killed} killed; AI requests {rep.ai_submitted} "
           f"submitted, {rep.ai_completed} completed, {rep.ai_failed} failed; pages leaked "
           f"{rep.leaked_pages}; machine: {b.exit if b else '?'}; "
           f"{b.wall_s if b else 0:.1f} s"]
    return out + _faults_line(b)


def stress_lines(rep: StressReport, seed: int) -> list[str]:
    """What `harness stress` says of a run (the mismatches are listed apart)."""
    b = rep.boot
    errs = ", ".join(f"{k} {v}" for k, v in rep.errors.items()) or "none"
    out = [f"stress: seed {seed}: {rep.requests} requests, {rep.ok} completed "
           f"({rep.verified} verified against the host engine, {len(rep.mismatched)} "
           f"mismatched), {rep.failed} failed ({errs}); {rep.client_kills} clients and "
           f"{rep.daemon_kills} daemon processes killed",
           f"stress: after: slots free {rep.slots_free}/8, queued {rep.queued}, orphans "
           f"{rep.orphans}, workers {rep.workers}, free pages {rep.free_pages}, stuck "
           f"{rep.stuck}; machine: {b.exit if b else '?'}; {b.wall_s if b else 0:.1f} s"]
    return out + _faults_line(b)


def _faults_line(b: Boot | None) -> list[str]:
    """The faults the AI device injected in a run, if any, as one line."""
    if b is None or not b.faults:
        return []
    return ["faults injected: " + ", ".join(f"{k} {v}" for k, v in b.faults.items())]
