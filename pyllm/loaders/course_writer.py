"""Writing an OS course asset folder, into a zip or a folder, atomically, with large files
split into chunk directories as the course runtime reads them (pyllm/export.py fills it).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Piece = bytes | np.ndarray


class AssetWriter:
    """Writes an asset folder into a zip (members `<root>/NAME`) or a folder, atomically:
    everything goes to a temporary path that `commit()` renames to `out`. A file larger
    than `chunk_size` bytes (0 = never) becomes a directory of chunks 00000, 00001, ...

        with AssetWriter(out, "SMOL", chunk_size) as w:
            w.add("CFG.BIN", [cfg_bytes]); ...
            w.close_files(); (read w.tmp back); w.reopen(); w.add("EXP.BIN", ...)
            w.commit()
    """

    def __init__(self, out: Path, root: str, chunk_size: int = 0, compress: bool = False,
                 progress: Callable[[int], Any] | None = None) -> None:
        self.out, self.root, self.chunk_size = Path(out), root, chunk_size
        self.zip = self.out.suffix.lower() == ".zip"
        self.compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        self.progress = progress
        self.tmp = self.out.with_name(f".{self.out.name}.tmp{os.getpid()}")
        self.written: dict[str, int] = {}  # name -> bytes
        self.chunked: dict[str, int] = {}  # name -> chunks
        self._zf: zipfile.ZipFile | None = None
        self._remove_tmp()
        self.reopen()

    def _remove_tmp(self) -> None:
        if self.tmp.is_dir():
            shutil.rmtree(self.tmp)
        else:
            self.tmp.unlink(missing_ok=True)

    def reopen(self) -> None:
        """(Re)open the temporary output for adding files."""
        if self.zip:
            mode = "a" if self.tmp.exists() else "w"
            self._zf = zipfile.ZipFile(self.tmp, mode, self.compression, allowZip64=True)
            if mode == "w" and self.root:
                self._zf.writestr(zipfile.ZipInfo(self.root + "/", (2026, 1, 1, 0, 0, 0)), b"")
        else:
            self.tmp.mkdir(parents=True, exist_ok=True)

    def close_files(self) -> None:
        """Finish the temporary output so it can be read back (the zip's directory)."""
        if self._zf is not None:
            self._zf.close()
            self._zf = None

    @property
    def asset_path(self) -> Path:
        """Where the assets can be read back from before commit()."""
        return self.tmp

    def add(self, name: str, pieces: list[Piece]) -> None:
        total = sum(memoryview(p).nbytes for p in pieces)
        if self.chunk_size and total > self.chunk_size:
            chunks = self._split(pieces, self.chunk_size)
            for i, chunk in enumerate(chunks):
                self._put(f"{name}/{i:05d}", chunk)
            self.chunked[name] = len(chunks)
        else:
            self._put(name, pieces)
        self.written[name] = total

    @staticmethod
    def _split(pieces: list[Piece], size: int) -> list[list[Piece]]:
        out: list[list[Piece]] = [[]]
        room = size
        for p in pieces:
            mv = memoryview(p).cast("B")
            while len(mv):
                if room == 0:
                    out.append([])
                    room = size
                take = mv[:room]
                out[-1].append(take)
                mv, room = mv[len(take):], room - len(take)
        return out

    def _put(self, rel: str, pieces: list[Piece]) -> None:
        if self._zf is not None:
            size = sum(memoryview(p).nbytes for p in pieces)
            info = zipfile.ZipInfo(f"{self.root}/{rel}" if self.root else rel,
                                   date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = self.compression
            info.external_attr = 0o644 << 16
            info.file_size = size
            with self._zf.open(info, "w", force_zip64=size >= 1 << 31) as f:
                for p in pieces:
                    f.write(memoryview(p).cast("B"))
                    if self.progress:
                        self.progress(memoryview(p).nbytes)
        else:
            dst = self.tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(dst, "wb") as f:
                for p in pieces:
                    f.write(memoryview(p).cast("B"))
                    if self.progress:
                        self.progress(memoryview(p).nbytes)

    def commit(self) -> Path:
        """Rename the finished output to `out` (replacing an older one)."""
        self.close_files()
        if self.out.is_dir() and not self.zip:
            old = self.out.with_name(f".{self.out.name}.old{os.getpid()}")
            os.replace(self.out, old)
            os.replace(self.tmp, self.out)
            shutil.rmtree(old)
        else:
            os.replace(self.tmp, self.out)
        return self.out

    def abort(self) -> None:
        self.close_files()
        self._remove_tmp()

    def __enter__(self) -> AssetWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None or self.tmp.exists():
            self.abort()
