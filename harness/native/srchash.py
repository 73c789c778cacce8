"""Fingerprint of the C sources (apart from build.py, which imports cffi's builder)."""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def source_hash() -> str:
    """Hash of every .c/.h file here; compiled into the module to detect a stale build."""
    h = hashlib.sha256()
    for p in sorted(HERE.glob("*.c")) + sorted(HERE.glob("*.h")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]
