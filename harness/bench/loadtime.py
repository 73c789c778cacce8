"""Model Loading Time, cold and warm, each in a fresh process (what a booting device sees).

One load = `pyllm.registry.load(spec)` timed in a new Python process (the call the AI device
makes at boot; metrics.METRICS["load"]). The model's builder module and the C kernels are
imported before the clock starts, so the time is the weights' alone. The files a load reads
are the model's own files plus every regular file the loaded process has mapped (the repack
cache under models/.cache); the first, untimed load of a model finds them and also makes
sure the repack cache exists, so every timed load does the same work.

Cold = the page cache of those files is dropped first:
  * `fadvise`: posix_fadvise(POSIX_FADV_DONTNEED) on each file (after fdatasync), which
    evicts clean pages nobody has mapped: targeted, harmless to other users of the machine;
  * `drop_caches`: `sync; echo 1 > /proc/sys/vm/drop_caches` (root only): the whole page
    cache of the machine, which slows every other user of it; only on request
    (`--cold drop_caches`). It would not help where fadvise fails anyway: pages another
    process has mapped stay resident under both.
The resident fraction just before each cold load is measured with mincore(2) and reported
(a cold sample with more than 2 % still resident is flagged), so "cold" is checked, not
assumed. Warm = right after another load of the same files.
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESIDENT_OK = 0.02  # cold if at most this fraction of the bytes is still cached

CHILD = r"""
import json, os, sys, time
import pyllm.registry as registry
spec = sys.argv[1]
# the code is not the weights: import the builder and the C kernels before the clock starts
_, path = registry.resolve(spec)
registry.builder(*registry.detect(path), path)
from pyllm.kernels import c_kernels
c_kernels()
t0 = time.perf_counter()
model = registry.load(spec)
load_s = time.perf_counter() - t0
files = set()
p = os.path.realpath(path)
if os.path.isdir(p):
    for d, _, names in os.walk(p):
        files.update(os.path.join(d, n) for n in names)
else:
    files.add(p)
for line in open("/proc/self/maps"):
    parts = line.split(maxsplit=5)
    if len(parts) == 6 and parts[5].startswith("/"):
        f = parts[5].strip()
        if ".so" not in os.path.basename(f) and not f.startswith(("/usr/", "/lib", sys.prefix,
                                                                   sys.base_prefix)) \
                and os.path.isfile(f):
            files.add(os.path.realpath(f))
info = model.info
print(json.dumps({"load_s": load_s, "files": sorted(files),
                  "repack_cache": info.extra.get("repack_cache", "off"),
                  "repack_s": info.extra.get("repack_s", 0.0),
                  "label": info.label, "synthetic": info.synthetic}))
"""


@dataclass
class LoadSample:
    kind: str  # "cold" | "warm" | "first"
    seconds: float
    resident_before: float  # fraction of the files' bytes in the page cache before the load
    resident_after: float  # ... and after it (cold: what the load read, readahead included)
    method: str  # how the cache was dropped ("" for warm)
    repack_cache: str  # "hit" | "miss" | "empty" | "off"
    foreign_cores: float  # CPU other processes used meanwhile
    repack_s: float = 0.0  # of `seconds`: the one-time int8 repack (0: its cache was mapped)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadResult:
    spec: str
    files: list[str] = field(default_factory=list)
    file_bytes: int = 0
    samples: list[LoadSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mapped_by: list[str] = field(default_factory=list)  # "pid (command)" that kept it cached

    def seconds(self, kind: str) -> list[float]:
        return [s.seconds for s in self.samples if s.kind == kind]

    def as_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "files": self.files, "file_bytes": self.file_bytes,
                "samples": [s.as_dict() for s in self.samples], "notes": self.notes,
                "mapped_by": self.mapped_by}


# ---------------------------------------------------------------- page cache

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_bytes(path: str) -> tuple[int, int]:
    """(bytes of `path` in the page cache, file size), by mincore(2) on a fresh mapping
    (mapping a file does not read it)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return 0, size
        try:
            npages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * npages)()
            if _libc.mincore(addr, size, vec) != 0:
                return 0, size
            return sum(b & 1 for b in vec) * page, size
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(files: list[str]) -> float:
    res = tot = 0
    for f in files:
        r, s = resident_bytes(f)
        res, tot = res + min(r, s), tot + s
    return res / tot if tot else 0.0


def fadvise_dontneed(files: list[str]) -> None:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            try:
                os.fdatasync(fd)  # dirty pages cannot be dropped
            except OSError:
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def mapped_by(files: list[str]) -> list[str]:
    """"pid (command)" of every other process that has one of `files` mapped: their pages
    stay in the page cache whatever we do."""
    want = set(files)
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        if d.name == str(os.getpid()):
            continue
        try:
            maps = (d / "maps").read_text()
        except OSError:
            continue
        if any(line.rsplit(None, 1)[-1] in want for line in maps.splitlines() if "/" in line):
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                cmd = "?"
            out.append(f"{d.name} ({cmd[:80]})")
    return out


def can_drop_caches() -> bool:
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def make_cold(files: list[str], method: str) -> tuple[str, float]:
    """Drop the files from the page cache; (method used, resident fraction after)."""
    if method == "drop_caches":
        if not can_drop_caches():
            raise PermissionError("--cold drop_caches needs root (write /proc/sys/vm/drop_caches)")
        drop_caches()
        return "drop_caches", resident_fraction(files)
    fadvise_dontneed(files)
    return "fadvise", resident_fraction(files)


# ---------------------------------------------------------------- loads

def _child_load(spec: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", CHILD, spec], cwd=ROOT, capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"loading {spec} in a fresh process failed: {tail}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def prepare(spec: str) -> tuple[LoadResult, LoadSample]:
    """The untimed first load: which files a load reads (and a repack cache written if it was
    missing). Returns the result to fill and that first load as a 'first' sample."""
    from pyllm.enginebench import CpuWatch

    with CpuWatch() as w:
        d = _child_load(spec)
    res = LoadResult(spec, d["files"], sum(os.path.getsize(f) for f in d["files"]))
    first = LoadSample("first", d["load_s"], math.nan, resident_fraction(res.files), "",
                       d["repack_cache"], w.foreign, d["repack_s"])
    return res, first


def measure(res: LoadResult, kind: str, method: str = "fadvise") -> LoadSample:
    """One timed load in a fresh process: cold (cache dropped with `method`) or warm."""
    from pyllm.enginebench import CpuWatch

    used = ""
    if kind == "cold":
        used, _ = make_cold(res.files, method)
    before = resident_fraction(res.files)
    if kind == "cold" and before > RESIDENT_OK:
        who = mapped_by(res.files)
        res.mapped_by = list(dict.fromkeys(res.mapped_by + who))
        res.notes.append(f"cold load with {before:.0%} of the files still cached"
                         + (f": mapped by {', '.join(who)}" if who else ""))
    with CpuWatch() as w:
        d = _child_load(res.spec)
    s = LoadSample(kind, d["load_s"], before, resident_fraction(res.files), used,
                   d["repack_cache"], w.foreign, d["repack_s"])
    res.samples.append(s)
    return s
