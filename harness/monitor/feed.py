"""The machine side of `harness top`: snapshots taken on the emulation thread, sent to
viewers over a Unix socket and/or written to a record file.

A host thread posts `snap` to the machine every `period` seconds (Machine.post, the
path device events take: it runs between run slices, so the guest is stopped and
consistent while it is read); the snapshot goes back to the thread as JSON and out to
every connected viewer, one line each. Only the same user can attach: the socket lives
in a per-user directory (`$XDG_RUNTIME_DIR/harness`, else `/tmp/harness-UID`, mode
0700, refused if another user owns it) and is itself mode 0600.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import stat
import threading
import time
from pathlib import Path
from typing import IO, Any

from harness.guest import GuestError
from harness.guest.aiservice import ServiceReader
from harness.monitor.counters import Counters

PERIOD_S = 0.2     # five snapshots a second


def runtime_dir() -> Path:
    """The per-user directory of monitor sockets (created, checked to be ours, 0700)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = Path(base) / "harness" if base else Path(f"/tmp/harness-{os.getuid()}")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{d} is not a directory of this user: refusing to use it")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


class Monitor:
    """Snapshots of `machine`'s AI service every `period` s while it runs."""

    def __init__(self, machine: Any, *, period: float = PERIOD_S, record: Path | None = None,
                 serve: bool = True, reader: ServiceReader | None = None,
                 append: bool = False) -> None:
        from harness.machine.guest_view import machine_guest
        from harness.run.launch import ai_device

        self.machine, self.period = machine, period
        self.reader = reader or ServiceReader(machine_guest(machine), ai_device(machine))
        self.counters = Counters()
        self.snapshots = 0
        self.snap_s = 0.0   # emulation-thread time spent taking snapshots
        self.error = ""
        self._out: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._record: IO[str] | None = open(record, "a" if append else "w") if record else None  # noqa: SIM115
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self.path: Path | None = None
        self._server: socket.socket | None = None
        if serve:
            self.path = runtime_dir() / f"run-{os.getpid()}.sock"
            self.path.unlink(missing_ok=True)
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                srv.bind(str(self.path))
            finally:
                os.umask(old)
            os.chmod(self.path, 0o600)
            srv.listen(4)
            self._server = srv
            threading.Thread(target=self._accept, name="monitor-accept", daemon=True).start()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ emulation thread
    def snap(self) -> None:
        """Take one snapshot (runs on the emulation thread, between run slices)."""
        t0 = time.perf_counter()
        try:
            s = self.counters.feed(self.reader.take())
        except Exception as exc:  # a monitor must never stop the machine
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self.snapshots += 1
        self._out.put(json.dumps(s, separators=(",", ":")))
        self.snap_s += time.perf_counter() - t0

    # ------------------------------------------------------------ host threads
    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.machine.post(self.snap)
            self._drain()
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                line = self._out.get_nowait()
            except queue.Empty:
                return
            if line is None:
                return
            self._send(line)

    def _send(self, line: str) -> None:
        if self._record is not None:
            self._record.write(line + "\n")
            self._record.flush()
        data = (line + "\n").encode()
        with self._lock:
            for c in list(self._clients):
                try:
                    c.sendall(data)
                except OSError:
                    self._clients.remove(c)
                    c.close()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stop.is_set():
            try:
                c, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._clients.append(c)

    def close(self, final: bool = True) -> None:
        """Stop; with `final`, one last snapshot now (call on the emulation thread, or
        after the machine stopped running)."""
        if final and not self._stop.is_set():
            self.snap()
        self._stop.set()
        self._thread.join(timeout=2 * self.period + 1)
        self._drain()
        if self._server is not None:
            self._server.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        with self._lock:
            for c in self._clients:
                c.close()
            self._clients.clear()
        if self._record is not None:
            self._record.close()
            self._record = None


def attach_monitor(*, record: Path | None, quiet: bool):
    """For harness run --monitor: a `console_boot` attach hook that starts a Monitor on
    each boot (announcing its socket; inside tmux, opening `harness top` on it in a
    split pane beside the console) and returns its closer."""
    import shutil
    import subprocess
    import sys

    import click

    boots = [0]

    def attach(machine: Any):
        boots[0] += 1
        try:
            mon = Monitor(machine, record=record, append=boots[0] > 1)
        except (GuestError, OSError) as exc:  # the run goes on unwatched
            click.echo(f"[harness] monitor: not started ({exc})", err=True)
            return lambda: None
        if not quiet:
            click.echo(f"[harness] monitor: harness top {mon.path}", err=True)
        if boots[0] == 1 and os.environ.get("TMUX") and shutil.which("tmux"):
            cmd = f"{sys.executable} -m harness top {mon.path}"
            subprocess.run(["tmux", "split-window", "-h", "-d", "-c", os.getcwd(), cmd],
                           check=False)
        return mon.close

    return attach


def newest_socket() -> Path | None:
    """The most recent monitor socket of this user that a machine still serves."""
    socks = sorted(runtime_dir().glob("run-*.sock"), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    for p in socks:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    return None
