"""Build and inspect the kernel's file-system image: the Python twin of xv6's mkfs.

Every on-disk constant and struct layout (block size, inode and directory entry
layout, superblock, magic, file types, the console's major number) is read from the
kernel's headers (kernel_c/fs.h, stat.h, device.h) through harness.abi.cheader; none is
retyped here. The disk layout, in BSIZE blocks:

    [ boot | super | log | inode blocks | free bit map | data blocks ]

The log (kernel_c/log.c) is a struct logheader and LOGBLOCKS blocks. A header with
n > 0 is a committed transaction the kernel installs at its next mount; `FsImage`
reads an image as it will be after that (`log_header()` says what was pending, and
`--check` reports it).

Command line:

    python -m harness.disk.fsimage OUT.img [--size-blocks N] [--ninodes N] NAME=HOSTPATH ...
    python -m harness.disk.fsimage --check IMG      (consistency check, like fsck; a committed
                                                log is replayed first, and reported)
    python -m harness.disk.fsimage --ls IMG         (list every file)

NAME may contain '/' (parent directories are created). A /console device node is
added unless --no-console is given.

Python API: `build_image(out, files, size_blocks=..., ninodes=...)`, or `FsBuilder` for
finer control; `FsImage` reads an image back (`listdir`, `read`, `stat`, `walk`,
`check`), which the tests use to verify what the guest wrote.
"""

from __future__ import annotations

import argparse
import functools
import struct
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.abi import cheader

DEFAULT_SIZE_BLOCKS = 4096
DEFAULT_NINODES = 512


class FsError(Exception):
    """A file-system image cannot be built or read as asked."""


