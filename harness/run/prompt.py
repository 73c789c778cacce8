"""`harness run --model M --prompt TEXT` and `--demo`: one prompt through the guest.

The text is tokenised on the host with the model's tokenizer; the ids go into a file on (an
in-memory copy of) the disk image, PROMPT_FILE, so prompts of every length the service takes
fit (a command line holds at most MAXARG words). The guest runs
`llmrun --stream --timing --predict N --prompt-file PROMPT_FILE` (user_c/llmrun.c) through
the real path: ai_submit -> the kernel's request queue -> ai_daemon -> virtio AI device ->
pyllm engine -> progress interrupts -> ai_read. Its line of ids grows as the device produces
them; harness/run/text_stream.py decodes it here as it comes, and the lifecycle timings the guest
measured follow (Model Loading Time, TTFT, TPOT, E2E; see llmrun.c for where
each timer starts and stops). `--demo` (what `make run` does) asks the demo question through
the model's chat template (`chat=True`: `llmrun --stop-eos`, so the answer ends with the model's
turn; shown as "user: ..." / "assistant: ...") and then, when stdin is a terminal, boots the
interactive shell with the model already loaded; `--demo --raw` continues the demo text instead,
for exactly N tokens, as the course's runner does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from harness.abi import cheader
from harness.devices.ai_protocol import TraceEvent
from harness.devices.virtio_ai import VirtioAi
from harness.machine.config import Exit, MachineConfig
from harness.run import trace as ai_trace
from harness.run.hostapi import AI_MAX_TOKENS, AiSession, LlmResult, parse_llmrun
from harness.run.launch import ExitCode, GuestRun, add_ai_device, exit_code
from harness.run.terminal_boot import console_boot
from harness.run.text_stream import IdStream

AI_MAX_PREDICT = cheader.load("ai.h")["AI_MAX_PREDICT"]
PROMPT_FILE = "run.ids"  # the prompt's ids, in the guest's root directory


def encode_prompt(model: str, text: str, chat: bool = False) -> list[int]:
    """Host-side tokenisation (`chat`: TEXT as a user message through the model's chat
    template), with the AI service's limits checked before boot."""
    from pyllm.registry import load_tokenizer

    tok = load_tokenizer(model)
    ids = tok.encode_chat([{"role": "user", "content": text}]) if chat else tok.encode(text)
    if not ids:
        raise click.ClickException("the prompt is empty after tokenisation")
    if len(ids) > AI_MAX_TOKENS:
        raise click.ClickException(f"the prompt is {len(ids)} tokens; the AI service takes at "
                                   f"most {AI_MAX_TOKENS} (AI_MAX_TOKENS in kernel_c/ai.h)")
    return ids


def run_prompt(*, model: str, text: str, max_new_tokens: int, kernel: Path, fs: Path,
               ram: int, clock: str, timeout: float | None, trace: Path | None,
               then_shell: bool, quiet: bool, cpus: int = 1, chat: bool = False) -> int:
    """Run one prompt through the guest (`cpus` harts) and print text + timings; the
    exit code. `chat`: TEXT is a question asked through the chat template, answered until
    the model ends its turn (at most max_new_tokens)."""
    if max_new_tokens > AI_MAX_PREDICT:
        raise click.ClickException(f"--max-new-tokens {max_new_tokens} is above the service "
                                   f"limit {AI_MAX_PREDICT} (AI_MAX_PREDICT)")
    ids = encode_prompt(model, text, chat)
    cmd = (f"llmrun --stream --timing {'--stop-eos ' if chat else ''}--predict "
           f"{max_new_tokens} --prompt-file /{PROMPT_FILE}")
    files = {PROMPT_FILE: (" ".join(map(str, ids)) + "\n").encode()}
    log = None if quiet else (lambda m: click.echo(m, err=True))
    session = AiSession(model, kernel=kernel, fs=fs, ram_size=ram, clock=clock, preload=False,
                        log=log, cpus=cpus)
    boots: list[tuple[str, list[TraceEvent]]] = []
    try:
        if not quiet:
            what = "question (chat template)" if chat else "prompt"
            click.echo(f"[harness] {what} {text!r}: {len(ids)} tokens; in the guest: "
                       f"{_short(cmd)}", err=True)
        stream = IdStream(session.tokenizer, ids, text=_echo_text,
                          other=None if quiet else _echo_console,
                          on_prompt=(lambda _t: _echo_question(text)) if chat else _echo_prompt,
                          stop_ids=frozenset(session.tokenizer.eos_ids) if chat else frozenset())
        with _sigterm_as_interrupt():
            run = session.run(cmd, timeout=timeout, echo=stream.feed, files=files)
        boots.append(("boot 1: " + _short(cmd), run.trace + ai_trace.console_stages(run.output)))
        code = _report(run, session, ids, stream.finished, quiet, text if chat else None)
        if clock == "icount":
            click.echo("note: with --clock icount guest time follows the instruction count, so "
                       "the device's compute time is invisible in these timings", err=True)
        if code == 0 and then_shell and os.isatty(0):
            code = _shell(session, kernel, fs, ram, clock, quiet, boots)
    finally:
        if trace is not None:
            n = ai_trace.write_trace(trace, boots)
            click.echo(f"[harness] wrote {n} trace events to {trace} "
                       "(open it in https://ui.perfetto.dev)", err=True)
        session.close()
    return code


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP end the run like Ctrl-C (the machine stops cleanly, exit 130)."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _echo_console(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _echo_prompt(text: str) -> None:
    click.echo("")
    click.echo(click.style(text, bold=True), nl=False)


