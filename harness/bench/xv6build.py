"""Building the two machines of `harness bench qemu` from an xv6-riscv checkout the user
points at (never from xv6 code in this repository):

    xv6 for QEMU   a scratch copy of the checkout, with our user_c/xv6/xv6bench.c and
                   xv6ut.c added to its user programs (its Makefile's `_%` rule, UPROGS
                   given on make's command line), built with its own Makefile: kernel/kernel
                   and fs.img
    ours           the same two sources and the checkout's user/usertests.c compiled with
                   our flags (user_c/user.mk's UCFLAGS, read from make) against our user
                   library, through an include shim written in the scratch folder that maps
                   xv6's `kernel/param.h`, `user/user.h`, ... to kernel_c/ and user_c/; an
                   image of xv6's size (FSSIZE, NINODES of the checkout's kernel/param.h and
                   mkfs.c) with our init, sh and echo, the checkout's README (tests read it)
                   and the two programs

The test names come from usertests.c's quicktests[] and slowtests[] tables.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.bench.errors import BenchError
from harness.disk.fsbuild import build_image
from harness.disk.fslayout import FsError
from harness.run.launch import ROOT

TOOLPREFIX = "riscv64-unknown-elf-"
OUR_SOURCES = ROOT / "user_c" / "xv6"
PROGRAMS = ("xv6bench", "xv6ut")
# xv6's header -> ours (kernel_c/ unless a path is given); memlayout.h's MAXVA and
# TRAPFRAME live in our vmlayout.h
SHIM: dict[str, tuple[str, ...]] = {
    "kernel/types.h": ("types.h",), "kernel/param.h": ("param.h",),
    "kernel/stat.h": ("stat.h",), "kernel/fs.h": ("fs.h",), "kernel/fcntl.h": ("fcntl.h",),
    "kernel/syscall.h": ("syscall.h",), "kernel/riscv.h": ("riscv.h",),
    "kernel/memlayout.h": ("memlayout.h", "vmlayout.h"),
    "user/user.h": ("../user_c/user.h",),
}
# our programs on the xv6-sized image besides the two (exectest and execout exec echo;
# sysbench cross-checks the host-timed loops on the guest clock)
OUR_PROGRAMS = ("init", "sh", "echo", "cat", "ls", "sysbench")


@dataclass(frozen=True)
class Tests:
    """usertests.c's test names, in its order."""

    quick: list[str]
    slow: list[str]

    @property
    def all(self) -> list[str]:
        return self.quick + self.slow


@dataclass(frozen=True)
class Built:
    """The two machines' files."""

    xv6_kernel: Path
    xv6_fs: Path     # pristine: copy it before each boot (the tests write to it)
    our_fs: Path     # the xv6-sized image for our kernel
    tests: Tests


def check_checkout(xv6: Path) -> None:
    """A clear error unless `xv6` looks like an xv6-riscv checkout."""
    need = ("Makefile", "kernel/param.h", "user/usertests.c", "user/user.h", "mkfs/mkfs.c")
    missing = [p for p in need if not (xv6 / p).is_file()]
    if missing:
        raise BenchError(f"{xv6} is not an xv6-riscv checkout (no {', '.join(missing)}); "
                         "git clone https://github.com/mit-pdos/xv6-riscv")


def parse_tests(usertests_c: str) -> Tests:
    """The names of quicktests[] and slowtests[] (`{func, "name"},` rows)."""

    def table(name: str) -> list[str]:
        m = re.search(rf"\b{name}\[\]\s*=\s*\{{(.*?)\n\}};", usertests_c, re.S)
        if not m:
            raise BenchError(f"usertests.c has no {name}[] table (an older xv6-riscv?)")
        return re.findall(r"\{\s*\w+\s*,\s*\"([^\"]+)\"\s*\}", m.group(1))

    return Tests(table("quicktests"), table("slowtests"))


def _define(path: Path, name: str) -> int:
    m = re.search(rf"#define\s+{name}\s+(\d+)", path.read_text())
    if not m:
        raise BenchError(f"no #define {name} in {path}")
    return int(m.group(1))


def _run(cmd: list[str], cwd: Path, what: str) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{what}: {exc}") from None
    if p.returncode != 0:
        raise BenchError(f"{what} failed:\n{(p.stdout + p.stderr)[-1500:]}")
    return p.stdout


