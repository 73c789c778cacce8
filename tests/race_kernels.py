"""Broken kernels for the race detectors' tests: the real kernel_c/ sources with one
change each, built by the project's own kernel.mk into build/race-kernels/ (cached by
the change and the sources' contents).

Each `Variant` names its edits (a text in a file replaced by another); `line_of` finds
the line a report must name by a text on it, after the edit, so the expected
`file:line` follows the source as it is.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "kernel_c"
OUT = ROOT / "build" / "race-kernels"


@dataclass(frozen=True)
class Variant:
    name: str
    edits: tuple[tuple[str, str, str], ...]  # (file in kernel_c/, old text, new text),
    #                                          each old text found exactly once


def _digest(v: Variant) -> str:
    h = hashlib.sha256(repr(v).encode())
    for p in sorted(SRC.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:12]


def build(v: Variant) -> Path:
    """The variant's kernel.elf (built once per change and source state)."""
    d = OUT / f"{v.name}-{_digest(v)}"
    elf = d / "build" / "kernel" / "kernel.elf"
    if elf.is_file():
        return elf
    src = d / "kernel_c"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(SRC, src)
    for file, old, new in v.edits:
        path = src / file
        text = path.read_text()
        assert text.count(old) == 1, f"{v.name}: {old!r} is not once in {file}"
        path.write_text(text.replace(old, new))
    subprocess.run(["make", "-s", f"BUILD={d / 'build'}", f"KSRC={src}", str(elf)],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    return elf


def line_of(v: Variant, file: str, text: str) -> int:
    """The line (1-based) of `text` in the variant's `file`."""
    src = next(OUT.glob(f"{v.name}-{_digest(v)}")) / "kernel_c" / file
    for i, line in enumerate(src.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {file}")
