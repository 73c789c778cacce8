"""`harness imagefuzz`: boot the kernel on thousands of damaged disk images; it must never
panic or hang.

    harness imagefuzz --images 200 --seed 1
    harness imagefuzz --seed 1 --only 137 --save /tmp/bad    # one image again, kept

Each image is a copy of a real one (build/fs.img with a small tree /fz added: files of
one, several and indirect blocks, a subdirectory) with 1-3 seeded mutations:

    super      a superblock field set to 0, 1, -1, off by one or random
    type       an inode's type (0, a wrong kind, garbage)
    size       an inode's size (0, past its blocks, past MAXFILE, -1)
    addr       a block pointer: past the disk, into the metadata, another file's block
    indirect   garbage block numbers in an indirect block
    loop       a directory entry naming the directory itself, its parent or the root,
               or '..' pointing down
    nlink      a link count: 0, -1, +1, a large one
    bitmap     bits cleared, set or flipped, or the whole map cleared
    dirent     an entry's inode number (past the table, 0 with a name) or a garbled name
    log        a committed log header: a huge n, or block numbers outside the disk
    flip       random bytes of a random metadata block

The kernel boots it as `harness run --no-fs-check` would and runs a fixed script: ls, cat,
wc, a write and read-back, mkdir, rm. Verdicts: `ran` (powered off by itself, whatever the
commands said), `refused` (the kernel refused the disk at mount with a message, or had no
usable /init), and the failures: `panic`, `fault` (machine fault), `hang` (no progress for
--hang-timeout seconds, or the whole boot took longer than --timeout).
"""

from __future__ import annotations

import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.disk.diskboot import DiskBoot, boot_disk
from harness.disk.errors import DiskTestError
from harness.disk.fsbuild import with_files
from harness.disk.fsimage import FsImage, Stat
from harness.disk.fslayout import FsError, FsLayout
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, Exit

SCRIPT = ("ls /; ls /fz; cat /fz/one; wc /fz/many; wc /fz/big; ls /fz/sub; cat /fz/sub/x; "
          "echo written > /fz/new; cat /fz/new; mkdir /fz/d2; echo y > /fz/d2/y; "
          "rm /fz/one; rm /fz/d2/y; rm /fz/d2; ls /fz")
TREE = {"fz/one": b"one block\n", "fz/many": b"m" * 5000, "fz/big": bytes(range(256)) * 80,
        "fz/sub/x": b"in a subdirectory\n"}
FAILURES = ("panic", "fault", "hang")


@dataclass
class Result:
    index: int
    verdict: str
    mutations: list[str]
    detail: str = ""
    output: str = ""


@dataclass
class FuzzReport:
    seed: int
    images: int = 0
    verdicts: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    failures: list[Result] = field(default_factory=list)
    last: Result | None = None      # the image of --only
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures


