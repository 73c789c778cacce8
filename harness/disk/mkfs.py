"""The image builder's command line (the Makefile builds build/fs.img with it):

    python -m harness.disk.mkfs OUT.img [--size-blocks N] [--ninodes N] NAME=HOSTPATH ...
    python -m harness.disk.mkfs --check IMG      (consistency check, like fsck; a committed
                                                log is replayed first, and reported)
    python -m harness.disk.mkfs --ls IMG         (list every file)

NAME may contain '/' (parent directories are created). A /console device node is
added unless --no-console is given.
"""

from __future__ import annotations

import argparse
import sys

from harness.abi import cheader
from harness.disk.fsbuild import build_image
from harness.disk.fsimage import FsImage
from harness.disk.fslayout import DEFAULT_NINODES, DEFAULT_SIZE_BLOCKS, FsError


def _parse_entry(arg: str) -> tuple[str, str]:
    name, sep, host = arg.partition("=")
    if not sep or not name or not host:
        raise argparse.ArgumentTypeError(f"'{arg}': expected NAME=HOSTPATH")
    return name, host


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m harness.disk.mkfs",
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