def _uprogs(makefile: str) -> list[str]:
    m = re.search(r"^UPROGS\s*=((?:.*\\\n)*.*)$", makefile, re.M)
    if not m:
        raise BenchError("the xv6 Makefile has no UPROGS list")
    return m.group(1).replace("\\\n", " ").split()


def build_xv6(xv6: Path, work: Path) -> tuple[Path, Path]:
    """Copy the checkout to work/xv6, add our programs, build kernel/kernel and fs.img."""
    tree = work / "xv6"
    shutil.copytree(xv6, tree, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    for p in PROGRAMS:
        shutil.copy(OUR_SOURCES / f"{p}.c", tree / "user" / f"{p}.c")
    progs = _uprogs((tree / "Makefile").read_text()) + [f"$U/_{p}" for p in PROGRAMS]
    _run(["make", "-s", f"TOOLPREFIX={TOOLPREFIX}", f"UPROGS={' '.join(progs)}",
          "kernel/kernel", "fs.img"], tree, "building xv6 (make kernel/kernel fs.img)")
    return tree / "kernel" / "kernel", tree / "fs.img"


def _make_vars(*names: str) -> list[str]:
    """Variables of our Makefile (user_c/user.mk): the one definition of the flags."""
    out = _run(["make", "-s", "--no-print-directory",
                "--eval=print-%: ; @echo '$($*)'", *[f"print-{n}" for n in names]],
               ROOT, "reading UCFLAGS from our Makefile")
    return out.splitlines()


def write_shim(shim: Path) -> None:
    """shim/kernel/*.h and shim/user/user.h: each includes our header(s) by absolute path."""
    for name, ours in SHIM.items():
        f = shim / name
        f.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"// {name} for xv6 sources built on our kernel: our headers"]
        lines += [f'#include "{(ROOT / "kernel_c" / o).resolve()}"' for o in ours]
        f.write_text("\n".join(lines) + "\n")


def build_ours(tree: Path, work: Path) -> Path:
    """Our two programs (with the checkout's usertests.c) and the xv6-sized image."""
    out = work / "ours"
    shim = out / "shim"
    write_shim(shim)
    ucflags, ldflags, ulib, cc, ld = _make_vars("UCFLAGS", "ULDFLAGS", "ULIB", "CC", "LD")
    # xv6's sources are not ours to keep -Werror-clean under our compiler flags
    flags = [f for f in ucflags.split() if f not in ("-Werror", "-MD")]
    flags = [f"-I{shim}", *flags]
    libs = [str(ROOT / o) for o in ulib.split()]
    for o in libs:
        if not Path(o).is_file():
            raise BenchError(f"{o} is missing: build our user library with `make build`")
    files: dict[str, str | Path | bytes] = {}
    for p in PROGRAMS:
        src = tree / "user" / f"{p}.c"  # beside usertests.c, which xv6ut.c includes
        obj, exe = out / f"{p}.o", out / f"_{p}"
        _run([cc, *flags, "-c", "-o", str(obj), str(src)], ROOT, f"compiling {p}.c for ours")
        _run([ld, *ldflags.split(), "-o", str(exe), str(obj), *libs], ROOT,
             f"linking {p} for ours")
        files[p] = exe
    for p in OUR_PROGRAMS:
        files[p] = ROOT / "build" / "user" / f"_{p}"
    files["README"] = tree / "README"
    img = out / "fs.img"
    try:
        build_image(img, files, size_blocks=_define(tree / "kernel" / "param.h", "FSSIZE"),
                    ninodes=_define(tree / "mkfs" / "mkfs.c", "NINODES"))
    except FsError as exc:
        raise BenchError(f"building our xv6-sized image: {exc} (run `make build` first?)"
                         ) from None
    return img


def build(xv6: Path, work: Path) -> Built:
    """Both machines' files under `work` (a scratch folder)."""
    check_checkout(xv6)
    if shutil.which(TOOLPREFIX + "gcc") is None:
        raise BenchError(f"{TOOLPREFIX}gcc is not on PATH (the cross compiler the build needs)")
    kernel, fs = build_xv6(xv6, work)
    tests = parse_tests((work / "xv6" / "user" / "usertests.c").read_text())
    return Built(kernel, fs, build_ours(work / "xv6", work), tests)
