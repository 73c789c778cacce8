"""The host terminal as the guest's console.

- Raw mode while the machine runs (no line editing, no echo, no signals from keys: the
  guest's console driver edits lines and Ctrl-C goes to the guest), output post-processing
  kept so the guest's "\\n" still starts a new line.
- A reader thread forwards typed bytes to the machine (`Machine.send_input`, thread-safe).
- Ctrl-A is the escape key, as in QEMU: Ctrl-A X quits, Ctrl-A H prints help, Ctrl-A
  Ctrl-A sends one Ctrl-A to the guest.
- The terminal is restored on every exit: normal return, exceptions (the context
  manager), SIGTERM/SIGHUP (turned into a quit request), and interpreter exit (atexit).
- Host messages (`[ai] model ... ready`) go through `host_line`, which never cuts a guest
  line in two: while the guest's output is mid-line they wait for its newline (at most
  HOLD_S, then they start a line of their own).
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
HOLD_S = 0.5  # longest a host message waits for the guest to end its line
HELP = (b"\r\n[harness] Ctrl-A X: quit   Ctrl-A H: this help   Ctrl-A Ctrl-A: send Ctrl-A\r\n")


class Console:
    """Connects a terminal (or any fd pair) to a running machine."""

    def __init__(self, send: Callable[[bytes], None], quit: Callable[[str], None], *,
                 stdin_fd: int = 0, stdout_fd: int = 1, stderr_fd: int = 2) -> None:
        self.send = send
        self.quit = quit
        self.in_fd, self.out_fd, self.err_fd = stdin_fd, stdout_fd, stderr_fd
        self.interactive = os.isatty(stdin_fd)
        self._saved: list | None = None
        self._escape = False
        self._wake: tuple[int, int] | None = None  # self-pipe that stops the reader
        self._thread = threading.Thread(target=self._reader, name="harness-console",
                                        daemon=True)
        self._old_handlers: dict[int, object] = {}
        self._lines_lock = threading.Lock()
        self._mid_line = False              # the guest's last byte was not a newline
        self._held: list[str] = []          # host messages waiting for the guest's newline
        self._hold_timer: threading.Timer | None = None

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

    def flush_held(self) -> None:
        """Print any host message still waiting for the guest's newline (run ended)."""
        with self._lines_lock:
            self._release_held(newline=True)

    def close(self) -> None:
        self.flush_held()
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
        with self._lines_lock:
            cut = data.rfind(b"\n") + 1 if self._held else 0
            if cut:                 # held messages go out after the guest's last full line
                self._write(data[:cut])
                self._release_held(newline=False)
                data = data[cut:]
            self._write(data)
            if data:
                self._mid_line = data[-1:] != b"\n"

    def host_line(self, msg: str) -> None:
        """A host message on stderr, as a line of its own (any thread)."""
        with self._lines_lock:
            if not self._mid_line:
                self._emit(msg)
                return
            self._held.append(msg)
            if self._hold_timer is None:
                self._hold_timer = threading.Timer(HOLD_S, self._hold_expired)
                self._hold_timer.daemon = True
                self._hold_timer.start()

    def _hold_expired(self) -> None:
        with self._lines_lock:
            self._release_held(newline=True)

    def _release_held(self, newline: bool) -> None:
        """Print the held messages (lock held); `newline` ends the guest's line first."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if not self._held:
            return
        if newline:
            self._write(b"\n")
            self._mid_line = False
        for msg in self._held:
            self._emit(msg)
        self._held.clear()

    def _emit(self, msg: str) -> None:
        # through stderr, so `2>/dev/null` still silences the harness; the guest's tty
        # output keeps "\n" -> "\r\n" post-processing in raw mode, stderr shares the tty
        os.write(self.err_fd, (msg + "\n").encode(errors="replace"))

    def _write(self, data: bytes) -> None:
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

