"""`harness crashtest`: cut the power after every disk write of a workload, let the log
recover, and check that nothing was lost or half done.

    harness crashtest                      # 1 round of fscrash, every crash point, in order
                                           # and with the writes reordered between flushes
    harness crashtest --rounds 4 --sample 300 --seed 2     # a seeded sample of a bigger run
    harness crashtest --point 57           # one crash point again (r3:5 for a reordered one)
    harness crashtest --kill 10            # also kill -9 `harness run --persist` 10 times
    harness crashtest --procs 3            # three processes at once: group commit

How. The workload (user_c/fscrash.c) runs once on a fresh copy of the image while the disk
records every write and flush (harness/devices/virtio_blk.py, `journal`), and the console
tells which system calls had returned at each write ("@N" lines). A power cut after the
k-th write leaves the image plus the first k writes: that image is rebuilt in memory, the
kernel is booted on it (its mount runs the log's recovery, kernel_c/log.c) and runs
`ls /c`, and the disk it leaves is checked:

- the machine powered off by itself (no panic, fault or hang), and the log is empty;
- fsck-clean (harness/disk/fsimage.py check);
- the files are exactly as they were after the last transaction whose commit record (a
  log header with n > 0) reached the disk: everything a system call that had returned
  wrote is there with its content, and nothing of a transaction that had not committed.

The reference states are read off the recording itself: the image after each commit's
last write. The recording also checks that no system call returned before its commit
was complete (with --procs > 1 it need not be: in xv6's group commit a call that is not the
last of its transaction returns before the commit, so only atomicity is checked; the recording
runs with the instruction-count clock, so the processes interleave the same way every time).
Reordered: a disk may keep the writes since the last flush in any order,
or lose any of them, when the power goes. For every stretch between two flushes with two
or more writes, --reorder-samples random subsets of it (applied in a random order) are
tried on top of everything before the stretch. Identical crash images are booted once.

--kill N: the real thing, N times: `harness run --persist -c "fscrash 1000"` on a copy of
the image, killed with SIGKILL at a random moment; the image it leaves must pass the
harness's fsck (which replays a committed log, as the kernel will) and boot clean.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.devices.virtio_blk import Journal
from harness.disk.diskboot import boot_disk
from harness.disk.errors import DiskTestError
from harness.disk.fsimage import FsImage
from harness.disk.fslayout import FsError
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL

CHECK_CMD = "ls /c"
State = dict[str, tuple[int, int, bytes]]   # path -> (type, nlink, contents or b"")


@dataclass
class Recording:
    """One run of the workload with every disk write and flush."""

    base: bytes
    journal: Journal
    markers: list[int]           # journal length when "@N" was printed (N = index + 1)
    commits: list[tuple[int, int]]  # (journal index of the commit record, of its clear)
    states: list[State]          # states[0]: before; states[i]: after commit i
    output: str
    logstart_off: int            # byte offset of the log header

    @property
    def writes(self) -> list[int]:
        """Journal indices of the writes (the rest are flushes)."""
        return [i for i, e in enumerate(self.journal) if e is not None]


@dataclass
class Outcome:
    point: str
    ok: bool
    why: str = ""


@dataclass
class Report:
    in_order: int = 0
    reordered: int = 0
    booted: int = 0
    failures: list[Outcome] = field(default_factory=list)
    calls: int = 0
    writes: int = 0
    flushes: int = 0
    commits: int = 0
    seconds: float = 0.0


def fs_state(image: bytes) -> State:
    """Every path of an image with its type, link count and contents."""
    img = FsImage(image)
    out: State = {}
    for path, st in img.walk("/"):
        data = b"" if st.type == img.layout.t_dir else img.read_inode(st)
        out[path] = (st.type, st.nlink, data)
    return out


def _apply(base: bytes, writes: list[tuple[int, bytes]]) -> bytes:
    img = bytearray(base)
    for off, data in writes:
        img[off:off + len(data)] = data
    return bytes(img)


def record(rounds: int, procs: int = 1, *, kernel: Path = DEFAULT_KERNEL,
           fs: Path = DEFAULT_FS) -> Recording:
    """Run fscrash once on a copy of `fs`, recording the disk."""
    try:
        base = fs.read_bytes()
        sb = FsImage(base).sb
    except (OSError, FsError) as e:
        raise DiskTestError(f"disk image {fs}: {e}") from None
    journal: Journal = []
    markers: list[int] = []
    line = bytearray()

    def on_tx(byte: int) -> None:
        if byte == 10:
            if line.startswith(b"@"):
                markers.append(len(journal))
            line.clear()
        else:
            line.append(byte)

    b = boot_disk(base, f"fscrash {rounds} {procs}", kernel=kernel, timeout=300, journal=journal,
                  on_tx=on_tx, clock="icount")
    if not b.clean or b.status != 0 or "calls OK" not in b.output:
        raise DiskTestError(f"the workload failed ({b.exit.value}, status {b.status}):"
                                   f" {b.panic or b.message}\n{b.output[-2000:]}")
    bsize = FsImage(base).layout.bsize
    head = sb["logstart"] * bsize
    commits: list[tuple[int, int]] = []
    start = None
    for i, e in enumerate(journal):
        if e is not None and e[0] == head:
            n = int.from_bytes(e[1][:4], "little")
            if n > 0:
                start = i
            elif start is not None:
                commits.append((start, i))
                start = None
    states = [fs_state(base)]
    for _, end in commits:
        states.append(fs_state(_apply(base, [e for e in journal[:end + 1] if e is not None])))
    return Recording(base, journal, markers, commits, states, b.output, head)


def expected_state(rec: Recording, durable: list[int]) -> int:
    """Which state a crash leaves whose durable writes are these journal indices: the
    latest commit whose record reached the disk (header writes are separated by flushes,
    so at most one is in doubt)."""
    heads = [i for i in durable if rec.journal[i][0] == rec.logstart_off]  # type: ignore[index]
    if not heads:
        return 0
    last = max(heads)
    for c, (start, end) in enumerate(rec.commits):
        if last in (start, end):
            return c + 1
    raise AssertionError(f"header write {last} belongs to no commit")


def check_markers(rec: Recording) -> list[Outcome]:
    """Each system call's commit was complete when it returned."""
    bad = []
    for n, at in enumerate(rec.markers, 1):
        open_commits = [s for s, e in rec.commits if s < at <= e]
        if open_commits:
            bad.append(Outcome(f"call {n}", False, "returned before its commit was installed"))
    return bad


