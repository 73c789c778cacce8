"""Repacked matrices kept on disk, so the next load maps them instead of repacking
(Qwen3.5-0.8B: ~0.8 GB quantized once; SmolLM2: 0.1 GB of Q4X16 records).

File: `<cache dir>/<name>-<key>.<records>.safetensors`, a safetensors file of U8 tensors
(one per fused matrix, 64-byte aligned). `name` says whose it is (model family and a tag of
the checkpoint's path); the key covers the checkpoint's identity (its headers, sizes and
mtimes, given by the model) and the record format (quant.h's record size and a hash of the
repacking sources), so a changed checkpoint or format gets a new file. Older files of the
same name are deleted when one is written.

A first load does not wait for the file: `save` hands the arrays to a thread that writes it
(a temporary name, renamed when complete) while the model runs; the interpreter waits for it
at exit, and a second load of the same checkpoint in the process waits for it before looking.
Written before returning, it took as long as the repack itself (SmolLM2 Q4_1: 0.09 s each). A
temporary file left by a process killed while writing is removed by the next load of the model.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from pyllm.errors import PyllmError

FORMAT = "q8x16-v3"  # bump when the records or the file layout change
_writing: dict[Path, threading.Thread] = {}  # cache files being written, by path


class RepackCache:
    """The repacked matrices of one checkpoint: `get` what the file has, `put` what was
    repacked, `save` once every matrix is built."""

    def __init__(self, key: str, name: str, folder: Path, records: str = "q8x16") -> None:
        self.folder, self.name, self.records = folder, name, records
        self.path = folder / f"{name}-{_format_key(FORMAT + key)}.{records}.safetensors"
        self.file = None
        self.arrays: dict[str, np.ndarray] = {}  # every matrix, mapped or freshly packed
        self.fresh = False  # some matrix was not in the file: write a new one
        pending = _writing.get(self.path)
        if pending is not None:  # this process is still writing it
            pending.join()
        _remove_orphans(folder, name)
        if self.path.exists():
            from pyllm.loaders.safetensors import SafetensorsFile

            try:
                f = SafetensorsFile(self.path)
                if f.metadata.get("format") == FORMAT:
                    self.file = f
                    f.advise_willneed()
            except PyllmError:
                self.file = None  # damaged: rebuild it

    def get(self, name: str, nbytes: int) -> np.ndarray | None:
        if self.file is None or name not in self.file.tensors:
            return None
        arr = self.file.raw(name)
        if arr.nbytes != nbytes or arr.ctypes.data % 64:
            return None
        self.arrays[name] = arr
        return arr

    def put(self, name: str, data: np.ndarray) -> None:
        self.arrays[name] = data
        self.fresh = True

    @property
    def status(self) -> str:
        return "miss" if self.fresh else "hit" if self.file is not None else "empty"

    def save(self) -> None:
        """After loading: start writing the file if anything was repacked (`wait_for_writes`
        joins it), else fault the mapped file in (so load time covers the whole read)."""
        if not self.fresh:
            if self.file is not None:
                self.file.populate()
            return
        writer = threading.Thread(target=self._write, args=(dict(self.arrays),),
                                  name=f"repack-cache {self.path.name}")
        _writing[self.path] = writer
        writer.start()

    def _write(self, arrays: dict[str, np.ndarray]) -> None:
        """Write the file atomically (a temporary name, then rename); failures only warn."""
        import warnings

        from pyllm.loaders.safetensors import SafetensorsWriter

        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            specs = [(n, "U8", a.shape) for n, a in arrays.items()]
            with SafetensorsWriter(tmp, specs, {"format": FORMAT}, align=64) as w:
                for n, a in arrays.items():
                    w.write(n, a)
            os.replace(tmp, self.path)
            for old in self.folder.glob(f"{self.name}-*.{self.records}.safetensors"):
                if old != self.path:
                    old.unlink(missing_ok=True)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            warnings.warn(f"could not write the repack cache {self.path}: {exc}", stacklevel=2)
        finally:
            if _writing.get(self.path) is threading.current_thread():
                del _writing[self.path]


def _remove_orphans(folder: Path, name: str) -> None:
    """Temporary cache files of `name` whose writing process is gone (`.tmp<pid>.<thread>`)."""
    for tmp in folder.glob(f"{name}-*.safetensors.tmp*"):
        pid = tmp.name.rsplit(".tmp", 1)[1].split(".")[0]
        try:
            os.kill(int(pid), 0)
        except (ValueError, ProcessLookupError):
            tmp.unlink(missing_ok=True)
        except PermissionError:  # alive, and another user's
            pass


def wait_for_writes() -> None:
    """Until every cache file this process started writing is in place (or failed)."""
    for writer in list(_writing.values()):
        writer.join()


def _format_key(base: str) -> str:
    """Fold the record format into a cache key: record sizes and the repacking sources."""
    import hashlib

    from pyllm.kernels import c_kernels

    h = hashlib.sha256(base.encode())
    nat = c_kernels()
    if nat is not None:
        lib = nat[1]
        h.update(f"{lib.PYLLM_Q4X16_RECORD} {lib.PYLLM_Q8X16_QS} {lib.PYLLM_Q8X16_SCALES}".encode())
    kernels = Path(__file__).resolve().parent.parent / "kernels"
    for src in [kernels / n for n in ("quant.h", "quant.c", "kquant.h", "kquant.c")] + \
            [Path(__file__).with_name("records.py")]:
        if src.exists():
            h.update(src.read_bytes())
    return h.hexdigest()[:24]
