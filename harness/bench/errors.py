"""The one error a benchmark raises when it cannot measure (a failed guest run, a missing
model or tool); the command line prints its message and exits 1."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A benchmark could not run; the message says why and what to do."""
