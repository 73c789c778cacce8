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

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli.main import cpus_option, engine_options
from harness.run.launch import DEFAULT_FS, DEFAULT_KERNEL, add_ai_device, launch, report
from harness.machine.board import MachineConfig
from harness.det.schedule import ScheduleSpec

if TYPE_CHECKING:
    from harness.engines.base import AiBackend

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
    from pyllm.engine import Engine, GenParams

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


# ---------------------------------------------------------------- CLI


def _load(model: str, engine_url: str | None = None,
          engine_timeout: float | None = None) -> AiBackend:
    """The backend every boot shares: the model loaded in process, or with --engine the
    server asked for it."""
    from harness.cli.main import remote_engine
    from harness.devices.virtio_ai import LoadedModel
    from harness.run.hostapi import check_model
    from pyllm.errors import PyllmError

    engine = remote_engine(engine_url, engine_timeout, model)
    if engine is not None:
        from harness.engines.remote import EngineError

        try:
            return engine.loader(model)
        except EngineError as e:
            raise click.ClickException(str(e)) from None
    try:
        check_model(model)
        return LoadedModel.load(model)
    except PyllmError as e:
        raise click.ClickException(str(e)) from None


def _check_faults(faults: str | None) -> None:
    if faults:
        from harness.devices.ai_faults import FaultPlan

        try:
            FaultPlan.parse(faults)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--faults") from None


def _print_failure(b: Boot | None) -> None:
    if b is None:
        return
    if b.report:
        click.echo(b.report, err=True)
    click.echo("--- guest console (last 3000 characters) ---\n" + b.output[-3000:], err=True)


def _check_schedule(spec: str | None) -> None:
    if spec is not None:
        try:
            ScheduleSpec.parse(spec)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--schedule") from None


def _json(path: Path | None, obj: object) -> None:
    if path is not None:
        data = asdict(obj)  # type: ignore[call-overload]
        data.get("boot", {}).pop("output", None)
        path.write_text(json.dumps(data, indent=2))


_common = [
    click.option("--model", "-m", metavar="MODEL", help="AI device model (smol, qwen, a path); "
                 "default for fuzz: none (AI calls fail with AI_ENODEV)"),
    click.option("--seed", "-s", type=int, default=1, show_default=True),
    click.option("--seconds", "-t", type=click.IntRange(1), help="Run this long."),
    click.option("--faults", metavar="SPEC", help="AI device faults, as run --ai-fault."),
    click.option("--hang-timeout", type=click.FloatRange(min=1), default=60.0,
                 show_default=True, help="Seconds without guest progress that make a hang."),
    click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
                 help="Also write the report as JSON."),
    cpus_option,
    engine_options,
    click.option("--schedule", metavar="SPEC",
                 help="Deterministic machine: hart switches by a seeded schedule (rr | "
                      "random:SEED | pct:SEED[:DEPTH]); the same SPEC and --seed give the same "
                      "run."),
]


def _options(fn):  # noqa: ANN001, ANN202
    for opt in reversed(_common):
        fn = opt(fn)
    return fn


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_options
@click.option("--calls", "-n", type=click.IntRange(1), default=3000, show_default=True,
              help="System calls in all (unless --seconds).")
@click.option("--procs", "-p", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--kill", "-k", type=click.IntRange(0, 100), default=20, show_default=True,
              help="Chance (%) per killer wake-up (10-40 ms) to kill a fuzz process.")
