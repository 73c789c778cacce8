"""harness.disk.fsimage: the host-side file-system image builder and checker.

The layout comes from kernel_c/fs.h; these tests check that images round-trip through
the reader, that every size class of file (direct, indirect, double indirect blocks)
lands intact, that the checker (fsck) accepts what the builder makes and catches
corruption, and that bad requests fail with a clear FsError.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from harness.abi import cheader
from harness.disk.fsbuild import FsBuilder, build_image, with_files
from harness.disk.fsimage import FsImage
from harness.disk.fslayout import FsError, FsLayout
from harness.disk.mkfs import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def layout() -> FsLayout:
    return FsLayout.load()


def test_layout_comes_from_fs_h(layout: FsLayout) -> None:
    fs = cheader.load("fs.h")
    assert layout.bsize == fs["BSIZE"]
    assert layout.ndirect == fs["NDIRECT"]
    assert layout.nindirect == layout.bsize // 4
    assert layout.maxfile == fs["MAXFILE"]
    assert layout.ipb * layout.dinode.size == layout.bsize
    assert layout.dirent.size == 2 + layout.dirsiz
    assert layout.console_major == cheader.load("device.h")["CONSOLE"]


def _sizes(layout: FsLayout) -> list[int]:
    """File sizes around every boundary of the block map."""
    bs, nd, ni = layout.bsize, layout.ndirect, layout.nindirect
    return [0, 1, bs - 1, bs, bs + 1, nd * bs, nd * bs + 1, (nd + ni) * bs,
            (nd + ni) * bs + 1, (nd + ni + 3) * bs + 17]


def test_round_trip_every_size_class(tmp_path: Path, layout: FsLayout) -> None:
    rng = random.Random(1)
    files = {f"f{n}": rng.randbytes(n) for n in _sizes(layout)}
    out = tmp_path / "fs.img"
    build_image(out, files, size_blocks=2048, ninodes=64)
    img = FsImage(out)
    for name, data in files.items():
        assert img.read(name) == data, name
        assert img.stat(name).size == len(data)
    assert img.check() == []
    big = img.stat(f"f{_sizes(layout)[-1]}")
    assert big.addrs[layout.ndirect] and big.addrs[layout.ndirect + 1]


def test_nested_names_create_directories(tmp_path: Path) -> None:
    out = tmp_path / "fs.img"
    build_image(out, {"bin/ls": b"LS", "bin/sub/x": b"X", "/etc/motd": b"hi", "top": b"t"})
    img = FsImage(out)
    assert img.listdir("/") == ["bin", "console", "etc", "top"]
    assert img.listdir("/bin") == ["ls", "sub"]
    assert img.read("/bin/sub/x") == b"X"
    assert img.read("etc/motd") == b"hi"
    # directory link counts follow the kernel's rule: 1 + number of subdirectories
    assert img.stat("/").nlink == 1 + 2
    assert img.stat("/bin").nlink == 1 + 1
    assert img.stat("/bin/sub").nlink == 1
    ents = img.entries(img.stat("/bin/sub").inum)
    assert ents["."] == img.stat("/bin/sub").inum
    assert ents[".."] == img.stat("/bin").inum
    assert img.check() == []


def test_console_node(tmp_path: Path, layout: FsLayout) -> None:
    build_image(tmp_path / "a.img", {})
    st = FsImage(tmp_path / "a.img").stat("console")
    assert (st.type, st.major, st.minor) == (layout.t_device, layout.console_major, 0)
    build_image(tmp_path / "b.img", {}, console=False)
    assert FsImage(tmp_path / "b.img").listdir("/") == []


def test_superblock_and_geometry(tmp_path: Path, layout: FsLayout) -> None:
    fs = build_image(tmp_path / "fs.img", {"a": b"x" * 5000}, size_blocks=1000, ninodes=100)
    data = (tmp_path / "fs.img").read_bytes()
    assert len(data) == 1000 * layout.bsize
    sb = layout.superblock.unpack(data[layout.bsize:2 * layout.bsize])
    assert sb["magic"] == layout.fsmagic
    assert sb["size"] == 1000 and sb["ninodes"] == 100
    assert sb["logstart"] == 2 and sb["nlog"] == layout.logsize
    assert sb["inodestart"] == 2 + layout.logsize
    assert sb["bmapstart"] == sb["inodestart"] + 100 // layout.ipb + 1
    assert sb["nblocks"] == 1000 - fs.geo.datastart


def test_check_catches_corruption(tmp_path: Path, layout: FsLayout) -> None:
    out = tmp_path / "fs.img"
    build_image(out, {"a": b"a" * 3000, "b": b"b" * 10})
    good = bytearray(out.read_bytes())
    img = FsImage(bytes(good))
    sb = img.sb

    # a used data block marked free in the bitmap
    bad = bytearray(good)
    blk = img.stat("a").addrs[0]
    bad[sb["bmapstart"] * layout.bsize + blk // 8] &= ~(1 << (blk % 8))
    assert any("free in the bitmap" in p for p in FsImage(bytes(bad)).check())

    # a wrong link count
    bad = bytearray(good)
    inum = img.stat("b").inum
    off = sb["inodestart"] * layout.bsize + inum * layout.dinode.size
    off += layout.dinode.offset("nlink")
    struct.pack_into("<h", bad, off, 5)
    assert any("nlink 5" in p for p in FsImage(bytes(bad)).check())

    # two files sharing a block
    bad = bytearray(good)
    binum = img.stat("b").inum
    off = sb["inodestart"] * layout.bsize + binum * layout.dinode.size
    off += layout.dinode.offset("addrs")
    struct.pack_into("<I", bad, off, blk)
    assert any("used by inodes" in p for p in FsImage(bytes(bad)).check())


def test_errors(tmp_path: Path, layout: FsLayout) -> None:
    with pytest.raises(FsError, match="DIRSIZ"):
        FsBuilder().add_file("x" * (layout.dirsiz + 1), b"")
    with pytest.raises(FsError, match="twice"):
        fs = FsBuilder()
        fs.add_file("a", b"")
        fs.add_file("a", b"")
    with pytest.raises(FsError, match="not a directory"):
        fs = FsBuilder()
        fs.add_file("a", b"")
        fs.add_file("a/b", b"")
    with pytest.raises(FsError, match="out of inodes"):
        fs = FsBuilder(ninodes=4)
        for i in range(4):
            fs.add_file(f"f{i}", b"")
    fs = FsBuilder(size_blocks=100)
    fs.add_file("big", bytes(200 * layout.bsize))
    with pytest.raises(FsError, match="larger --size-blocks"):
        fs.to_bytes()
    with pytest.raises(FsError, match="largest file"):
        FsBuilder().add_file("huge", bytes(layout.maxfile * layout.bsize + 1))
    with pytest.raises(FsError, match=r"'\.'"):
        FsBuilder().add_file("a/../b", b"")
    with pytest.raises(FsError, match="magic"):
        FsImage(bytes(4 * layout.bsize))


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = tmp_path / "hello.txt"
    host.write_bytes(b"hello\n")
    out = tmp_path / "fs.img"
    assert main([str(out), "--size-blocks", "500", "--ninodes", "32",
                 f"dir/hello={host}", f"hello={host}"]) == 0
    assert FsImage(out).read("dir/hello") == b"hello\n"
    assert main(["--check", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main([str(out), f"x={tmp_path / 'missing'}"]) == 1
    assert "cannot read" in capsys.readouterr().err
    # the documented module entry point
    r = subprocess.run([sys.executable, "-m", "harness.disk.mkfs", "--ls", str(out)],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    assert "/dir/hello" in r.stdout


def test_built_image_matches_user_programs(tmp_path: Path) -> None:
    """The image `make` builds (if it has been built) passes the checker."""
    img = ROOT / "build" / "fs.img"
    if not img.exists():
        pytest.skip("build/fs.img not built")
    fs = FsImage(img)
    assert "init" in fs.listdir("/")
    assert fs.read("init")[:4] == b"\x7fELF"


def test_with_files_copies_everything_and_adds(tmp_path: Path, layout: FsLayout) -> None:
    """with_files: same geometry, every directory, file, device node and hard link kept,
    the new files added and a given one replaced."""
    fs = FsBuilder(2048, 64)
    fs.mknod("console", layout.console_major, 0)
    a = fs.add_file("bin/a", bytes(range(256)) * 300)     # indirect blocks
    fs._link("bin/also_a", a)                                # a hard link
    fs.add_file("keep.txt", b"kept")
    fs.add_file("old.txt", b"old")
    fs.mkdir("empty/dir")
    out = FsImage(with_files(fs.to_bytes(), {"AI/SMOL/PMT.BIN": b"\x01\x00\x00\x00\x07\x00\x00\x00",
                                             "old.txt": b"new"}))
    assert out.check() == []
    assert (out.sb["size"], out.sb["ninodes"]) == (2048, 64)
    assert out.read("/bin/a") == bytes(range(256)) * 300
    assert out.stat("/bin/also_a").inum == out.stat("/bin/a").inum
    assert out.stat("/bin/a").nlink == 2
    assert out.read("/keep.txt") == b"kept" and out.read("/old.txt") == b"new"
    assert out.stat("/console").major == layout.console_major
    assert out.listdir("/empty") == ["dir"]
    assert out.read("/AI/SMOL/PMT.BIN") == b"\x01\x00\x00\x00\x07\x00\x00\x00"


def test_with_files_grow_keeps_the_free_space() -> None:
    """with_files(grow=True): files larger than the free space fit, and the free space the
    image had is still there (the guest tokenizer's vocabulary, harness/cli/cmd_run.py)."""
    fs = FsBuilder(1024, 32)
    fs.add_file("a", b"x" * 100_000)
    img = fs.to_bytes()
    used, free = FsImage(img).usage()[0], FsImage(img).sb["nblocks"] - FsImage(img).usage()[0]
    big = {"AI/QWEN/VOCAB.TOK": bytes(range(256)) * 8000}  # 2 MB, far beyond the image
    with pytest.raises(FsError, match="larger --size-blocks"):
        with_files(img, big)
    out = FsImage(with_files(img, big, grow=True))
    assert out.check() == []
    assert out.read("/AI/QWEN/VOCAB.TOK") == big["AI/QWEN/VOCAB.TOK"]
    assert out.read("/a") == b"x" * 100_000
    assert out.sb["nblocks"] - out.usage()[0] >= free
    assert used < out.usage()[0]


def _commit(img: bytearray, layout: FsLayout, sb: dict, homes: dict[int, bytes]) -> None:
    """Write a committed transaction into the log, as kernel_c/log.c would leave it."""
    bs = layout.bsize
    head = sb["logstart"] * bs
    struct.pack_into("<I", img, head, len(homes))
    for i, (home, data) in enumerate(homes.items()):
        struct.pack_into("<I", img, head + 4 + 4 * i, home)
        at = (sb["logstart"] + 1 + i) * bs
        img[at:at + bs] = data


def test_committed_log_is_replayed_and_reported(tmp_path: Path, layout: FsLayout,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fs.img"
    build_image(out, {"a": b"old contents"})
    img = bytearray(out.read_bytes())
    fs = FsImage(bytes(img))
    bno = fs.file_blocks(fs.stat("a"))[0][0]
    _commit(img, layout, fs.sb, {bno: b"new contents".ljust(layout.bsize, b"\0")})
    out.write_bytes(img)
    replayed = FsImage(out)
    assert replayed.pending == [bno]
    assert replayed.read("a") == b"new contents"
    assert replayed.check() == []
    assert main(["--check", str(out)]) == 0
    assert "committed transaction of 1 blocks" in capsys.readouterr().out


def test_corrupt_log_header_is_an_error(tmp_path: Path, layout: FsLayout) -> None:
    out = tmp_path / "fs.img"
    build_image(out, {"a": b"x"})
    img = bytearray(out.read_bytes())
    sb = FsImage(bytes(img)).sb
    _commit(img, layout, sb, {sb["size"] + 3: bytes(layout.bsize)})
    with pytest.raises(FsError, match="outside the file system"):
        FsImage(bytes(img))
    struct.pack_into("<I", img, sb["logstart"] * layout.bsize, layout.logblocks + 1)
    with pytest.raises(FsError, match="the log holds"):
        FsImage(bytes(img))
