"""`harness run`: boot the kernel on the machine, interactively or with commands."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import click

from harness.cli.options import cpus_option, det_options, engine_options, remote_engine
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig, RunResult
from harness.run.det_options import DetRun
from harness.run.launch import (
    DEMO_QUESTION,
    DEMO_TEXT,
    HOST_LOG,
    add_ai_device,
    console_boot,
)

# --demo, `make run`: asked through the chat template. (Asked "What is the capital of France?",
# the 135M model's first answer token is a near tie, "The" 0.08 nats above "L" on the exact
# path, which the int8 path flips into a French ramble: docs/BENCH.md, "multiple choice".)


def parse_size(text: str) -> int:
    """"128M", "1G", "65536" -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KkMmGg]?)(?:i?[Bb])?\s*", text)
    if not m:
        raise ValueError(f"'{text}' is not a size like 128M or 1G")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        size = parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if not (16 << 20) <= size <= (2 << 30) or size % 4096:
        raise click.BadParameter(f"{value}: RAM must be 16M..2G in whole 4 KiB pages")
    return size


def _file(what: str, path: Path, hint: str) -> Path:
    if not path.is_file():
        raise click.ClickException(f"{what} not found: {path} ({hint})")
    return path


def _with_race(attach, det):  # type: ignore[no-untyped-def]
    """console_boot's `attach`: the race detectors, then the monitor if any."""
    def both(machine):  # type: ignore[no-untyped-def]
        end_race = det.attach_race(machine, stop=False)
        end_other = attach(machine) if attach is not None else None

        def detach() -> None:
            if end_other is not None:
                end_other()
            end_race()

        return detach

    return both


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--command", "cmd", metavar="CMDS",
              help="Run these shell commands (e.g. 'echo hi | wc; ls') instead of an "
                   "interactive shell, then power off; exit with the last command's status.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop the machine after this many wall-clock seconds (exit code 124). "
                   "Default: no limit.")
