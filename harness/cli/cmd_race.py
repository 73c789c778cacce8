"""`harness race`: guest commands under seeded schedules with the kernel's lock checks on
(harness/race/): each distinct finding once, with the seed that shows it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.cli.options import DEFAULT_CPUS, check_model, need_file, ram_size
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
@click.option("--mem", "ram", default="128M", show_default=True, callback=ram_size,
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
    from harness.run.race_seeds import RaceOptions, search

    need_file("kernel", kernel, "build it with `make build`")
    need_file("disk image", fs, "build it with `make build`")
    if model is not None:
        check_model(model)
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
    try:
        found = search(opts, specs, programs, echo=click.echo)
    except ValueError as e:  # a --focus naming no kernel code
        raise click.UsageError(str(e)) from None
    click.echo("\n" + found.summary())
    if json_path is not None:
        found.write_json(json_path, programs)
    sys.exit(1 if found.found or found.failed_runs else 0)
