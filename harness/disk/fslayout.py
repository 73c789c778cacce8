"""The kernel's on-disk format, read from its headers (kernel_c/fs.h, stat.h, device.h):
every constant and struct layout (block size, inode and directory entry layout, superblock,
magic, file types, the console's major number), none retyped here; and where each region
of an image of a given size starts. In BSIZE blocks:

    [ boot | super | log | inode blocks | free bit map | data blocks ]

The log (kernel_c/log.c) is a struct logheader and LOGBLOCKS blocks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from harness.abi import cheader

DEFAULT_SIZE_BLOCKS = 4096
DEFAULT_NINODES = 512


class FsError(Exception):
    """A file-system image cannot be built or read as asked."""


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