def _echo_question(question: str) -> None:
    click.echo("")
    click.echo(click.style("user: ", bold=True) + question)
    click.echo(click.style("assistant: ", bold=True), nl=False)


def _echo_text(text: str) -> None:
    click.echo(text, nl=False)
    sys.stdout.flush()


def _short(cmd: str, n: int = 100) -> str:
    return cmd if len(cmd) <= n else cmd[: n - 5] + " ..."


def _report(run: GuestRun, session: AiSession, ids: list[int], streamed: bool,
            quiet: bool, question: str | None = None) -> int:
    """Print the decoded text (unless it was streamed; `question`: as the user's question
    and the assistant's answer) and the timings; the exit code."""
    results = parse_llmrun(run.output)
    if run.exit in (Exit.PANIC, Exit.FAULT) and run.machine is not None and run.result:
        from harness.run.fault_report import format_report

        click.echo(format_report(run.machine, run.result), err=True)
        return exit_code(run.result)
    if run.exit == Exit.TIMEOUT:
        click.echo(f"[harness] {run.message}", err=True)
        return ExitCode.TIMEOUT
    if run.exit == Exit.QUIT:  # a signal: never the terminal's Ctrl-A X (not attached)
        click.echo(f"[harness] {run.message}", err=True)
        return ExitCode.INTERRUPTED
    if not results:
        if quiet:  # the console was not shown: show it now
            click.echo(run.output, err=True)
        click.echo("[harness] llmrun printed no result (see its output above)", err=True)
        return run.status if run.exit == Exit.POWEROFF and run.status else 1
    res = results[-1]
    if not streamed and question is not None:
        tok = session.tokenizer
        _echo_question(question)
        click.echo(tok.decode([i for i in res.ids if i not in tok.eos_ids], skip_special=True))
    elif not streamed:
        tok = session.tokenizer
        click.echo("")
        full = tok.decode(ids + res.ids).rstrip("\n")  # decoded together: exact spacing
        head = tok.decode(ids)
        if full.startswith(head):  # the prompt in bold on a terminal
            full = click.style(head, bold=True) + full[len(head):]
        click.echo(full)
    click.echo("")
    click.echo(format_timings(res, len(ids)))
    return 0 if run.ok else run.status or 1


def format_timings(res: LlmResult, n_prompt: int) -> str:
    """The lifecycle table of one llmrun result (times from the guest)."""
    t = res.timing
    n = t.get("generated", len(res.ids))
    model = t.get("model", "?")
    rows = [
        ("Model Loading Time", t.get("load_us"), "device: weights file -> ready to serve"),
        *([("  of which repack", t["repack_us"], "the one-time int8 repack, cached: later "
            "loads skip it")] if t.get("repack_us") else []),
        ("TTFT", t.get("ttft_us"), f"ai_submit -> first token ({n_prompt} prompt tokens: "
                                   "queue + prefill)"),
        ("TPOT", t.get("tpot_us"), f"mean time per token after the first ({n} generated)"),
        ("E2E", t.get("e2e_us"), "ai_submit -> ai_wait returned the result"),
    ]
    if t.get("shown"):
        rows.insert(2, ("First on console", t["shown"] - t["submit"],
                        "ai_submit -> llmrun wrote the first id (ai_read)"))
    label = f"{model} (synthetic weights)" if res.synthetic else model
    lines = [f"lifecycle of the request, measured in the guest ({label}):"]
    for name, us, what in rows:
        val = f"{us / 1000:9.2f} ms" if isinstance(us, int) and us >= 0 else "      n/a   "
        lines.append(f"  {name:<19}{val}   {what}")
    if res.synthetic:
        lines.append("  note: synthetic weights -- the text is meaningless, the timings are real")
    return "\n".join(lines)


def _shell(session: AiSession, kernel: Path, fs: Path, ram: int, clock: str, quiet: bool,
           boots: list[tuple[str, list[TraceEvent]]]) -> int:
    """Boot the interactive shell with the session's (already loaded) model."""
    if not quiet:
        click.echo("\n[harness] interactive shell with the model loaded (Ctrl-A X quits); "
                   "try: llmrun --timing --predict 16 504 3575 282 4649 314", err=True)
    created: list[VirtioAi] = []
    config = interactive_config(session, kernel, fs, ram, clock, created)
    try:
        return console_boot(config, interactive=True, quiet=quiet)
    finally:
        if created:
            boots.append(("boot 2: interactive", list(created[-1].trace)))


def interactive_config(session: AiSession, kernel: Path, fs: Path, ram: int, clock: str,
                       created: list[VirtioAi]) -> MachineConfig:
    model = session.lm if session.lm is not None else session.spec
    assert model is not None, "the session has a model"
    config = MachineConfig(kernel=kernel, fs=fs, ram_size=ram, clock=clock, cmd="",
                           cpus=session.cpus)
    add_ai_device(config, model, log=session.log, created=created)
    return config