class Mutator:
    """Applies named mutations to a bytearray image, reading its structure from `base`."""

    def __init__(self, base: bytes) -> None:
        self.img = FsImage(base)
        self.lay: FsLayout = self.img.layout
        self.sb = self.img.sb
        self.inodes: list[Stat] = [st for _, st in self.img.walk("/")]
        self.inodes.append(self.img.inode(self.lay.rootino))
        self.dirs = [st for st in self.inodes if st.type == self.lay.t_dir]
        # the mutable tree: its files, not the programs the script runs
        self.fz = [self.img.stat(p) for p in ("/fz", "/fz/one", "/fz/many", "/fz/big",
                                              "/fz/sub", "/fz/sub/x")]
        self.kinds: dict[str, Callable[[bytearray, random.Random], str]] = {
            "super": self.super, "type": self.type, "size": self.size, "addr": self.addr,
            "indirect": self.indirect, "loop": self.loop, "nlink": self.nlink,
            "bitmap": self.bitmap, "dirent": self.dirent, "log": self.log, "flip": self.flip}

    # -------------------------------------------------------------- helpers
    def _put(self, img: bytearray, off: int, fmt: str, value: int) -> None:
        size = struct.calcsize(fmt)
        value &= (1 << (8 * size)) - 1
        struct.pack_into(fmt.upper() if fmt.islower() else fmt, img, off, value)

    def _inode_off(self, inum: int) -> int:
        lay = self.lay
        return ((self.sb["inodestart"] + inum // lay.ipb) * lay.bsize
                + (inum % lay.ipb) * lay.dinode.size)

    def _field(self, inum: int, name: str) -> tuple[int, str]:
        f = self.lay.dinode.fields[name]
        return self._inode_off(inum) + f.offset, "<h" if f.size == 2 else "<I"

    def _target(self, rng: random.Random) -> Stat:
        return rng.choice(self.fz if rng.random() < 0.8 else self.inodes)

    def _odd(self, rng: random.Random, near: int) -> int:
        return rng.choice([0, 1, -1, near - 1, near + 1, near * 2, 0x7FFF, 0xFFFF,
                           0x7FFFFFFF, rng.getrandbits(32)])

    # -------------------------------------------------------------- mutations
    def super(self, img: bytearray, rng: random.Random) -> str:
        f = rng.choice(list(self.lay.superblock.fields.values()))
        v = self._odd(rng, self.sb[f.name])
        self._put(img, self.lay.bsize + f.offset, "<I", v)
        return f"super.{f.name}={v & 0xFFFFFFFF:#x}"

    def _set(self, img: bytearray, rng: random.Random, name: str,
             values: Callable[[Stat], list[int]]) -> str:
        """Dinode field `name` of a target inode set to one of values(its stat)."""
        st = self._target(rng)
        v = rng.choice(values(st))
        off, fmt = self._field(st.inum, name)
        self._put(img, off, fmt, v)
        return f"inode {st.inum} {name}={v}"

    def type(self, img: bytearray, rng: random.Random) -> str:
        lay = self.lay
        return self._set(img, rng, "type", lambda st: [0, lay.t_dir, lay.t_file, lay.t_device,
                                                       4, -1, rng.getrandbits(15)])

    def size(self, img: bytearray, rng: random.Random) -> str:
        big = self.lay.maxfile * self.lay.bsize + 1
        return self._set(img, rng, "size", lambda st: [
            0, st.size + 1, st.size + 20 * self.lay.bsize, big, 0xFFFFFFFF,
            max(st.size - 1, 0), rng.getrandbits(32)])

    def addr(self, img: bytearray, rng: random.Random) -> str:
        st = self._target(rng)
        j = rng.randrange(self.lay.naddrs)
        other = [b for s in self.inodes for b in s.addrs if b]
        v = rng.choice([self.sb["size"] + rng.randrange(1, 10000), 0xFFFFFFFF, 1,
                        self.sb["logstart"], self.sb["inodestart"], self.sb["bmapstart"],
                        rng.choice(other), 0])
        off, _ = self._field(st.inum, "addrs")
        self._put(img, off + 4 * j, "<I", v)
        return f"inode {st.inum} addrs[{j}]={v}"

    def indirect(self, img: bytearray, rng: random.Random) -> str:
        ind = [st.addrs[self.lay.ndirect] for st in self.inodes if st.addrs[self.lay.ndirect]]
        bno = rng.choice(ind)
        n = rng.randrange(1, 8)
        for _ in range(n):
            j = rng.randrange(self.lay.nindirect)
            self._put(img, bno * self.lay.bsize + 4 * j, "<I",
                      rng.choice([rng.getrandbits(32), self.sb["size"] + j, 1, 2]))
        return f"indirect block {bno}: {n} entries"

    def _dirent_slots(self, st: Stat) -> list[int]:
        """Byte offsets in the image of directory st's entries."""
        data, _ = self.img.file_blocks(st)
        de = self.lay.dirent.size
        return [b * self.lay.bsize + o for b in data for o in range(0, self.lay.bsize, de)
                ][:st.size // de]

    def loop(self, img: bytearray, rng: random.Random) -> str:
        d = rng.choice(self.fz[0:1] + self.fz[4:5] + [self.img.inode(self.lay.rootino)])
        slots = self._dirent_slots(d)
        i = rng.randrange(len(slots))
        target = rng.choice([d.inum, self.lay.rootino, self.fz[0].inum, self.fz[4].inum])
        inum_off = self.lay.dirent.fields["inum"].offset
        self._put(img, slots[i] + inum_off, "<H", target)
        return f"dir {d.inum} entry {i} -> inode {target}"

    def nlink(self, img: bytearray, rng: random.Random) -> str:
        return self._set(img, rng, "nlink",
                         lambda st: [0, -1, st.nlink + 1, st.nlink - 1, 100, 0x7FFF])

    def bitmap(self, img: bytearray, rng: random.Random) -> str:
        start = self.sb["bmapstart"] * self.lay.bsize
        how = rng.choice(["clear", "set", "flip", "zero-all"])
        if how == "zero-all":
            img[start:start + self.lay.bsize] = bytes(self.lay.bsize)
            return "bitmap cleared"
        for _ in range(rng.randrange(1, 64)):
            b = rng.randrange(self.sb["size"])
            byte, bit = start + b // 8, 1 << (b % 8)
            img[byte] = (img[byte] & ~bit if how == "clear" else
                         img[byte] | bit if how == "set" else img[byte] ^ bit)
        return f"bitmap bits {how}"

    def dirent(self, img: bytearray, rng: random.Random) -> str:
        d = rng.choice(self.dirs)
        slots = self._dirent_slots(d)
        at = rng.choice(slots)
        f = self.lay.dirent.fields
        if rng.random() < 0.5:
            v = rng.choice([self.sb["ninodes"], 0xFFFF, self.sb["ninodes"] - 1, 0])
            self._put(img, at + f["inum"].offset, "<H", v)
            return f"dir {d.inum} entry inum={v}"
        name = bytes(rng.randrange(1, 256) for _ in range(self.lay.dirsiz))
        img[at + f["name"].offset:at + f["name"].offset + self.lay.dirsiz] = name
        return f"dir {d.inum} entry name garbled"

    def log(self, img: bytearray, rng: random.Random) -> str:
        head = self.sb["logstart"] * self.lay.bsize
        if rng.random() < 0.4:
            n = rng.choice([self.lay.logblocks + 1, 0xFFFFFFFF, rng.getrandbits(32)])
            self._put(img, head, "<I", n)
            return f"log n={n}"
        n = rng.randrange(1, self.lay.logblocks + 1)
        self._put(img, head, "<I", n)
        for i in range(n):
            b = rng.choice([rng.randrange(self.sb["size"]), self.sb["size"] + i, 0, 1,
                            rng.getrandbits(32)])
            self._put(img, head + 4 + 4 * i, "<I", b)
            src = (self.sb["logstart"] + 1 + i) * self.lay.bsize
            img[src:src + self.lay.bsize] = rng.randbytes(self.lay.bsize)
        return f"log committed n={n}, random blocks and contents"

    def flip(self, img: bytearray, rng: random.Random) -> str:
        datastart = self.sb["bmapstart"] + self.sb["size"] // self.lay.bpb + 1
        dirblocks = [b for d in self.dirs for b in self.img.file_blocks(d)[0]]
        bno = rng.choice([rng.randrange(1, datastart)] * 3 + dirblocks)
        n = rng.randrange(1, 9)
        for _ in range(n):
            img[bno * self.lay.bsize + rng.randrange(self.lay.bsize)] = rng.randrange(256)
        return f"block {bno}: {n} random bytes"

    def mutate(self, base: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
        img = bytearray(base)
        done = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            kind = rng.choice(list(self.kinds))
            done.append(f"{kind}: {self.kinds[kind](img, rng)}")
        return bytes(img), done


def base_image(fs: Path) -> bytes:
    """`fs` with the /fz tree added (a copy in memory)."""
    try:
        return with_files(fs.read_bytes(), TREE)
    except (OSError, FsError) as e:
        raise DiskTestError(f"disk image {fs}: {e}") from None


def verdict(b: DiskBoot) -> tuple[str, str]:
    if b.exit == Exit.POWEROFF:
        if "fsinit: refusing the disk" in b.output or "cannot exec /init" in b.output:
            return "refused", b.output.strip().splitlines()[-1]
        return "ran", ""
    if b.exit == Exit.PANIC:
        return "panic", b.panic or b.message
    if b.exit in (Exit.HANG, Exit.TIMEOUT):
        return "hang", b.message
    return "fault", b.message


def run_imagefuzz(*, images: int = 100, seed: int = 1, only: int | None = None,
                  save: Path | None = None, kernel: Path = DEFAULT_KERNEL,
                  fs: Path = DEFAULT_FS, timeout: float = 30.0, hang_timeout: float = 10.0,
                  progress: bool = False) -> FuzzReport:
    base = base_image(fs)
    mut = Mutator(base)
    rep = FuzzReport(seed)
    t0 = time.perf_counter()
    indices = [only] if only is not None else range(images)
    for i in indices:
        img, muts = mut.mutate(base, random.Random(f"{seed}:{i}"))
        for m in muts:
            rep.kinds[m.split(":")[0]] += 1
        b = boot_disk(img, SCRIPT, kernel=kernel, timeout=timeout, hang_timeout=hang_timeout)
        v, detail = verdict(b)
        rep.images += 1
        rep.verdicts[v] += 1
        if v in FAILURES or only is not None:
            r = Result(i, v, muts, detail, b.output)
            rep.last = r
            if v in FAILURES:
                rep.failures.append(r)
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                (save / f"fuzz-{seed}-{i}.img").write_bytes(img)
        if progress and rep.images % 100 == 0:
            print(f"  {rep.images} images: {dict(rep.verdicts)}", file=sys.stderr)
    rep.seconds = time.perf_counter() - t0
    return rep
