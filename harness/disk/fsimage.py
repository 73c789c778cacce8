"""Reading the kernel's file-system image back: `FsImage` (`listdir`, `read`, `stat`, `walk`,
`check`), which the tests use to verify what the guest wrote, and the crash tester to judge
an image after a power cut.

An image is read as the kernel will see it after its mount: a header with n > 0 in the log
is a committed transaction the kernel installs at its next mount, so `FsImage` applies it in
memory (`log_header()` says what was pending, and `mkfs --check` reports it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.disk.fslayout import FsError, FsLayout


@dataclass(frozen=True)
class Stat:
    """One inode as the image holds it."""

    inum: int
    type: int
    major: int
    minor: int
    nlink: int
    size: int
    addrs: tuple[int, ...]


class FsImage:
    """A read-only view of an image file (or bytes), as the kernel will see it after its
    mount-time log recovery: a committed transaction in the log is applied in memory
    (`pending` holds its home block numbers, [] if the log was empty)."""

    def __init__(self, image: str | Path | bytes, layout: FsLayout | None = None) -> None:
        self.layout = lay = layout or FsLayout.load()
        raw = image if isinstance(image, bytes) else Path(image).read_bytes()
        if len(raw) < 2 * lay.bsize:
            raise FsError("image too small to hold a superblock")
        self.data = raw
        sb = lay.superblock.unpack(self.block(1))
        if sb["magic"] != lay.fsmagic:
            raise FsError(f"bad superblock magic {sb['magic']:#x} (want {lay.fsmagic:#x})")
        self.sb = sb
        if sb["size"] * lay.bsize > len(self.data):
            raise FsError(f"superblock says {sb['size']} blocks but the file holds "
                          f"{len(self.data) // lay.bsize}")
        if sb["nlog"] != lay.logsize or sb["inodestart"] != sb["logstart"] + sb["nlog"]:
            raise FsError(f"superblock: a log of {sb['nlog']} blocks at {sb['logstart']} "
                          f"(this kernel's is {lay.logsize} blocks, before the inodes)")
        self.pending = self.log_header()
        if self.pending:
            self.data = replay_log(raw, lay, sb, self.pending)

    def log_header(self) -> list[int]:
        """Home block numbers of the committed transaction in the log ([] if none).
        Raises FsError for a header the kernel would refuse (as kernel_c/log.c does)."""
        lay, sb = self.layout, self.sb
        head = lay.logheader.unpack(self.block(sb["logstart"]))
        n = head["n"]
        if n > lay.logblocks:
            raise FsError(f"log header says {n} blocks, the log holds {lay.logblocks}")
        blocks = list(struct.unpack(f"<{lay.logblocks}I", head["block"]))[:n]
        for b in blocks:
            if not sb["inodestart"] <= b < sb["size"]:
                raise FsError(f"log header names block {b}, outside the file system")
        return blocks

    def block(self, bno: int) -> bytes:
        bs = self.layout.bsize
        return self.data[bno * bs:(bno + 1) * bs]

    def _numbers(self, bno: int) -> list[int]:
        return list(struct.unpack(f"<{self.layout.nindirect}I", self.block(bno)))

    def inode(self, inum: int) -> Stat:
        lay = self.layout
        if not 0 < inum < self.sb["ninodes"]:
            raise FsError(f"inode {inum} out of range")
        blk = self.block(self.sb["inodestart"] + inum // lay.ipb)
        off = (inum % lay.ipb) * lay.dinode.size
        d = lay.dinode.unpack(blk[off:off + lay.dinode.size])
        addrs = struct.unpack(f"<{lay.naddrs}I", d["addrs"])
        return Stat(inum, d["type"], d["major"], d["minor"], d["nlink"], d["size"], addrs)

    def file_blocks(self, st: Stat) -> tuple[list[int], list[int]]:
        """(data blocks in file order, indirect blocks) of an inode."""
        lay = self.layout
        data = [a for a in st.addrs[:lay.ndirect] if a]
        meta = []
        if st.addrs[lay.ndirect]:
            meta.append(st.addrs[lay.ndirect])
            data += [a for a in self._numbers(st.addrs[lay.ndirect]) if a]
        if st.addrs[lay.ndirect + 1]:
            meta.append(st.addrs[lay.ndirect + 1])
            for mid in self._numbers(st.addrs[lay.ndirect + 1]):
                if mid:
                    meta.append(mid)
                    data += [a for a in self._numbers(mid) if a]
        return data, meta

    def read_inode(self, st: Stat) -> bytes:
        blocks, _ = self.file_blocks(st)
        return b"".join(self.block(b) for b in blocks)[:st.size]

    def entries(self, inum: int) -> dict[str, int]:
        """A directory's entries, name -> inode number ("." and ".." included)."""
        st = self.inode(inum)
        if st.type != self.layout.t_dir:
            raise FsError(f"inode {inum} is not a directory")
        raw = self.read_inode(st)
        de = self.layout.dirent
        out = {}
        for off in range(0, len(raw) - de.size + 1, de.size):
            d = de.unpack(raw[off:off + de.size])
            if d["inum"]:
                out[d["name"].split(b"\0", 1)[0].decode(errors="replace")] = d["inum"]
        return out

    def lookup(self, path: str) -> Stat:
        inum = self.layout.rootino
        for part in [p for p in path.split("/") if p]:
            ents = self.entries(inum)
            if part not in ents:
                raise FsError(f"{path}: no such file")
            inum = ents[part]
        return self.inode(inum)

    def stat(self, path: str) -> Stat:
        return self.lookup(path)

    def read(self, path: str) -> bytes:
        st = self.lookup(path)
        if st.type == self.layout.t_dir:
            raise FsError(f"{path} is a directory")
        return self.read_inode(st)

    def listdir(self, path: str = "/") -> list[str]:
        ents = self.entries(self.lookup(path).inum)
        return sorted(n for n in ents if n not in (".", ".."))

    def walk(self, path: str = "/") -> Iterator[tuple[str, Stat]]:
        """(path, stat) of every entry under path, depth first, directories included."""
        for name in self.listdir(path):
            full = path.rstrip("/") + "/" + name
            st = self.lookup(full)
            yield full, st
            if st.type == self.layout.t_dir:
                yield from self.walk(full)

    def check(self) -> list[str]:
        """Consistency problems, like fsck: an empty list means the image is sound.

        Checks directory structure ("." and ".."), link counts, that every block is
        in range and used once, that the bitmap marks exactly the used blocks, and
        that no allocated inode is unreachable.
        """
        c = _Checker(self)
        root = self.layout.rootino
        c.refs[root] = 1          # the root's own (virtual) parent entry
        c.visit(root, root)
        c.check_links()
        c.check_bitmap()
        return c.problems

    def usage(self) -> tuple[int, int]:
        """(data blocks in use, inodes in use)."""
        lay, sb = self.layout, self.sb
        used = 0
        for b in range(sb["size"]):
            byte = self.data[(sb["bmapstart"] + b // lay.bpb) * lay.bsize + (b % lay.bpb) // 8]
            used += bool(byte & (1 << (b % 8)))
        inodes = sum(1 for i in range(1, sb["ninodes"]) if self.inode(i).type != 0)
        return used, inodes


def replay_log(image: bytes, layout: FsLayout, sb: Mapping[str, int],
               blocks: list[int]) -> bytes:
    """`image` with the logged blocks copied home and the header cleared, as the kernel's
    recovery (kernel_c/log.c, install_trans) leaves it."""
    bs = layout.bsize
    out = bytearray(image)
    for i, home in enumerate(blocks):
        src = (sb["logstart"] + 1 + i) * bs
        out[home * bs:(home + 1) * bs] = image[src:src + bs]
    head = sb["logstart"] * bs
    out[head:head + 4] = bytes(4)      # n = 0
    return bytes(out)


class _Checker:
    """One fsck pass over an image (FsImage.check)."""

    def __init__(self, img: FsImage) -> None:
        self.img = img
        self.lay, self.sb = img.layout, img.sb
        self.datastart = self.sb["bmapstart"] + (self.sb["size"] // self.lay.bpb + 1)
        self.problems: list[str] = []
        self.owner: dict[int, int] = {}  # block -> the inode using it
        self.refs: dict[int, int] = {}   # inode -> directory entries naming it
        self.seen: set[int] = set()

    def use(self, bno: int, inum: int) -> None:
        if not self.datastart <= bno < self.sb["size"]:
            self.problems.append(f"inode {inum}: block {bno} outside the data area")
        elif bno in self.owner:
            self.problems.append(f"block {bno} used by inodes {self.owner[bno]} and {inum}")
        else:
            self.owner[bno] = inum

    def visit(self, inum: int, parent: int) -> None:
        """Inode inum, reached from directory parent, and everything below it."""
        lay, img = self.lay, self.img
        if inum in self.seen:
            return
        self.seen.add(inum)
        st = img.inode(inum)
        if st.type not in (lay.t_dir, lay.t_file, lay.t_device):
            self.problems.append(f"inode {inum}: referenced but has type {st.type}")
            return
        data, meta = img.file_blocks(st)
        for b in data + meta:
            self.use(b, inum)
        if len(data) * lay.bsize < st.size:
            self.problems.append(f"inode {inum}: size {st.size} but only {len(data)} blocks")
        if st.type == lay.t_dir:
            self.visit_dir(inum, parent)

    def visit_dir(self, inum: int, parent: int) -> None:
        ents = self.img.entries(inum)
        if ents.get(".") != inum:
            self.problems.append(f"directory {inum}: '.' is {ents.get('.')}")
        if ents.get("..") != parent:
            self.problems.append(f"directory {inum}: '..' is {ents.get('..')}, want {parent}")
        for name, child in ents.items():
            if name in (".", ".."):
                continue
            self.refs[child] = self.refs.get(child, 0) + 1
            if self.img.inode(child).type == self.lay.t_dir:
                self.refs[inum] = self.refs.get(inum, 0) + 1      # the child's ".."
                if child in self.seen:
                    self.problems.append(f"directory {child} has more than one parent")
            self.visit(child, inum)

    def check_links(self) -> None:
        """Link counts against directory references; allocated but unreachable inodes."""
        lay = self.lay
        for inum in self.seen:
            st = self.img.inode(inum)
            if st.type in (lay.t_dir, lay.t_file, lay.t_device) and \
                    st.nlink != self.refs.get(inum):
                self.problems.append(f"inode {inum}: nlink {st.nlink} but "
                                     f"{self.refs.get(inum, 0)} directory references")
        for inum in range(1, self.sb["ninodes"]):
            if inum not in self.seen and self.img.inode(inum).type != 0:
                self.problems.append(f"inode {inum}: allocated but unreachable")

    def check_bitmap(self) -> None:
        """The bitmap marks exactly the metadata and the blocks some inode uses."""
        lay, sb = self.lay, self.sb
        for b in range(sb["size"]):
            byte = self.img.data[(sb["bmapstart"] + b // lay.bpb) * lay.bsize
                                 + (b % lay.bpb) // 8]
            marked = bool(byte & (1 << (b % 8)))
            used = b < self.datastart or b in self.owner
            if used and not marked:
                self.problems.append(f"block {b}: in use but free in the bitmap")
            elif marked and not used:
                self.problems.append(f"block {b}: marked in the bitmap but not used")
