"""Hostile disk images: the kernel refuses a bad superblock or log header at mount with a
message, and a bad inode, block number or directory entry fails only the system call
that meets it; the image fuzzer's short run finds no panic or hang (the long run is in the
soak set, -m soak)."""

from __future__ import annotations

import struct

import pytest

from harness.disk.diskboot import boot_disk
from harness.disk.fsimage import FsImage
from harness.disk.imagefuzz import base_image, run_imagefuzz
from harness.machine.config import Exit
from tests.reliability_util import FS_IMG, require_build


@pytest.fixture(scope="module")
def base() -> bytes:
    require_build("ls", "cat", "wc", "rm")
    return base_image(FS_IMG)


def _poke(img: bytearray, off: int, fmt: str, value: int) -> None:
    struct.pack_into(fmt, img, off, value)


def _inode_field(fs: FsImage, inum: int, name: str) -> int:
    lay = fs.layout
    return ((fs.sb["inodestart"] + inum // lay.ipb) * lay.bsize
            + (inum % lay.ipb) * lay.dinode.size + lay.dinode.offset(name))


def _dirent_inum(fs: FsImage, path: str, slot: int) -> int:
    """Offset in the image of the inum of entry `slot` of directory `path`."""
    blk = fs.file_blocks(fs.stat(path))[0][0]
    de = fs.layout.dirent
    return blk * fs.layout.bsize + slot * de.size + de.offset("inum")


def _run(img: bytes | bytearray, cmd: str) -> tuple[Exit, int, str]:
    b = boot_disk(img, cmd, timeout=60)
    assert b.panic == "", b.output
    return b.exit, b.status, b.output


@pytest.mark.parametrize("field,value", [("magic", 0), ("size", 1 << 30), ("ninodes", 0),
                                         ("bmapstart", 3), ("nlog", 2)])
def test_bad_superblock_is_refused_at_mount(base: bytes, field: str, value: int) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    _poke(img, fs.layout.bsize + fs.layout.superblock.offset(field), "<I", value)
    ex, status, out = _run(img, "echo booted")
    assert (ex, status) == (Exit.POWEROFF, 1)
    assert "fsinit: refusing the disk" in out and "booted" not in out


def test_corrupt_log_header_is_refused(base: bytes) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    head = fs.sb["logstart"] * fs.layout.bsize
    _poke(img, head, "<I", 1)
    _poke(img, head + 4, "<I", fs.sb["size"] + 5)      # a home block past the disk
    ex, status, out = _run(img, "echo booted")
    assert (ex, status) == (Exit.POWEROFF, 1) and "corrupt log header" in out


def test_corrupt_inode_fails_only_the_call(base: bytes) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    inum = fs.stat("/fz/one").inum
    _poke(img, _inode_field(fs, inum, "type"), "<h", 7)
    ex, status, out = _run(img, "cat /fz/one; rm /fz/one; echo after; cat /fz/sub/x")
    assert ex == Exit.POWEROFF and status == 0
    assert f"inode {inum} is corrupt (bad type)" in out
    assert "cat: cannot open /fz/one" in out
    assert "after\nin a subdirectory" in out


def test_block_number_past_the_disk_fails_the_read(base: bytes) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    st = fs.stat("/fz/big")
    ind = st.addrs[fs.layout.ndirect]
    _poke(img, ind * fs.layout.bsize + 4, "<I", fs.sb["size"] + 100)   # its 13th block
    ex, status, out = _run(img, "wc /fz/big; echo after >/fz/big2; cat /fz/big2")
    assert ex == Exit.POWEROFF and status == 0
    assert "outside the disk" in out and "after" in out
    assert f" {12 * fs.layout.bsize} /fz/big" in out        # read up to the bad block


def test_directory_entry_naming_itself_does_not_deadlock(base: bytes) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    # the entry of x now names /fz/sub itself
    _poke(img, _dirent_inum(fs, "/fz/sub", 2), "<H", fs.stat("/fz/sub").inum)
    ex, status, out = _run(img, "ls /fz/sub/x; rm /fz/sub/x; echo after")
    assert ex == Exit.POWEROFF and "after" in out


def test_inode_number_past_the_table_is_not_followed(base: bytes) -> None:
    fs = FsImage(base)
    img = bytearray(base)
    for slot in range(2, fs.stat("/fz").size // fs.layout.dirent.size):
        _poke(img, _dirent_inum(fs, "/fz", slot), "<H", 0xFFFF)
    ex, status, out = _run(img, "ls /fz; cat /fz/one; echo after")
    assert ex == Exit.POWEROFF and "cannot open /fz/one" in out and "after" in out


def test_fuzzer_short_run(base: bytes) -> None:
    rep = run_imagefuzz(images=25, seed=1)
    assert rep.failures == [], rep.failures
    assert rep.verdicts["ran"] > 0 and rep.verdicts["refused"] > 0


@pytest.mark.soak
def test_soak_imagefuzz_thousands() -> None:
    rep = run_imagefuzz(images=2000, seed=11)
    assert rep.failures == [], rep.failures[:5]
