"""`harness fuzz` and `harness stress`: the guest's sysfuzz and aistress run and checked
(harness/run/fuzz_stress.py)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from harness.cli.options import cpus_option, engine_options
from harness.det.schedule import ScheduleSpec
from harness.engines.base import AiBackend
from harness.run.fuzz_stress import Boot, fuzz_lines, run_fuzz, run_stress, stress_lines


def _load(model: str, engine_url: str | None = None,
          engine_timeout: float | None = None) -> AiBackend:
    """The backend every boot shares: the model loaded in process, or with --engine the
    server asked for it."""
    from harness.cli.options import remote_engine
    from harness.engines.local import LoadedModel
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
    click.echo("\n".join(fuzz_lines(rep, seed)))
    _json(json_out, rep)
    if not rep.passed:
        _print_failure(rep.boot)
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
    click.echo("\n".join(stress_lines(rep, seed)))
    for line in rep.mismatched[:10]:
        click.echo(f"  MISMATCH {line}", err=True)
    _json(json_out, rep)
    if not rep.passed:
        _print_failure(rep.boot)
        raise click.ClickException(f"stress failed: {rep.verdict}")
    click.echo("stress: PASS")
