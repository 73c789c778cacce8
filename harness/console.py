"""The host terminal as the guest's console.

- Raw mode while the machine runs (no line editing, no echo, no signals from keys: the
  guest's console driver edits lines and Ctrl-C goes to the guest), output post-processing
  kept so the guest's "\\n" still starts a new line.
- A reader thread forwards typed bytes to the machine (`Machine.send_input`, thread-safe).
- Ctrl-A is the escape key, as in QEMU: Ctrl-A X quits, Ctrl-A H prints help, Ctrl-A
  Ctrl-A sends one Ctrl-A to the guest.
- The terminal is restored on every exit: normal return, exceptions (the context
  manager), SIGTERM/SIGHUP (turned into a quit request), and interpreter exit (atexit).
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import termios
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

CTRL_A = 0x01
HELP = (b"\r\n[harness] Ctrl-A X: quit   Ctrl-A H: this help   Ctrl-A Ctrl-A: send Ctrl-A\r\n")


class Console:
    """Connects a terminal (or any fd pair) to a running machine."""

    def __init__(self, send: Callable[[bytes], None], quit: Callable[[str], None], *,
                 stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.send = send
        self.quit = quit
        self.in_fd, self.out_fd = stdin_fd, stdout_fd
        self.interactive = os.isatty(stdin_fd)
        self._saved: list | None = None
        self._escape = False
        self._wake: tuple[int, int] | None = None  # self-pipe that stops the reader
        self._thread = threading.Thread(target=self._reader, name="harness-console",
                                        daemon=True)
        self._old_handlers: dict[int, object] = {}

    # ---------------------------------------------------------------- lifetime
    def __enter__(self) -> Console:
        if self.interactive:
            self._saved = termios.tcgetattr(self.in_fd)
            atexit.register(self.restore)
            termios.tcsetattr(self.in_fd, termios.TCSAFLUSH, raw_mode(self._saved))
        self._wake = os.pipe()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: the caller handles signals
                break
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._wake is not None:
            os.write(self._wake[1], b"x")
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(timeout=1)
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old_handlers.clear()
        self.restore()

    def restore(self) -> None:
        """Put the terminal back as we found it (idempotent)."""
        if self._saved is not None:
            try:
                termios.tcsetattr(self.in_fd, termios.TCSADRAIN, self._saved)
            except termios.error:
                pass
            self._saved = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.quit(f"received {signal.Signals(signum).name}")

    # ---------------------------------------------------------------- output
    def write(self, data: bytes) -> None:
        """Guest console output to the terminal."""
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out_fd, view)
            except BlockingIOError:
                select.select([], [self.out_fd], [])
                continue
            view = view[n:]

    # ---------------------------------------------------------------- input
    def _reader(self) -> None:
        assert self._wake is not None
        wake = self._wake[0]
        while True:
            ready, _, _ = select.select([self.in_fd, wake], [], [])
            if wake in ready:
                return
            try:
                data = os.read(self.in_fd, 1024)
            except OSError:
                return
            if not data:
                return  # end of input: the guest just sees no more bytes
            self.feed(data)

    def feed(self, data: bytes) -> None:
        """Handle typed bytes: Ctrl-A commands here, everything else to the guest."""
        out = bytearray()
        for b in data:
            if self._escape:
                self._escape = False
                if b in (ord("x"), ord("X")):
                    if out:
                        self.send(bytes(out))
                    self.quit("Ctrl-A X")
                    return
                if b in (ord("h"), ord("H"), ord("?")):
                    self.write(HELP)
                elif b == CTRL_A:
                    out.append(CTRL_A)
                continue
            if b == CTRL_A and self.interactive:
                self._escape = True
                continue
            out.append(b)
        if out:
            self.send(bytes(out))


def raw_mode(attrs: list) -> list:
    """Terminal attributes for the guest console: like cfmakeraw, but output processing
    stays on (so "\\n" returns the carriage) and reads return each byte at once."""
    iflag, oflag, cflag, lflag, ispeed, ospeed, cc = attrs
    iflag &= ~(termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON
               | termios.INLCR | termios.IGNCR)
    cflag = (cflag & ~(termios.CSIZE | termios.PARENB)) | termios.CS8
    lflag &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | termios.ISIG)
    cc = list(cc)
    cc[termios.VMIN], cc[termios.VTIME] = 1, 0
    return [iflag, oflag, cflag, lflag, ispeed, ospeed, cc]

