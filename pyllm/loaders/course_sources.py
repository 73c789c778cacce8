"""Where the bytes of the OS course's assets come from: an asset folder on disk or inside a
zip, found from a path, each file read as the course runtime's load_file reads it.

`find_source(path)` accepts a folder holding CFG.BIN or EMB.BIN (`SMOL/`, `QWEN/`), a folder
with exactly one such sub-folder, or a zip holding one (`smol.zip` -> `SMOL/...`). Any file
may instead be a directory of chunks `00000`, `00001`, ... read in order (`AssetSource.load`).
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from pyllm.loaders.course_config import CourseFormatError


class AssetSource:
    """One asset folder, on disk or inside a zip: `load(name)` is the runtime's load_file
    (a file, or a directory of chunks), returning uint8 bytes (mapped when possible)."""

    where: str  # display name used in errors: "/x/SMOL" or "/x/smol.zip:SMOL"
    root_name: str  # the folder's own name ("SMOL"), "" at the top of a zip

    def stat(self, name: str) -> str | None:
        """'file', 'dir', 'other' or None (absent)."""
        raise NotImplementedError

    def entries(self, name: str) -> list[str]:
        """Names directly inside directory `name`."""
        raise NotImplementedError

    def read_file(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def load(self, name: str, log: list[str]) -> np.ndarray | None:
        kind = self.stat(name)
        if kind is None:
            return None
        if kind == "file":
            return self.read_file(name)
        if kind != "dir":
            raise CourseFormatError(self.where, f"unsupported asset type for {name}")
        chunks = []
        while True:
            path = f"{name}/{len(chunks):05d}"
            k = self.stat(path)
            if k is None:
                break
            if k != "file":
                raise CourseFormatError(self.where, f"chunk {path} is not a file")
            chunks.append(path)
        # the runtime stops at the first gap; a numbered chunk after it means a lost one
        later = [e for e in self.entries(name) if e.isdigit() and int(e) > len(chunks)]
        if later:
            raise CourseFormatError(self.where, f"missing chunk {name}/{len(chunks):05d}")
        if not chunks:
            return None
        parts = [self.read_file(c) for c in chunks]
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            log.append(f"loaded {name} from {len(parts)} chunks ({out.nbytes} bytes)")
        return out


class DirSource(AssetSource):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)
        self.root_name = root.name

    def stat(self, name: str) -> str | None:
        p = self.root / name
        if not p.exists():
            return None
        return "file" if p.is_file() else "dir" if p.is_dir() else "other"

    def entries(self, name: str) -> list[str]:
        return [p.name for p in (self.root / name).iterdir()]

    def read_file(self, name: str) -> np.ndarray:
        p = self.root / name
        try:
            if p.stat().st_size == 0:
                return np.zeros(0, np.uint8)
            return np.memmap(p, np.uint8, mode="r")
        except (OSError, ValueError):
            raise CourseFormatError(self.where, f"failed to open {name}") from None


class ZipSource(AssetSource):
    """Members under `prefix` of a zip; stored members are mapped (CRC-checked), deflated
    ones read into memory."""

    def __init__(self, path: Path, zf: zipfile.ZipFile, prefix: str) -> None:
        self.path, self.zf, self.prefix = path, zf, prefix
        self.root_name = prefix.rstrip("/").rsplit("/", 1)[-1]
        self.where = f"{path}:{self.root_name}" if self.root_name else str(path)
        self.files: dict[str, zipfile.ZipInfo] = {}
        self.dirs: set[str] = set()
        for info in zf.infolist():
            if not info.filename.startswith(prefix):
                continue
            rel = info.filename[len(prefix):]
            if not rel:
                continue
            parts = rel.rstrip("/").split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
            if info.is_dir():
                self.dirs.add(rel.rstrip("/"))
            else:
                self.files[rel] = info

    def stat(self, name: str) -> str | None:
        return "file" if name in self.files else "dir" if name in self.dirs else None

    def entries(self, name: str) -> list[str]:
        pre = name + "/" if name else ""
        names = {n[len(pre):].split("/")[0] for n in (*self.files, *self.dirs)
                 if n.startswith(pre)}
        return sorted(names)

    def read_file(self, name: str) -> np.ndarray:
        info = self.files[name]
        try:
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                off = self._data_offset(info)
                if info.file_size == 0:
                    return np.zeros(0, np.uint8)
                data = np.memmap(self.path, np.uint8, mode="r", offset=off,
                                 shape=(info.file_size,))
                if zlib.crc32(data) != info.CRC:
                    raise zipfile.BadZipFile("CRC mismatch")
                return data
            return np.frombuffer(self.zf.read(info), np.uint8)
        except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise CourseFormatError(self.where, f"failed to read {name} ({exc}: the archive "
                                    "is damaged)") from None

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            head = f.read(30)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile("bad local header")
            n, m = struct.unpack_from("<HH", head, 26)
            off = info.header_offset + 30 + n + m
            if off + info.file_size > os.fstat(f.fileno()).st_size:
                raise zipfile.BadZipFile("member runs past the end of the file")
            return off

    def close(self) -> None:
        self.zf.close()


MARKERS = ("CFG.BIN", "EMB.BIN")  # a folder holding either is an asset folder


def _is_zip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")
    except OSError:
        return False


def find_source(path: Path) -> AssetSource | None:
    """The asset folder at `path` (a folder, a folder with one asset sub-folder, or a zip),
    or None if `path` holds no course assets. Raises CourseFormatError for an unreadable zip
    or an ambiguous one."""
    path = Path(path)
    if path.is_dir():
        if any((path / m).exists() for m in MARKERS):
            return DirSource(path)
        if (path / "config.json").exists() or any(path.glob("*.gguf")):
            return None  # our own formats' folders
        subs = [p for p in sorted(path.iterdir()) if p.is_dir()
                and any((p / m).exists() for m in MARKERS)]
        return DirSource(subs[0]) if len(subs) == 1 else None
    if not path.is_file() or not (path.suffix.lower() == ".zip" or _is_zip(path)):
        return None
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise CourseFormatError(str(path), f"not a readable zip archive ({exc})") from None
    roots = set()
    for n in zf.namelist():  # SMOL/CFG.BIN, SMOL/EMB.BIN/00000, or CFG.BIN at the top
        parts = n.split("/")
        for i, part in enumerate(parts):
            if part in MARKERS:
                roots.add("/".join(parts[:i]) + "/" if i else "")
                break
    roots = sorted(roots)
    if not roots:
        zf.close()
        raise CourseFormatError(str(path), "no course assets in this zip (expected "
                                "<MODEL>/CFG.BIN or <MODEL>/EMB.BIN, e.g. SMOL/CFG.BIN)")
    if len(roots) > 1:
        want = path.stem.upper() + "/"
        pick = [r for r in roots if r.upper().endswith(want)]
        if len(pick) != 1:
            zf.close()
            shown = ", ".join(r.rstrip("/") or "(top level)" for r in roots)
            raise CourseFormatError(str(path), f"several asset folders in this zip ({shown}); "
                                    "extract one and load that folder")
        roots = pick
    return ZipSource(path, zf, roots[0])