def fuzz(model: str | None, seed: int, seconds: int | None, faults: str | None,
         hang_timeout: float, json_out: Path | None, calls: int, procs: int,
         kill: int, cpus: int = 1, engine_url: str | None = None,
         engine_timeout: float | None = None, schedule: str | None = None) -> None:
    """Fuzz the system calls from the guest (user_c/sysfuzz.c) and check the kernel survives.

    Concurrent processes make random calls, the AI service's included, with hostile
    arguments, while a killer kills them at random moments. Fails on a panic, a machine
    fault, a hang, a leaked page or an AI slot left in use.
    """
    if faults and not model:
        raise click.UsageError("--faults needs --model")
    _check_faults(faults)
    _check_schedule(schedule)
    if engine_url and not model:
        raise click.UsageError("--engine needs --model NAME (the model the server serves)")
    lm = _load(model, engine_url, engine_timeout) if model else None
    try:
        rep = run_fuzz(seed=seed, calls=calls, seconds=seconds or 0, procs=procs, kill=kill,
                       model=lm, faults=faults, hang_timeout=hang_timeout, cpus=cpus,
                       schedule=schedule)
    finally:
        if lm is not None:
            lm.close()
    b = rep.boot
    click.echo(f"fuzz: seed {seed}: {rep.calls} calls ({rep.ok} ok, {rep.failed} failed) by "
               f"{rep.processes} processes, {rep.killed} killed; AI requests {rep.ai_submitted} "
               f"submitted, {rep.ai_completed} completed, {rep.ai_failed} failed; pages leaked "
               f"{rep.leaked_pages}; machine: {b.exit if b else '?'}; "
               f"{b.wall_s if b else 0:.1f} s")
    if b is not None and b.faults:
        click.echo("faults injected: " + ", ".join(f"{k} {v}" for k, v in b.faults.items()))
    _json(json_out, rep)
    if not rep.passed:
        _print_failure(b)
        raise click.ClickException(f"fuzz failed: {rep.verdict}")
    click.echo("fuzz: OK")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_options
@click.option("--clients", "-c", type=click.IntRange(1, 32), default=12, show_default=True,
              help="Client processes (more than the 8 request slots).")
@click.option("--kill", "-k", type=click.IntRange(0, 100), default=10, show_default=True,
              help="Chance (%) per killer wake-up (20-80 ms) to kill a client mid-request.")
@click.option("--kill-daemon", "-d", type=click.IntRange(0, 100), default=5,
              show_default=True, help="Chance (%) per wake-up to kill an ai_daemon process.")
@click.option("--long", "-L", type=click.IntRange(0, 100), default=20, show_default=True,
              help="Share (%) of long requests (64..256 tokens; others 1..16).")
def stress(model: str | None, seed: int, seconds: int | None, faults: str | None,
           hang_timeout: float, json_out: Path | None, clients: int, kill: int,
           kill_daemon: int, long: int, cpus: int = 1, engine_url: str | None = None,
           engine_timeout: float | None = None, schedule: str | None = None) -> None:
    """Soak the AI service (user_c/aistress.c) and verify every result on the host engine.

    More clients than slots send mixed short and long requests; clients and ai_daemon
    processes are killed mid-request. Afterwards every completed result must equal this
    process's engine's, every slot be free, no client be stuck and free memory be back
    to where it started.
    """
    _check_faults(faults)
    _check_schedule(schedule)
    lm = _load(model or "smol", engine_url, engine_timeout)
    try:
        rep = run_stress(lm, seed=seed, seconds=seconds or 30, clients=clients, kill=kill,
                         kill_daemon=kill_daemon, long=long, faults=faults,
                         hang_timeout=hang_timeout, cpus=cpus, schedule=schedule)
    finally:
        lm.close()
    b = rep.boot
    errs = ", ".join(f"{k} {v}" for k, v in rep.errors.items()) or "none"
    click.echo(f"stress: seed {seed}: {rep.requests} requests, {rep.ok} completed "
               f"({rep.verified} verified against the host engine, {len(rep.mismatched)} "
               f"mismatched), {rep.failed} failed ({errs}); {rep.client_kills} clients and "
               f"{rep.daemon_kills} daemon processes killed")
    click.echo(f"stress: after: slots free {rep.slots_free}/8, queued {rep.queued}, orphans "
               f"{rep.orphans}, workers {rep.workers}, free pages {rep.free_pages}, stuck "
               f"{rep.stuck}; machine: {b.exit if b else '?'}; {b.wall_s if b else 0:.1f} s")
    if b is not None and b.faults:
        click.echo("faults injected: " + ", ".join(f"{k} {v}" for k, v in b.faults.items()))
    for line in rep.mismatched[:10]:
        click.echo(f"  MISMATCH {line}", err=True)
    _json(json_out, rep)
    if not rep.passed:
        _print_failure(b)
        raise click.ClickException(f"stress failed: {rep.verdict}")
    click.echo("stress: PASS")
