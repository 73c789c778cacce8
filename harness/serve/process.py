"""`harness serve` in a child process, for tests and benchmarks: start it, read the URL it
announces, stop it.

    with ServerProcess("smol", max_waiting=4) as srv:
        openai.OpenAI(base_url=srv.url, api_key="none")

The child is `python -m harness serve --port 0` (a free port); it prints
`serving NAME at http://HOST:PORT/v1` once the model is loaded and the socket listens, so the
URL is usable as soon as it is read; it gets SIGTERM if this process dies. Its stderr
(uvicorn's log, tracebacks) goes to a temporary file that `log()` returns, and that a failed
start quotes.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

URL_LINE = re.compile(r"serving (\S+) at (http://\S+/v1)\s*$")


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux), so a killed test run
    leaves no server behind. (Linux sends it when the thread that started the child ends:
    start a ServerProcess from a thread that outlives it, e.g. the main thread.)"""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ServerError(RuntimeError):
    """The server did not start (its exit status and the end of its log are in the message)."""


class ServerProcess:
    """A `harness serve` child process; see the module docstring."""

    def __init__(self, model: str = "smol", *, max_waiting: int | None = None,
                 args: tuple[str, ...] = (), host: str = "127.0.0.1",
                 timeout_s: float = 300.0, cwd: str | os.PathLike[str] | None = None) -> None:
        cmd = [sys.executable, "-m", "harness", "serve", "--model", model, "--host", host,
               "--port", "0", *args]
        if max_waiting is not None:
            cmd += ["--max-waiting", str(max_waiting)]
        self._log = tempfile.NamedTemporaryFile(prefix="harness-serve-", suffix=".log",
                                                delete=False)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     cwd=cwd, preexec_fn=_die_with_parent)
        self.model, self.url = self._wait_url(timeout_s)

    @property
    def root(self) -> str:
        """The server without /v1 (for /health, /metrics, /tokenize)."""
        return self.url.removesuffix("/v1")

    def _wait_url(self, timeout_s: float) -> tuple[str, str]:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    break
                line = self.proc.stdout.readline()
                if not line:  # exited
                    break
                m = URL_LINE.search(line)
                if m:
                    return m.group(1), m.group(2)
        finally:
            sel.close()
        self.close()
        raise ServerError(f"harness serve did not start (status {self.proc.returncode}): "
                          f"{self.log()[-2000:]}")

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_s`)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        Path(self._log.name).unlink(missing_ok=True)