class Checker:
    """Boots crash images and compares them with the recording; caches by image."""

    def __init__(self, rec: Recording, kernel: Path) -> None:
        self.rec, self.kernel = rec, kernel
        self.cache: dict[bytes, str] = {}
        self.booted = 0

    def check(self, point: str, durable: list[int], order: list[int] | None = None) -> Outcome:
        rec = self.rec
        idx = order if order is not None else durable
        image = _apply(rec.base, [rec.journal[i] for i in idx])  # type: ignore[misc]
        want = expected_state(rec, durable)
        key = hashlib.sha1(image).digest() + bytes([want % 256, want // 256])
        if key not in self.cache:
            self.booted += 1
            self.cache[key] = self._verify(image, want)
        why = self.cache[key]
        return Outcome(point, not why, why)

    def _verify(self, image: bytes, want: int) -> str:
        b = boot_disk(image, CHECK_CMD, kernel=self.kernel, timeout=60)
        if not b.clean:
            return f"{b.exit.value}: {b.panic or b.message}"
        try:
            img = FsImage(bytes(b.disk))
            if img.pending:
                return "the log still holds a transaction after recovery"
            problems = img.check()
            if problems:
                return f"fsck: {problems[0]} ({len(problems)} problems)"
            got = fs_state(bytes(b.disk))
        except FsError as e:
            return f"unreadable after recovery: {e}"
        ref = self.rec.states[want]
        if got != ref:
            diff = sorted(set(got.items()) ^ set(ref.items()))[:1]
            path = diff[0][0] if diff else "?"
            return (f"not the state after commit {want}: {path} differs "
                    f"({'missing' if path not in got else 'extra or changed'})")
        return ""


def epochs(rec: Recording) -> list[list[int]]:
    """Runs of write indices between flushes."""
    out: list[list[int]] = [[]]
    for i, e in enumerate(rec.journal):
        if e is None:
            out.append([])
        else:
            out[-1].append(i)
    return [ep for ep in out if ep]


def run_crashtest(*, rounds: int = 1, procs: int = 1, sample: int = 0, reorder_samples: int = 4,
                  reorder: bool = True, seed: int = 1, point: str | None = None,
                  kernel: Path = DEFAULT_KERNEL, fs: Path = DEFAULT_FS,
                  ignore_flushes: bool = False, progress: bool = False) -> Report:
    """Record the workload, then try its crash points; see the module docstring.
    `ignore_flushes`: treat the disk as if the driver had issued no flushes (the whole
    run is one stretch a reordering disk may shuffle): the log cannot survive that, which
    shows the checker catches a broken commit protocol."""
    t0 = time.perf_counter()
    rec = record(rounds, procs, kernel=kernel, fs=fs)
    if ignore_flushes:
        kept = [0]      # writes before each journal position
        for e in rec.journal:
            kept.append(kept[-1] + (e is not None))
        rec.markers = [kept[m] for m in rec.markers]
        rec.journal = [e for e in rec.journal if e is not None]
        rec.commits = _renumber(rec)
    rng = random.Random(seed)
    writes = rec.writes
    chk = Checker(rec, kernel)
    rep = Report(calls=len(rec.markers), writes=len(writes),
                 flushes=len(rec.journal) - len(writes), commits=len(rec.commits))
    if procs == 1:
        rep.failures += check_markers(rec)

    ks = list(range(len(writes) + 1))
    if sample and sample < len(ks):
        ks = sorted(rng.sample(ks, sample))
    eps = epochs(rec)
    jobs: list[tuple[str, list[int], list[int] | None]] = []
    if point is not None:
        jobs.append(_point_job(point, writes, eps, seed))
    else:
        jobs += [(str(k), writes[:k], None) for k in ks]
        if reorder:
            for e, ep in enumerate(eps):
                if len(ep) < 2:
                    continue
                for _ in range(reorder_samples):
                    mask = rng.getrandbits(len(ep)) or 1
                    jobs.append(_reorder_job(e, mask, eps, seed))
    for n, (name, durable, order) in enumerate(jobs):
        out = chk.check(name, durable, order)
        if name.startswith("r"):
            rep.reordered += 1
        else:
            rep.in_order += 1
        if not out.ok:
            rep.failures.append(out)
        if progress and n % 50 == 49:
            print(f"  {n + 1}/{len(jobs)} crash points, {len(rep.failures)} failures",
                  file=sys.stderr)
    rep.booted = chk.booted
    rep.seconds = time.perf_counter() - t0
    return rep


def kill_runs(n: int, *, seed: int = 1, kernel: Path = DEFAULT_KERNEL,
              fs: Path = DEFAULT_FS) -> tuple[int, int, list[Outcome]]:
    """kill -9 `harness run --persist` n times at random moments; returns (runs killed
    before they finished, images left with a committed transaction in the log, failures)."""
    rng = random.Random(f"kill:{seed}")
    killed, pending, bad = 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp) / "persist.img"
        for i in range(n):
            shutil.copyfile(fs, img)
            p = subprocess.Popen([sys.executable, "-m", "harness", "run", "--persist", "-q",
                                  "--kernel", str(kernel), "--fs", str(img), "-c",
                                  "fscrash 1000"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                p.wait(rng.uniform(0.5, 6.0))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                killed += 1
            data = img.read_bytes()
            try:
                pending += bool(FsImage(data).pending)
            except FsError:
                pass
            why = _check_left(data)
            if why:
                bad.append(Outcome(f"kill {i}", False, why))
    return killed, pending, bad


def _check_left(data: bytes) -> str:
    """Why an image a killed harness left is not sound, or ""."""
    try:
        problems = FsImage(data).check()
    except FsError as e:
        return f"fsck: {e}"
    if problems:
        return f"fsck: {problems[0]} ({len(problems)} problems)"
    b = boot_disk(data, CHECK_CMD, timeout=60)
    if not b.clean:
        return f"boot: {b.exit.value}: {b.panic or b.message}"
    left = FsImage(bytes(b.disk))
    if left.pending or left.check():
        return "not clean after the kernel's recovery"
    return ""


def _renumber(rec: Recording) -> list[tuple[int, int]]:
    """The commits of a journal whose flushes were just removed."""
    heads = [i for i, e in enumerate(rec.journal) if e is not None and e[0] == rec.logstart_off]
    return list(zip(heads[0::2], heads[1::2], strict=True))


def _reorder_job(e: int, mask: int, eps: list[list[int]],
                 seed: int) -> tuple[str, list[int], list[int]]:
    """Everything before stretch e, then the writes of e picked by mask's bits, applied
    in an order fixed by (seed, e, mask)."""
    before = [i for ep in eps[:e] for i in ep]
    kept = [i for b, i in enumerate(eps[e]) if mask >> b & 1]
    order = kept[:]
    random.Random(f"{seed}:{e}:{mask}").shuffle(order)
    return f"r{e}:{mask:x}", before + kept, before + order


def _point_job(point: str, writes: list[int], eps: list[list[int]],
               seed: int) -> tuple[str, list[int], list[int] | None]:
    try:
        if point.startswith("r"):
            e, mask = point[1:].split(":")
            if not 0 <= int(e) < len(eps):
                raise ValueError
            return _reorder_job(int(e), int(mask, 16), eps, seed)
        k = int(point)
        if not 0 <= k <= len(writes):
            raise ValueError
        return point, writes[:k], None
    except ValueError:
        raise DiskTestError(f"'{point}': give K (0..{len(writes)}) or rE:MASK "
                                 f"(E 0..{len(eps) - 1}, MASK hex)") \
            from None
