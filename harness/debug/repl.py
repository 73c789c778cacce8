"""The `(debug)` prompt: readline line editing, history across sessions, tab completion.

An empty line repeats the last stepping or examining command (next, step, stepi, x,
list, ...), as in gdb. While the guest runs (continue, next, ...) the terminal belongs
to the guest console again: keys go to the guest, and Ctrl-C (or Ctrl-A X) stops the
guest and returns to the prompt. Without a terminal (commands piped in), the guest gets
no keyboard input (use the `input` command) and SIGINT stops it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from harness.debug import DebugError
from harness.debug.commands import Interpreter
from harness.run.terminal import Console

PROMPT = "(debug) "
HISTORY = Path.home() / ".harness_debug_history"
HISTORY_LINES = 1000
RUNS_GUEST = {"continue", "run", "step", "next", "stepi", "nexti", "finish", "until",
              "advance"}
REPEATS = RUNS_GUEST - {"run", "continue", "until", "advance"} | {"x", "list"}


class DebugConsole(Console):
    """The guest console while the debugger runs the guest: Ctrl-C breaks into the
    debugger (gdb's key) instead of going to the guest."""

    def __init__(self, send: Callable[[bytes], None], stop: Callable[[str], None]) -> None:
        super().__init__(send, stop)
        self.stop = stop

    def feed(self, data: bytes) -> None:
        if b"\x03" in data:
            before = data.split(b"\x03", 1)[0]
            if before:
                super().feed(before)
            self.stop("Ctrl-C")
            return
        super().feed(data)


class Repl:
    """Reads commands from the terminal (or any stream) and runs them."""

    def __init__(self, interp: Interpreter, out: Callable[[str], None] | None = None) -> None:
        self.i = interp
        self.out = out or (lambda text: print(text, flush=True))
        self.tty = os.isatty(0)
        self._last = ""
        self.errors = 0

    # ---------------------------------------------------------------- one command
    def run_command(self, line: str, echo: bool = False) -> None:
        if echo:
            self.out(PROMPT + line)
        word = line.split()[0] if line.split() else ""
        try:
            runs = bool(word) and self.i.resolve(word.split("/")[0]) in RUNS_GUEST
        except DebugError:
            runs = False
        try:
            text = self._running(line) if runs else self.i.execute(line)
        except DebugError as e:
            self.errors += 1
            self.out(str(e))
            return
        if text:
            self.out(text)

    def _running(self, line: str) -> str:
        """Run a command that runs the guest with the console attached and Ctrl-C armed."""
        m = self.i.t.m
        sys.stdout.flush()
        old = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, lambda n, f: m.request_pause("Ctrl-C"))
        try:
            if self.tty:
                with DebugConsole(m.send_input, m.request_pause):
                    return self.i.execute(line)
            return self.i.execute(line)
        finally:
            signal.signal(signal.SIGINT, old)

    # ---------------------------------------------------------------- the loop
    def loop(self, first: Iterable[str] = ()) -> int:
        """Run `first` commands, then prompt until quit or end of input; returns the
        number of commands that failed."""
        for line in first:
            self.run_command(line, echo=True)
            if self.i.quit_requested:
                return self.errors
        readline = self._readline()
        try:
            while not self.i.quit_requested:
                try:
                    line = input(PROMPT) if self.tty else self._read_plain()
                except EOFError:
                    if self.tty:
                        self.out("quit")
                    break
                except KeyboardInterrupt:
                    self.out("^C")
                    continue
                if not line.strip():
                    if self._last:
                        self.run_command(self._last)
                    continue
                word = line.split()[0].split("/")[0]
                try:
                    self._last = line if self.i.resolve(word) in REPEATS else ""
                except DebugError:
                    self._last = ""
                if not self.tty:
                    self.out(PROMPT + line)
                self.run_command(line)
        finally:
            if readline is not None:
                try:
                    readline.set_history_length(HISTORY_LINES)
                    readline.write_history_file(str(HISTORY))
                except OSError:
                    pass
        return self.errors

    def _read_plain(self) -> str:
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    def _readline(self):  # noqa: ANN202 - the readline module or None
        if not self.tty:
            return None
        try:
            import readline
        except ImportError:
            return None
        try:
            readline.read_history_file(str(HISTORY))
        except OSError:
            pass
        readline.set_completer_delims(" \t\n")
        matches: list[str] = []

        def complete(text: str, state: int) -> str | None:
            if state == 0:
                line = readline.get_line_buffer()[: readline.get_endidx()]
                try:
                    matches[:] = self.i.completions(text, line)
                except DebugError:
                    matches[:] = []
            return matches[state] if state < len(matches) else None

        readline.set_completer(complete)
        readline.parse_and_bind("tab: complete")
        return readline