@click.option("--mem", "ram", default="128M", show_default=True, callback=_size,
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
    _file("kernel", kernel, "build it with `make build`")
    _file("disk image", fs, "build it with `make build`")
    if fs_check:
        _check_fs(fs)
    if (prompt is not None or demo) and cmd is not None:
        raise click.UsageError("-c cannot be combined with --prompt or --demo")
    if prompt is not None and demo:
        raise click.UsageError("give --prompt or --demo, not both")
    if raw and not demo:
        raise click.UsageError("--raw goes with --demo (--prompt continues its text raw "
                               "already)")
    if gdb_port is not None and (prompt is not None or demo):
        raise click.UsageError("--gdb cannot be combined with --prompt or --demo")
    if chat and (cmd is not None or prompt is not None or demo or gdb_port is not None
                 or persist):
        raise click.UsageError("--chat cannot be combined with -c, --prompt, --demo, --gdb "
                               "or --persist")
    det = DetRun(schedule, record, replay, "run",
                 race="all" if race else "locks" if race_locks else None)
    det.check(command=cmd is not None, prompt=prompt is not None, demo=demo, chat=chat,
              persist=persist, model=model is not None)
    if det.on and (prompt is not None or demo or chat or gdb_port is not None):
        raise click.UsageError("--schedule/--record/--replay go with -c or the shell (for "
                               "the debugger: harness debug --schedule)")
    if record is not None and persist:
        raise click.UsageError("--record cannot be combined with --persist (a replay needs "
                               "the disk as it was)")
    if (prompt is not None or demo or chat) and model is None:
        model = "smol"
    if kv_cache is not None:
        _set_kv_cache(kv_cache)
    engine = remote_engine(engine_url, engine_timeout, model)
    if engine is not None and (prompt is not None or demo):
        raise click.UsageError("--prompt and --demo run on the in-process engine; with "
                               "--engine use the guest: -c 'llmrun ...' or the shell")
    plan = _fault_plan(ai_fault, model)
    if model is not None and engine is None:
        _check_model(model)
    if prompt is not None or demo:
        from harness.run.prompt import run_prompt

        chat = demo and not raw
        text = (DEMO_QUESTION if chat else DEMO_TEXT) if demo else prompt or ""
        sys.exit(run_prompt(model=model or "smol", text=text,
                            max_new_tokens=max_new_tokens, kernel=kernel, fs=fs, ram=ram,
                            clock=clock, timeout=timeout, trace=trace, then_shell=demo,
                            quiet=quiet, cpus=cpus, chat=chat))
    config = MachineConfig(kernel=kernel, fs=fs, ram_size=ram, clock=clock,
                           cmd="chat" if chat else cmd or "", persist=persist, timeout=timeout,
                           hang_timeout=hang_timeout, cpus=cpus)
    ai_model, model = det.model(model)
    if det.replayer is not None:  # the recorded machine (before its devices are added)
        config.cmd = det.replayer.journal.header.get("cmd", "")
    created: list = []
    console = bytearray()  # with --trace: llmrun's own stamps (tokenize, shown) are in it
    if model is not None:
        add_ai_device(config, ai_model, log=None if quiet else HOST_LOG, plan=plan,
                      allow_load=(model,), created=created, engine=engine)
        _add_course_files(config, model, quiet, remote=engine is not None)
    det.configure(config, model)
    try:
        attach = None
        if monitor or monitor_record is not None:
            from harness.monitor.feed import attach_monitor

            attach = attach_monitor(record=monitor_record, quiet=quiet)
        if det.race is not None:
            attach = _with_race(attach, det)
        code = console_boot(config, interactive=cmd is None and replay is None, quiet=quiet,
                            serve=None if gdb_port is None else _gdb(gdb_port), attach=attach,
                            tee=None if trace is None else console.extend,
                            on_end=det.end if det.on else None)
    finally:
        for dev in created:
            if dev.injector is not None and not quiet:
                click.echo(dev.injector.summary(dev.requests), err=True)
        if trace is not None:
            from harness.run import trace as ai_trace

            boots = [(f"boot {i + 1}", list(d.trace)) for i, d in enumerate(created)]
            if boots:  # the stamps name their requests; reqids count from 1 each boot
                boots[-1][1].extend(ai_trace.console_stages(console.decode(errors="replace")))
            n = ai_trace.write_trace(trace, boots)
            click.echo(f"[harness] wrote {n} trace events to {trace}", err=True)
    sys.exit(code)


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
    hint = f"`python -m harness.disk.fsimage --check {fs}` lists them"
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


def _check_model(model: str) -> None:
    """Unknown names and missing files: one line and exit status 1, before booting."""
    from harness.run.hostapi import check_model
    from pyllm.errors import PyllmError

    try:
        check_model(model)
    except PyllmError as e:
        raise click.ClickException(str(e)) from None


def _fault_plan(spec: str | None, model: str | None):  # -> FaultPlan | None
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


def _add_course_files(config: MachineConfig, model: str, quiet: bool, *,
                      remote: bool = False) -> None:
    """The model's guest files, under /AI/SMOL or /AI/QWEN: the guest tokenizer's
    vocabulary (VOCAB.TOK, harness/guest/bpe_host.py) and, for course assets, their
    PMT.BIN / EXP.BIN, where the lab's aitest reads its reference prompt and answer (the
    weights stay on the host, in the AI device). In memory only: not with --persist.
    `remote`: `model` is a served name; its tokenizer is found as the remote backend finds
    it (harness/engines/remote.py)."""
    if remote:
        from harness.engines.remote import tokenizer_spec

        model = tokenizer_spec(model) or model
    from harness.guest.bpe_host import vocab_files
    from pyllm.errors import PyllmError
    from pyllm.loaders.course_assets import reference_files
    from pyllm.registry import resolve

    files: dict[str, bytes] = {}
    try:
        files.update(reference_files(resolve(model)[1]))
    except PyllmError:
        pass  # not course assets, or reported by the device when it loads them
    try:
        files.update({k.removeprefix("AI/"): v for k, v in vocab_files(model).items()})
    except PyllmError as exc:  # no tokenizer: the guest's tok cannot run, all else can
        if not quiet:
            click.echo(f"[harness] no guest tokenizer vocabulary: {exc}", err=True)
    if not files:
        return
    if config.persist:
        if not quiet:
            click.echo(f"[harness] --persist: {', '.join(sorted(files))} are not copied "
                       "into the guest's /AI", err=True)
        return
    from harness.disk.fsimage import FsError, with_files

    try:
        image = with_files(Path(config.fs).read_bytes(),
                           {f"AI/{name}": data for name, data in files.items()}, grow=True)
    except (OSError, FsError) as exc:
        raise click.ClickException(f"cannot add the model's files to "
                                   f"{config.fs}: {exc}") from None
    config.disk_data = bytearray(image)
    if not quiet:
        click.echo(f"[harness] /AI: {', '.join(sorted(files))} from the model", err=True)


if os.name != "posix":  # pragma: no cover
    raise ImportError("harness run needs a POSIX terminal")


def _gdb(port: int) -> Callable[[Machine], RunResult]:
    """`--gdb PORT`: the machine served to gdb-multiarch (harness/debug/gdbserver.py)."""
    from harness.debug.gdbserver import serve_machine

    return lambda machine: serve_machine(machine, port)
