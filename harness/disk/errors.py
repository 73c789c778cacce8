"""The one error the disk testers raise when they cannot test (an unreadable image, a
workload that fails before any crash point, a crash point that does not exist); the
command line prints its message and exits 1."""

from __future__ import annotations


class DiskTestError(RuntimeError):
    """A disk test could not run; the message says why."""
