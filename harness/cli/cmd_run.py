"""`harness run`: boot the kernel on the machine, interactively or with commands."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli.options import (
    check_model,
    cpus_option,
    det_options,
    engine_options,
    need_file,
    ram_size,
    remote_engine,
)
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig, RunResult
from harness.run.console_run import ConsoleRun, boot_on_console
from harness.run.det_options import DetRun
from harness.run.launch import DEMO_QUESTION, DEMO_TEXT
from harness.run.prompt import run_prompt

if TYPE_CHECKING:
    from harness.devices.ai_faults import FaultPlan
    from harness.engines.remote import RemoteEngine

# --demo, `make run`: asked through the chat template. (Asked "What is the capital of France?",
# the 135M model's first answer token is a near tie, "The" 0.08 nats above "L" on the exact
# path, which the int8 path flips into a French ramble: docs/BENCH.md, "multiple choice".)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--command", "cmd", metavar="CMDS",
              help="Run these shell commands (e.g. 'echo hi | wc; ls') instead of an "
                   "interactive shell, then power off; exit with the last command's status.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop the machine after this many wall-clock seconds (exit code 124). "
                   "Default: no limit.")
@click.option("--mem", "ram", default="128M", show_default=True, callback=ram_size,
              metavar="SIZE", help="Guest RAM, 16M..2G (suffix K, M or G).")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default="build/kernel/kernel.elf",
              help="Kernel ELF to boot.")
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default="build/fs.img", help="File-system disk image (virtio-blk).")
@click.option("--persist", is_flag=True,
              help="Write the guest's disk changes back to the --fs image "
                   "(default: changes are kept in memory and dropped at exit).")
@click.option("--clock", type=click.Choice(["host", "icount"]), default="host",
              show_default=True,
              help="Guest time source: host = real time (idle guest costs no CPU); "
                   "icount = instruction count (reproducible runs, for tests).")
@cpus_option
@engine_options
@click.option("-q", "--quiet", is_flag=True, help="No banner or summary on stderr.")
@click.option("--model", "-m", metavar="MODEL",
              help="Plug in the AI device serving this model: smol, qwen, or a path to a "
                   ".gguf file / HF checkpoint folder. It loads on a host thread while the "
                   "guest boots (ai_daemon waits for it).")
@click.option("--kv-cache", "kv_cache", metavar="SIZE",
              help="Memory of the AI device's prefix cache (pyllm/prefix_cache.py), e.g. 512M; "
                   "0 turns it off. Default 256M (or PYLLM_KV_CACHE). The guest sees it in "
                   "ai_info (kv_cache_bytes) and its counters with `aitest --cacheprobe`.")
@click.option("--prompt", metavar="TEXT",
              help="Tokenise TEXT on the host, run `llmrun --timing` in the guest through the "
                   "AI service, print the generated text and the lifecycle timings "
                   "(Model Loading Time, TTFT, TPOT, E2E). Implies --model smol by default.")
@click.option("--chat", is_flag=True,
              help="Boot straight into the guest's `chat` (a multi-turn chat: tokenizer, "
                   "template and streaming all in the guest; ^C stops an answer, /quit "
                   "powers off). Implies --model smol by default.")
@click.option("--max-new-tokens", "-n", type=click.IntRange(1), default=32, show_default=True,
              help="Tokens to generate for --prompt / --demo.")
@click.option("--demo", is_flag=True,
              help=f"Ask the model the demo question ({DEMO_QUESTION!r}) through its chat "
                   "template and show its answer (to the end of its turn, at most -n tokens), "
                   "then the interactive shell when stdin is a terminal (what `make run` "
                   "does).")
@click.option("--raw", is_flag=True,
              help=f"With --demo: continue the demo text ({DEMO_TEXT!r}) as raw text for "
                   "exactly -n tokens, as the course's runner does (--prompt always does).")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write each AI request's life (submit, queued, dispatched, device accept, "
                   "first token, done, waited) as Chrome/Perfetto trace JSON to FILE.")
@click.option("--gdb", "gdb_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Start stopped at the first instruction and serve the GDB remote "
                   "protocol on 127.0.0.1:PORT (0: a free port, printed); connect with "
                   "gdb-multiarch build/kernel/kernel.elf -ex 'target remote :PORT'. "
                   "See also `harness debug`.")
@click.option("--hang-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Report a hang (like a panic, plus the process table; exit code 103) when "
                   "the guest makes no progress for this long: no system call, no console "
                   "output, no user code running, while not idle-waiting for a timer, a busy "
                   "device or console input. Default: off.")
@click.option("--no-fs-check", "fs_check", flag_value=False, default=True,
              help="Boot the disk image even if the pre-boot check (like fsck) finds it "
                   "corrupt: to see what the kernel makes of a broken file system.")
@click.option("--ai-fault", "ai_fault", metavar="SPEC",
              help="Inject AI device faults (with --model), e.g. 'fail=0.1,delay=200ms,"
                   "reorder,slow=120s,slow-p=0.05,engine-raise=0.05,seed=1'. See "
                   "harness/devices/ai_faults.py and docs/RELIABILITY.md.")
@click.option("--monitor", is_flag=True,
              help="Serve live snapshots of the AI service to `harness top` (a 0600 Unix "
                   "socket in a per-user directory, announced on stderr); inside tmux the "
                   "view opens in a split pane. See harness/monitor/.")
@click.option("--monitor-record", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="Write the monitor's snapshots to FILE (for "
                                   "`harness top --replay FILE`); implies --monitor.")
@det_options
def run(cmd: str | None, timeout: float | None, ram: int, kernel: Path, fs: Path,
        persist: bool, clock: str, quiet: bool, model: str | None, prompt: str | None,
        max_new_tokens: int, demo: bool, raw: bool, trace: Path | None, gdb_port: int | None,
        hang_timeout: float | None = None, ai_fault: str | None = None,
        fs_check: bool = True, kv_cache: str | None = None, monitor: bool = False,
        monitor_record: Path | None = None, cpus: int = 1, chat: bool = False,
        engine_url: str | None = None, engine_timeout: float | None = None,
        schedule: str | None = None, record: Path | None = None,
        replay: Path | None = None, race: bool = False, race_locks: bool = False) -> None:
    """Boot the kernel and attach the terminal to its console.

    \b
    Interactive (default): the shell runs on your terminal in raw mode.
      Ctrl-A X   quit            Ctrl-A H   help
      Ctrl-A Ctrl-A sends a literal Ctrl-A; Ctrl-C goes to the guest.
    Scripted: harness run -c "echo hi | wc; ls"   (exit status = the last command's)

    \b
    \b
    With the AI device (LLM inference served to the guest's ai_submit/ai_wait):
      harness run --model smol                          shell; try llmrun, aitest, aibench
      harness run --model smol --prompt "The capital of France is" -n 16
      harness run --demo --trace demo.json              the demo question, then the shell
      harness run --demo --raw                          the demo text continued, raw
      harness run --chat                                chat with the model in the guest

    \b
    Deterministic runs (the same run every time; see docs/DEBUGGING.md):
      harness run --schedule random:7 -c usertests      a seeded interleaving of the harts
      harness run --record run.nrec -c "llmrun -n 8 Hi" then: harness run --replay run.nrec

    Exit codes: the guest's status (0-255) when it powers off; 101 kernel panic;
    102 machine fault (unknown MMIO, unmapped memory, ...); 103 hang (--hang-timeout);
    124 timeout; 130 interrupted;
    1 for a bad option (unknown model, missing file, corrupt disk image, prompt too long).
    A panic or fault prints a report on stderr: registers, the faulting instruction and
    a symbolised backtrace.
    """
    _check_files(kernel, fs, fs_check)
    _check_combinations(cmd=cmd, prompt=prompt, demo=demo, raw=raw, chat=chat,
                        gdb=gdb_port is not None, persist=persist)
    det = _det_run(schedule, record, replay, "all" if race else "locks" if race_locks else None,
                   cmd=cmd, prompt=prompt, demo=demo, chat=chat, gdb=gdb_port is not None,
                   persist=persist, model=model)
    model = model or ("smol" if prompt is not None or demo or chat else None)
    engine, plan = _ai_options(model, kv_cache, engine_url, engine_timeout, ai_fault,
                               in_process=prompt is not None or demo)
    if prompt is not None or demo:
        sys.exit(run_prompt(model=model or "smol", max_new_tokens=max_new_tokens,
                            text=(DEMO_TEXT if raw else DEMO_QUESTION) if demo else prompt or "",
                            kernel=kernel, fs=fs, ram=ram, clock=clock, timeout=timeout,
                            trace=trace, then_shell=demo, quiet=quiet, cpus=cpus,
                            chat=demo and not raw))
    sys.exit(boot_on_console(ConsoleRun(
        MachineConfig(kernel=kernel, fs=fs, ram_size=ram, clock=clock,
                      cmd="chat" if chat else cmd or "", persist=persist, timeout=timeout,
                      hang_timeout=hang_timeout, cpus=cpus),
        det, model=model, plan=plan, engine=engine, quiet=quiet, trace=trace,
        attach=_monitor(monitor_record, quiet) if monitor or monitor_record else None,
        serve=_gdb(gdb_port), interactive=cmd is None and replay is None)))


def _check_files(kernel: Path, fs: Path, fs_check: bool) -> None:
    need_file("kernel", kernel, "build it with `make build`")
    need_file("disk image", fs, "build it with `make build`")
    if fs_check:
        _check_fs(fs)


def _ai_options(model: str | None, kv_cache: str | None, engine_url: str | None,
                engine_timeout: float | None, ai_fault: str | None, *,
                in_process: bool) -> tuple[RemoteEngine | None, FaultPlan | None]:
    """The AI device's options checked: (--engine's server, --ai-fault's plan)."""
    if kv_cache is not None:
        _set_kv_cache(kv_cache)
    engine = remote_engine(engine_url, engine_timeout, model)
    if engine is not None and in_process:
        raise click.UsageError("--prompt and --demo run on the in-process engine; with "
                               "--engine use the guest: -c 'llmrun ...' or the shell")
    plan = _fault_plan(ai_fault, model)
    if model is not None and engine is None:
        check_model(model)
    return engine, plan


def _check_combinations(*, cmd: str | None, prompt: str | None, demo: bool, raw: bool,
                        chat: bool, gdb: bool, persist: bool) -> None:
    """Options that do not go together: a one-line usage error."""
    if (prompt is not None or demo) and cmd is not None:
        raise click.UsageError("-c cannot be combined with --prompt or --demo")
    if prompt is not None and demo:
        raise click.UsageError("give --prompt or --demo, not both")
    if raw and not demo:
        raise click.UsageError("--raw goes with --demo (--prompt continues its text raw "
                               "already)")
    if gdb and (prompt is not None or demo):
        raise click.UsageError("--gdb cannot be combined with --prompt or --demo")
    if chat and (cmd is not None or prompt is not None or demo or gdb or persist):
        raise click.UsageError("--chat cannot be combined with -c, --prompt, --demo, --gdb "
                               "or --persist")


def _det_run(schedule: str | None, record: Path | None, replay: Path | None, race: str | None,
             *, cmd: str | None, prompt: str | None, demo: bool, chat: bool, gdb: bool,
             persist: bool, model: str | None) -> DetRun:
    """--schedule, --record, --replay, --race: the deterministic machine's options, checked."""
    det = DetRun(schedule, record, replay, "run", race=race)
    det.check(command=cmd is not None, prompt=prompt is not None, demo=demo, chat=chat,
              persist=persist, model=model is not None)
    if det.on and (prompt is not None or demo or chat or gdb):
        raise click.UsageError("--schedule/--record/--replay go with -c or the shell (for "
                               "the debugger: harness debug --schedule)")
    if record is not None and persist:
        raise click.UsageError("--record cannot be combined with --persist (a replay needs "
                               "the disk as it was)")
    return det


# fsck findings that only lose space (a file unlinked while still open when the machine
# stopped, with --persist, leaves these; the log keeps every system call all or nothing);
# anything else is refused before booting (with --no-fs-check the kernel checks what it
# reads, but cannot repair it)
_HARMLESS_FS = re.compile(r"marked in the bitmap but not used|allocated but unreachable")


def _check_fs(fs: Path) -> None:
    """Check the disk image like fsck (harness/disk/fsimage.py) before booting it: a file that
    is not our file system, or one whose structure is broken, is refused in one line."""
    from harness.disk.fsimage import FsImage

    try:
        problems = FsImage(fs).check()
    except Exception as e:  # FsError, or garbage the checker trips over
        raise click.ClickException(f"disk image {fs} is not a usable file system: {e}") from None
    serious = [p for p in problems if not _HARMLESS_FS.search(p) and not _nlink_high(p)]
    hint = f"`python -m harness.disk.mkfs --check {fs}` lists them"
    if serious:
        more = f" (and {len(problems) - 1} more problems; {hint})" if len(problems) > 1 else ""
        raise click.ClickException(f"disk image {fs} is corrupt: {serious[0]}{more}")
    if problems:  # (even with -q: it is not chatter)
        click.echo(f"[harness] warning: disk image {fs}: {len(problems)} lost blocks or "
                   f"inodes ({problems[0]}; {hint})", err=True)


def _nlink_high(problem: str) -> bool:
    m = re.search(r"nlink (\d+) but (\d+) directory references", problem)
    return bool(m) and int(m.group(1)) > int(m.group(2))


def _set_kv_cache(size: str) -> None:
    """--kv-cache: checked here, then handed to every engine this process starts."""
    from pyllm.prefix_cache import parse_size

    try:
        parse_size(size)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--kv-cache") from None
    os.environ["PYLLM_KV_CACHE"] = size


def _fault_plan(spec: str | None, model: str | None) -> FaultPlan | None:
    """--ai-fault SPEC read, or a one-line usage error."""
    if spec is None:
        return None
    if model is None:
        raise click.UsageError("--ai-fault needs the AI device (--model)")
    from harness.devices.ai_faults import FaultPlan

    try:
        return FaultPlan.parse(spec)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--ai-fault") from None


if os.name != "posix":  # pragma: no cover
    raise ImportError("harness run needs a POSIX terminal")


def _gdb(port: int | None) -> Callable[[Machine], RunResult] | None:
    """`--gdb PORT`: the machine served to gdb-multiarch (harness/debug/gdbserver.py)."""
    if port is None:
        return None
    from harness.debug.gdbserver import serve_machine

    return lambda machine: serve_machine(machine, port)


def _monitor(record: Path | None, quiet: bool) -> Callable[[Machine], Callable[[], None]]:
    """--monitor: live snapshots for `harness top` (harness/monitor/feed.py)."""
    from harness.monitor.feed import attach_monitor

    return attach_monitor(record=record, quiet=quiet)
