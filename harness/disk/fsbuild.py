"""Building the kernel's file-system image: the Python twin of xv6's mkfs.

`build_image(out, files, size_blocks=..., ninodes=...)`, or `FsBuilder` for finer control;
`with_files` copies an image with files added or replaced. The layout is
harness/disk/fslayout.py's; the command line is harness/disk/mkfs.py.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.disk.fsimage import FsImage
from harness.disk.fslayout import DEFAULT_NINODES, DEFAULT_SIZE_BLOCKS, FsError, FsLayout, Geometry


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
        w = _ImageWriter(lay, geo)
        for inum, node in sorted(self.inodes.items()):
            w.put_inode(inum, node, self._contents(node))
        # bitmap: every block below the next free one is in use
        for b in range(w.nextblock):
            byte = geo.bmapstart * lay.bsize + (b // lay.bpb) * lay.bsize + (b % lay.bpb) // 8
            w.img[byte] |= 1 << (b % 8)
        w.put(1, lay.superblock.pack(
            magic=lay.fsmagic, size=geo.size, nblocks=geo.nblocks, ninodes=geo.ninodes,
            nlog=geo.nlog, logstart=geo.logstart, inodestart=geo.inodestart,
            bmapstart=geo.bmapstart))
        return bytes(w.img)

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


class _ImageWriter:
    """An image being written: data blocks handed out contiguously after the metadata."""

    def __init__(self, layout: FsLayout, geo: Geometry) -> None:
        self.lay = layout
        self.geo = geo
        self.img = bytearray(geo.size * layout.bsize)
        self.nextblock = geo.datastart

    def alloc(self) -> int:
        self.nextblock += 1
        return self.nextblock - 1

    def put(self, bno: int, data: bytes, offset: int = 0) -> None:
        at = bno * self.lay.bsize + offset
        self.img[at:at + len(data)] = data

    def put_numbers(self, bno: int, numbers: list[int]) -> None:
        self.put(bno, struct.pack(f"<{len(numbers)}I", *numbers))

    def put_inode(self, inum: int, node: _Inode, data: bytes) -> None:
        """The inode's data blocks, its indirect blocks and its dinode."""
        lay = self.lay
        blocks = []
        for off in range(0, len(data), lay.bsize):
            bno = self.alloc()
            self.put(bno, data[off:off + lay.bsize])
            blocks.append(bno)
        addrs = self._addrs(blocks)
        dinode = bytearray(lay.dinode.pack(
            type=node.type, major=node.major, minor=node.minor, nlink=node.nlink,
            size=len(data)))
        at = lay.dinode.offset("addrs")
        dinode[at:at + 4 * len(addrs)] = struct.pack(f"<{len(addrs)}I", *addrs)
        bno = self.geo.inodestart + inum // lay.ipb
        self.put(bno, bytes(dinode), (inum % lay.ipb) * lay.dinode.size)

    def _addrs(self, blocks: list[int]) -> list[int]:
        """dinode.addrs for these data blocks: direct, single and double indirect (the
        indirect blocks written here)."""
        lay = self.lay
        addrs = blocks[:lay.ndirect] + [0] * (lay.ndirect - len(blocks[:lay.ndirect]))
        single = blocks[lay.ndirect:lay.ndirect + lay.nindirect]
        double = blocks[lay.ndirect + lay.nindirect:]
        addrs += [0, 0]
        if single:
            addrs[lay.ndirect] = self.alloc()
            self.put_numbers(addrs[lay.ndirect], single)
        if double:
            addrs[lay.ndirect + 1] = self.alloc()
            mids = []
            for i in range(0, len(double), lay.nindirect):
                mid = self.alloc()
                self.put_numbers(mid, double[i:i + lay.nindirect])
                mids.append(mid)
            self.put_numbers(addrs[lay.ndirect + 1], mids)
        return addrs
