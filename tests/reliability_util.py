"""Shared by tests/test_reliability_*.py: the build check, the tiny model, scratch images."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.disk.fsbuild import build_image

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
UBUILD = ROOT / "build" / "user"
FS_IMG = ROOT / "build" / "fs.img"
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"


def require_build(*progs: str) -> None:
    missing = [p for p in [KERNEL, FS_IMG, *(UBUILD / f"_{n}" for n in progs)] if not p.exists()]
    if missing:
        pytest.skip(f"{missing[0].relative_to(ROOT)} is not built (run make build)")


def load_tiny(prog: str) -> Iterator[Any]:
    """The tiny Qwen3.5 test model on the AI device (a LoadedModel), for a module's fixture;
    skips when prog or the kernel is not built."""
    require_build(prog)
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load(str(TINY))
    yield lm
    lm.close()


def aliases() -> dict[str, str]:
    """UPROG_ALIASES of user_c/user.mk (ALIAS=PROG)."""
    text = (ROOT / "user_c" / "user.mk").read_text().replace("\\\n", " ")
    m = re.search(r"^UPROG_ALIASES\s*:?=(.*)$", text, re.M)
    return dict(a.split("=", 1) for a in m.group(1).split()) if m else {}


def image_without_daemon(out: Path) -> Path:
    """build/user's programs without /ai_daemon: init starts no worker, so the guest's own
    processes can register as workers."""
    files: dict[str, str | Path | bytes] = {p.name[1:]: p for p in UBUILD.glob("_*")
                                            if p.is_file()}
    for alias, prog in aliases().items():
        if (UBUILD / f"_{prog}").exists():
            files[alias] = UBUILD / f"_{prog}"
    files.pop("ai_daemon", None)
    files.pop("ai_worker", None)
    img = out / "nodaemon.img"
    build_image(img, files, size_blocks=8192, ninodes=512)
    return img
