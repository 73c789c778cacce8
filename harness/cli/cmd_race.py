"""`harness race`: guest commands under seeded schedules with the kernel's lock checks on
(harness/race/): each distinct finding once, with the seed that shows it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from harness.cli.cmd_run import _check_model, _file, _size
from harness.cli.options import DEFAULT_CPUS
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL
from harness.race.kcsan import HOLD, SAMPLE_MEAN

DEFAULT_CMD = "usertests -q"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--command", "cmd", default=DEFAULT_CMD, show_default=True, metavar="CMDS",
              help="Guest shell commands run under each schedule.")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=5, show_default=True,
              help="Schedules tried: seeds 1..N.")
@click.option("--seed", "one", metavar="SPEC",
              help="Just this schedule (random:7, pct:3:2, or a number = random:N): "
                   "what a report's replay line gives.")
@click.option("--schedule", "kind", type=click.Choice(["random", "pct"]), default="random",
              show_default=True, help="The schedule family of --seeds.")
@click.option("--cpus", type=click.IntRange(2, 8), default=max(2, DEFAULT_CPUS),
              show_default=True, help="Harts (a race needs two).")
@click.option("--mem", "ram", default="128M", show_default=True, callback=_size,
              metavar="SIZE", help="Guest RAM, 16M..2G.")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default="build/kernel/kernel.elf")
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default="build/fs.img")
@click.option("--user-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_KERNEL.parent.parent / "user", show_default="build/user",
              help="The user programs' ELFs (for process names).")
@click.option("--model", "-m", metavar="MODEL",
              help="Plug in the AI device serving this model (for aitest, llmrun, ...).")
@click.option("--no-data", "no_data", is_flag=True,
              help="The lock checks only: no data-race watch (faster; the schedule is then "
                   "the plain one of `harness run --schedule`).")
@click.option("--sample", "sample_mean", type=click.IntRange(50, 10**7), default=SAMPLE_MEAN,
              show_default=True, metavar="N",
              help="Data-race watch: one access watched about every N instructions.")
@click.option("--hold", type=click.IntRange(10, 10**7), default=HOLD, show_default=True,
              metavar="N", help="Data-race watch: other harts' instructions a watched hart "
                                "is held for.")
@click.option("--focus", metavar="FILES",
              help="Data-race watch: sample only accesses made by these kernel source files "
                   "(comma-separated, e.g. ai_service.c,ai_slots.c: the files you changed); "
                   "they still race with any code.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the findings to this JSON file.")
def race(cmd: str, seeds: int, one: str | None, kind: str, cpus: int, ram: int, kernel: Path,
         fs: Path, user_dir: Path, model: str | None, no_data: bool, sample_mean: int, hold: int,
         focus: str | None, json_path: Path | None) -> None:
    """Find the kernel's races and lock bugs: run CMDS under seeded schedules, detectors on.

    \b
    Checks (data races in the manner of Linux's KCSAN, harness/race/kcsan.py; the rest
    in the manner of lockdep, harness/race/lockdep.py):
      data race       two harts touch the same bytes, one writes, no lock in common
      lock order      A then B here, B then A before: a deadlock waiting to happen
      sleep           sleep() with a spinlock held besides the one handed to it
      release         a spinlock released by a hart that does not hold it
      irq             a lock held with interrupts on and taken in an interrupt handler
      user            a spinlock still held on the return to user space
    Each finding is printed once with both call chains (file:line) and the seed that
    shows it; the same seed shows it again, also under `harness debug --schedule S
    --race`. Exit status 1 if anything was found. Intended lock orders:
    kernel_c/lockorder.c; intended races: DATA_RACE_* marks (kernel_c/racy.h).

    \b
      harness race                                     usertests -q, seeds 1..5
      harness race -c "aitest --all" -m smol --seeds 20
      harness race --seed random:7 -c "usertests -q"   one schedule again
      harness race -c "aistress -c 8 -t 1" -m smol --focus ai_service.c
    """
    from harness.guest.programs import Programs
    from harness.run.race_seeds import RaceOptions, render, replay_command, run_seed

    _file("kernel", kernel, "build it with `make build`")
    _file("disk image", fs, "build it with `make build`")
    if model is not None:
        _check_model(model)
    if one is not None:
        specs = [f"random:{one}" if one.isdigit() else one]
    else:
        specs = [f"{kind}:{n}" for n in range(1, seeds + 1)]
    from harness.det.schedule import ScheduleSpec

    for s in specs:
        try:
            ScheduleSpec.parse(s)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--seed") from None
    opts = RaceOptions(cmd=cmd, kernel=kernel, fs=fs, cpus=cpus, ram=ram, model=model,
                       data=not no_data, sample_mean=sample_mean, hold=hold,
                       focus=tuple(x.strip() for x in (focus or "").split(",") if x.strip()))
    programs = Programs(kernel, user_dir)
    found: dict[tuple, object] = {}
    runs = []
    with click.progressbar(specs, label=f"{len(specs)} schedules of {cmd!r}", file=sys.stderr,
                           item_show_func=lambda s: s or "") as bar:
        for spec in bar:
            try:
                r = run_seed(opts, spec, programs)
            except ValueError as e:  # a --focus naming no kernel code
                raise click.UsageError(str(e)) from None
            runs.append(r)
            for f in r.findings:
                if f.key not in found:
                    found[f.key] = f
                    click.echo("\n" + render(f, programs), err=False)
                    click.echo(f"  seen with schedule {spec}; again: {replay_command(opts, spec)}")
    bad = [r for r in runs if r.exit != "ok"]
    insns = sum(r.instructions for r in runs)
    secs = sum(r.seconds for r in runs) or 1e-9
    watched = (f", {sum(r.watched for r in runs):,} accesses watched" if not no_data
               else ", data-race watch off")
    click.echo(f"\n{len(found)} distinct finding(s) in {len(runs)} schedule(s) of {cmd!r} on "
               f"{cpus} harts: {insns:,} instructions ({insns / secs / 1e6:.1f} MIPS), "
               f"{sum(r.events for r in runs):,} lock events{watched}"
               + (f"; {len(bad)} run(s) did not end cleanly: "
                  + ", ".join(f"{r.spec} ({r.exit})" for r in bad) if bad else ""))
    if json_path is not None:
        json_path.write_text(json.dumps({
            "cmd": cmd, "cpus": cpus, "schedules": [r.spec for r in runs],
            "runs": [{"schedule": r.spec, "exit": r.exit, "instructions": r.instructions,
                      "lock_events": r.events, "samples": r.samples, "watched": r.watched,
                      "seconds": round(r.seconds, 3)} for r in runs],
            "findings": [{"kind": f.kind, "title": f.title, "schedule": f.seed,
                          "text": render(f, programs)} for f in found.values()]},
            indent=2) + "\n")
    sys.exit(1 if found or bad else 0)