# ----------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class FsLayout:
    """The on-disk format, as kernel_c/fs.h (and stat.h, device.h) define it."""

    bsize: int          # block size in bytes
    fsmagic: int        # superblock.magic
    rootino: int        # root directory inode number
    ndirect: int        # direct block slots per inode
    nindirect: int      # block numbers per indirect block
    maxfile: int        # largest file, in blocks
    dirsiz: int         # bytes of a directory entry's name
    ipb: int            # inodes per block
    bpb: int            # bitmap bits per block
    t_dir: int          # dinode.type values (stat.h)
    t_file: int
    t_device: int
    console_major: int  # device.h CONSOLE
    logsize: int        # blocks of the log, header included (LOGSIZE)
    logblocks: int      # data blocks a transaction may hold (LOGBLOCKS)
    superblock: cheader.StructLayout
    logheader: cheader.StructLayout
    dinode: cheader.StructLayout
    dirent: cheader.StructLayout

    @property
    def naddrs(self) -> int:
        """Block slots in a dinode: direct, indirect, double indirect."""
        return self.dinode.fields["addrs"].length or 0

    @classmethod
    @functools.cache
    def load(cls, kernel_dir: Path = cheader.KERNEL_DIR) -> FsLayout:
        fs = cheader.load("fs.h", kernel_dir)
        st = cheader.load("stat.h", kernel_dir)
        dev = cheader.load("device.h", kernel_dir)
        dinode = fs.struct("dinode")
        bsize = fs["BSIZE"]
        # IPB is BSIZE / sizeof(struct dinode) in fs.h; sizeof comes from the layout
        ipb = fs.defines.get("IPB", bsize // dinode.size)
        layout = cls(
            bsize=bsize, fsmagic=fs["FSMAGIC"], rootino=fs["ROOTINO"],
            ndirect=fs["NDIRECT"], nindirect=fs["NINDIRECT"], maxfile=fs["MAXFILE"],
            dirsiz=fs["DIRSIZ"], ipb=ipb, bpb=fs["BPB"],
            t_dir=st["T_DIR"], t_file=st["T_FILE"], t_device=st["T_DEVICE"],
            console_major=dev["CONSOLE"], logsize=fs["LOGSIZE"], logblocks=fs["LOGBLOCKS"],
            superblock=fs.struct("superblock"), logheader=fs.struct("logheader"),
            dinode=dinode, dirent=fs.struct("dirent"),
        )
        if layout.naddrs != layout.ndirect + 2:
            raise FsError("fs.h: dinode.addrs must hold NDIRECT + 2 block numbers")
        if layout.maxfile != layout.ndirect + layout.nindirect + layout.nindirect ** 2:
            raise FsError("fs.h: MAXFILE does not match NDIRECT/NINDIRECT")
        return layout


@dataclass(frozen=True)
class Geometry:
    """Where each region of an image of a given size starts."""

    size: int            # blocks in the image
    ninodes: int
    nlog: int            # log blocks, header included
    logstart: int
    ninodeblocks: int
    nbitmap: int
    inodestart: int
    bmapstart: int
    datastart: int       # first data block (everything before it is metadata)

    @property
    def nblocks(self) -> int:
        return self.size - self.datastart

    @classmethod
    def compute(cls, layout: FsLayout, size: int, ninodes: int) -> Geometry:
        if ninodes < 2:
            raise FsError("--ninodes must be at least 2 (inode 0 is unused, 1 is /)")
        if ninodes > 65535:
            raise FsError("--ninodes must be at most 65535 (dirent.inum is 16 bits)")
        ninodeblocks = ninodes // layout.ipb + 1
        nbitmap = size // layout.bpb + 1
        logstart = 2
        inodestart = logstart + layout.logsize
        bmapstart = inodestart + ninodeblocks
        datastart = bmapstart + nbitmap
        if size <= datastart + 1:
            raise FsError(f"an image of {size} blocks has no room for data "
                          f"({datastart} metadata blocks)")
        return cls(size, ninodes, layout.logsize, logstart, ninodeblocks, nbitmap,
                   inodestart, bmapstart, datastart)


# ----------------------------------------------------------------------------- building


@dataclass
class _Inode:
    type: int
    nlink: int = 0
    major: int = 0
    minor: int = 0
    data: bytearray | None = None                 # file contents
    entries: dict[str, int] | None = None         # directories: name -> inum


def _split(path: str, dirsiz: int) -> list[str]:
    """Path components of an image name, checked against the kernel's limits."""
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts:
        raise FsError(f"'{path}': empty file name")
    for p in parts:
        if p in (".", ".."):
            raise FsError(f"'{path}': '.' and '..' are not allowed in image names")
        if len(p.encode()) > dirsiz:
            raise FsError(f"'{path}': component '{p}' is longer than DIRSIZ ({dirsiz} bytes)")
    return parts


class FsBuilder:
    """An image under construction, held in memory until `write()`.

    Inodes are numbered in creation order from the root (ROOTINO); data blocks are
    allocated contiguously after the metadata when the image is written.
    """

    def __init__(self, size_blocks: int = DEFAULT_SIZE_BLOCKS,
                 ninodes: int = DEFAULT_NINODES, layout: FsLayout | None = None) -> None:
        self.layout = layout or FsLayout.load()
        self.geo = Geometry.compute(self.layout, size_blocks, ninodes)
        self.inodes: dict[int, _Inode] = {}
        root = self._alloc(self.layout.t_dir)
        if root != self.layout.rootino:
            raise FsError("the root directory must be the first inode")
        self.inodes[root].entries = {".": root, "..": root}
        self.inodes[root].nlink = 1

    def _alloc(self, type_: int) -> int:
        inum = self.layout.rootino + len(self.inodes)
        if inum >= self.geo.ninodes:
            raise FsError(f"out of inodes ({self.geo.ninodes}); use a larger --ninodes")
        self.inodes[inum] = _Inode(type_)
        return inum

    def _dir(self, parts: list[str]) -> int:
        """The directory at parts, creating missing ones."""
        cur = self.layout.rootino
        for name in parts:
            entries = self.inodes[cur].entries
            assert entries is not None
            if name in entries:
                cur = entries[name]
                if self.inodes[cur].type != self.layout.t_dir:
                    raise FsError(f"'{name}' is a file, not a directory")
                continue
            child = self._alloc(self.layout.t_dir)
            self.inodes[child].entries = {".": child, "..": cur}
            self.inodes[child].nlink = 1        # the parent's entry
            self.inodes[cur].nlink += 1         # the child's ".."
            entries[name] = child
            cur = child
        return cur

    def _link(self, path: str, inum: int) -> None:
        parts = _split(path, self.layout.dirsiz)
        parent = self.inodes[self._dir(parts[:-1])]
        assert parent.entries is not None
        if parts[-1] in parent.entries:
            raise FsError(f"'{path}' is given twice")
        parent.entries[parts[-1]] = inum
        self.inodes[inum].nlink += 1

    def mkdir(self, path: str) -> int:
        """Create directory path (and its parents); returns its inode number."""
        return self._dir(_split(path, self.layout.dirsiz))

    def add_file(self, path: str, data: bytes) -> int:
        """Add a regular file with these contents; returns its inode number."""
        limit = self.layout.maxfile * self.layout.bsize
        if len(data) > limit:
            raise FsError(f"'{path}': {len(data)} bytes is more than the largest file "
                          f"({limit} bytes)")
        self._dir(_split(path, self.layout.dirsiz)[:-1])   # parents get lower numbers
        inum = self._alloc(self.layout.t_file)
        self.inodes[inum].data = bytearray(data)
        self._link(path, inum)
        return inum

    def mknod(self, path: str, major: int, minor: int = 0) -> int:
        """Add a device node; returns its inode number."""
        self._dir(_split(path, self.layout.dirsiz)[:-1])
        inum = self._alloc(self.layout.t_device)
        self.inodes[inum].major, self.inodes[inum].minor = major, minor
        self._link(path, inum)
        return inum

    def _dir_bytes(self, node: _Inode) -> bytes:
        assert node.entries is not None
        de = self.layout.dirent
        return b"".join(de.pack(inum=inum, name=name.encode())
                        for name, inum in node.entries.items())

    def blocks_needed(self) -> int:
        """Data blocks the image needs, indirect blocks included."""
        return sum(self._nblocks(len(self._contents(n))) for n in self.inodes.values())

    def _contents(self, node: _Inode) -> bytes:
        if node.type == self.layout.t_dir:
            return self._dir_bytes(node)
        return bytes(node.data or b"")

    def _nblocks(self, nbytes: int) -> int:
        lay = self.layout
        n = -(-nbytes // lay.bsize)
        extra = 0
        if n > lay.ndirect:
            extra += 1
        if n > lay.ndirect + lay.nindirect:
            rest = n - lay.ndirect - lay.nindirect
            extra += 1 + -(-rest // lay.nindirect)
        return n + extra

    def to_bytes(self) -> bytes:
        """The complete image."""
        lay, geo = self.layout, self.geo
        need = self.blocks_needed()
        if need > geo.nblocks:
            raise FsError(f"the files need {need} data blocks but an image of {geo.size} "
                          f"blocks has {geo.nblocks}; use a larger --size-blocks "
                          f"(at least {geo.datastart + need})")
        img = bytearray(geo.size * lay.bsize)
        nextblock = geo.datastart

        def alloc() -> int:
            nonlocal nextblock
            nextblock += 1
            return nextblock - 1

        def put(bno: int, data: bytes, offset: int = 0) -> None:
            at = bno * lay.bsize + offset
            img[at:at + len(data)] = data

        def put_numbers(bno: int, numbers: list[int]) -> None:
            put(bno, struct.pack(f"<{len(numbers)}I", *numbers))

        for inum, node in sorted(self.inodes.items()):
            data = self._contents(node)
            blocks = []
            for off in range(0, len(data), lay.bsize):
                bno = alloc()
                put(bno, data[off:off + lay.bsize])
                blocks.append(bno)
            addrs = blocks[:lay.ndirect] + [0] * (lay.ndirect - len(blocks[:lay.ndirect]))
            single = blocks[lay.ndirect:lay.ndirect + lay.nindirect]
            double = blocks[lay.ndirect + lay.nindirect:]
            addrs.append(0)
            addrs.append(0)
            if single:
                addrs[lay.ndirect] = alloc()
                put_numbers(addrs[lay.ndirect], single)
            if double:
                addrs[lay.ndirect + 1] = alloc()
                mids = []
                for i in range(0, len(double), lay.nindirect):
                    mid = alloc()
                    put_numbers(mid, double[i:i + lay.nindirect])
                    mids.append(mid)
                put_numbers(addrs[lay.ndirect + 1], mids)
            dinode = bytearray(lay.dinode.pack(
                type=node.type, major=node.major, minor=node.minor, nlink=node.nlink,
                size=len(data)))
            at = lay.dinode.offset("addrs")
            dinode[at:at + 4 * len(addrs)] = struct.pack(f"<{len(addrs)}I", *addrs)
            bno = geo.inodestart + inum // lay.ipb
            put(bno, bytes(dinode), (inum % lay.ipb) * lay.dinode.size)

        # bitmap: every block below nextblock is in use
        for b in range(nextblock):
            byte = geo.bmapstart * lay.bsize + (b // lay.bpb) * lay.bsize + (b % lay.bpb) // 8
            img[byte] |= 1 << (b % 8)

        put(1, lay.superblock.pack(
            magic=lay.fsmagic, size=geo.size, nblocks=geo.nblocks, ninodes=geo.ninodes,
            nlog=geo.nlog, logstart=geo.logstart, inodestart=geo.inodestart,
            bmapstart=geo.bmapstart))
        return bytes(img)

    def write(self, out: str | Path) -> None:
        """Write the image to out (atomically: a temporary file, then a rename)."""
        data = self.to_bytes()
        out = Path(out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(out)


def build_image(out: str | Path, files: Mapping[str, str | Path | bytes], *,
                size_blocks: int = DEFAULT_SIZE_BLOCKS, ninodes: int = DEFAULT_NINODES,
                console: bool = True) -> FsBuilder:
    """Build an image at out from {image name: host path or bytes}; returns the builder."""
    fs = FsBuilder(size_blocks, ninodes)
    if console:
        fs.mknod("console", fs.layout.console_major, 0)
    for name, src in files.items():
        if isinstance(src, bytes):
            data = src
        else:
            try:
                data = Path(src).read_bytes()
            except OSError as exc:
                raise FsError(f"{name}: cannot read {src}: {exc.strerror}") from None
        fs.add_file(name, data)
    fs.write(out)
    return fs


def with_files(image: bytes, extra: Mapping[str, bytes], *, grow: bool = False) -> bytes:
    """A copy of `image` (same size and inode count) with the files of `extra` added or
    replaced ({path: contents}). Everything else is copied: directories, files, device
    nodes, hard links (an inode reached by two names stays one inode). With `grow`, the
    copy is larger by the blocks the extra files take, so its free space stays as it was
    (the guest's tokenizer vocabulary is bigger than a default image's free space)."""
    src = FsImage(image)
    lay = src.layout
    size = src.sb["size"]
    if grow:
        sizer = FsBuilder(size, src.sb["ninodes"], lay)
        size += sum(sizer._nblocks(len(data)) for data in extra.values()) + 8
    out = FsBuilder(size, src.sb["ninodes"], lay)
    new_of: dict[int, int] = {}  # inode in image -> inode in the copy
    wanted = {"/" + "/".join(_split(p, lay.dirsiz)): data for p, data in extra.items()}
    for path, st in src.walk("/"):
        if path in wanted:
            continue
        if st.inum in new_of:
            out._link(path, new_of[st.inum])
        elif st.type == lay.t_dir:
            new_of[st.inum] = out.mkdir(path)
        elif st.type == lay.t_device:
            new_of[st.inum] = out.mknod(path, st.major, st.minor)
        else:
            new_of[st.inum] = out.add_file(path, src.read_inode(st))
    for path, data in wanted.items():
        out.add_file(path, data)
    return out.to_bytes()


# ----------------------------------------------------------------------------- reading


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
        lay, sb = self.layout, self.sb
        problems: list[str] = []
        datastart = sb["bmapstart"] + (sb["size"] // lay.bpb + 1)
        owner: dict[int, int] = {}
        refs: dict[int, int] = {}
        seen: set[int] = set()

        def use(bno: int, inum: int) -> None:
            if not datastart <= bno < sb["size"]:
                problems.append(f"inode {inum}: block {bno} outside the data area")
            elif bno in owner:
                problems.append(f"block {bno} used by inodes {owner[bno]} and {inum}")
            else:
                owner[bno] = inum

        def visit(inum: int, parent: int) -> None:
            if inum in seen:
                return
            seen.add(inum)
            st = self.inode(inum)
            if st.type not in (lay.t_dir, lay.t_file, lay.t_device):
                problems.append(f"inode {inum}: referenced but has type {st.type}")
                return
            data, meta = self.file_blocks(st)
            for b in data + meta:
                use(b, inum)
            if len(data) * lay.bsize < st.size:
                problems.append(f"inode {inum}: size {st.size} but only {len(data)} blocks")
            if st.type != lay.t_dir:
                return
            ents = self.entries(inum)
            if ents.get(".") != inum:
                problems.append(f"directory {inum}: '.' is {ents.get('.')}")
            if ents.get("..") != parent:
                problems.append(f"directory {inum}: '..' is {ents.get('..')}, want {parent}")
            for name, child in ents.items():
                if name in (".", ".."):
                    continue
                refs[child] = refs.get(child, 0) + 1
                if self.inode(child).type == lay.t_dir:
                    refs[inum] = refs.get(inum, 0) + 1      # the child's ".."
                    if child in seen:
                        problems.append(f"directory {child} has more than one parent")
                visit(child, inum)

        root = lay.rootino
        refs[root] = 1          # the root's own (virtual) parent entry
        visit(root, root)
        for inum in seen:
            st = self.inode(inum)
            if st.type in (lay.t_dir, lay.t_file, lay.t_device) and st.nlink != refs.get(inum):
                problems.append(f"inode {inum}: nlink {st.nlink} but {refs.get(inum, 0)} "
                                "directory references")
        for inum in range(1, sb["ninodes"]):
            if inum not in seen and self.inode(inum).type != 0:
                problems.append(f"inode {inum}: allocated but unreachable")
        for b in range(sb["size"]):
            byte = self.data[(sb["bmapstart"] + b // lay.bpb) * lay.bsize + (b % lay.bpb) // 8]
            marked = bool(byte & (1 << (b % 8)))
            used = b < datastart or b in owner
            if used and not marked:
                problems.append(f"block {b}: in use but free in the bitmap")
            elif marked and not used:
                problems.append(f"block {b}: marked in the bitmap but not used")
        return problems

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


# ----------------------------------------------------------------------------- CLI


def _parse_entry(arg: str) -> tuple[str, str]:
    name, sep, host = arg.partition("=")
    if not sep or not name or not host:
        raise argparse.ArgumentTypeError(f"'{arg}': expected NAME=HOSTPATH")
    return name, host


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m harness.disk.fsimage",
        description="Build the kernel's file-system image (layout from kernel_c/fs.h), "
                    "or check/list an existing one.")
    ap.add_argument("image", help="image file to write (or to read with --check/--ls)")
    ap.add_argument("entries", nargs="*", type=_parse_entry, metavar="NAME=HOSTPATH",
                    help="copy HOSTPATH into the image as NAME ('/' creates directories)")
    ap.add_argument("--size-blocks", type=int, default=DEFAULT_SIZE_BLOCKS, metavar="N",
                    help=f"image size in blocks (default {DEFAULT_SIZE_BLOCKS})")
    ap.add_argument("--ninodes", type=int, default=DEFAULT_NINODES, metavar="N",
                    help=f"number of inodes (default {DEFAULT_NINODES})")
    ap.add_argument("--no-console", action="store_true",
                    help="do not create the /console device node")
    ap.add_argument("--check", action="store_true",
                    help="check an existing image's consistency; exit 1 on problems")
    ap.add_argument("--ls", action="store_true", help="list the files of an existing image")
    args = ap.parse_intermixed_args(argv)
    try:
        if args.check or args.ls:
            img = FsImage(args.image)
            if args.ls:
                for path, st in img.walk():
                    kind = {img.layout.t_dir: "d", img.layout.t_device: "c"}.get(st.type, "-")
                    print(f"{kind} {st.inum:5d} {st.nlink:3d} {st.size:9d} {path}")
            if args.check:
                if img.pending:
                    print(f"{args.image}: the log holds a committed transaction of "
                          f"{len(img.pending)} blocks; checked as the kernel will install "
                          "it at mount")
                problems = img.check()
                for p in problems:
                    print(f"{args.image}: {p}", file=sys.stderr)
                used, inodes = img.usage()
                print(f"{args.image}: {'OK' if not problems else f'{len(problems)} problems'}"
                      f" ({used}/{img.sb['size']} blocks, {inodes}/{img.sb['ninodes'] - 1}"
                      " inodes in use)")
                return 1 if problems else 0
            return 0
        fs = build_image(args.image, dict(args.entries), size_blocks=args.size_blocks,
                         ninodes=args.ninodes, console=not args.no_console)
    except (FsError, cheader.HeaderError) as exc:
        print(f"fsimage: {exc}", file=sys.stderr)
        return 1
    geo = fs.geo
    print(f"{args.image}: {geo.size} blocks of {fs.layout.bsize} bytes "
          f"({geo.datastart} metadata, {fs.blocks_needed()} data used), "
          f"{len(fs.inodes)}/{geo.ninodes - 1} inodes, {len(args.entries)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
