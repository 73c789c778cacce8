"""Bad host inputs: each gives one clear error line and a non-zero exit, never a traceback.

`harness run` checks what it is given before it boots: the kernel (missing, not an ELF,
an ELF for another machine), the disk image (missing, not our file system, truncated,
structurally corrupt; fsck-style, harness/disk/fsimage.py; lost blocks only warn), the model
(unknown name, missing path, truncated or malformed GGUF / safetensors, an architecture
we do not run) and its own options. `harness generate`, `fuzz` and `stress` likewise.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reliability_util import FS_IMG, KERNEL, ROOT, TINY, require_build

from harness.disk.fsimage import FsImage
from harness.disk.fslayout import FsLayout


def harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> str:
    """The run failed with exit 1 or 2 and an 'Error: ...' line naming `words`."""
    assert r.returncode in (1, 2), (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("Error: "), r.stderr
    err = lines[-1]
    for w in words:
        assert w in err, err
    return err


# ---------------------------------------------------------------- bad files


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Broken models and disk images, made once."""
    require_build()
    import gguf

    d = tmp_path_factory.mktemp("bad")
    out: dict[str, Path] = {}
    # GGUF: a real header cut short, garbage after the magic, foreign architectures
    from pyllm.registry import resolve

    _, smol = resolve("smol")
    with open(smol, "rb") as f:
        head = f.read(4 << 20)
    out["gguf_truncated"] = d / "truncated.gguf"
    out["gguf_truncated"].write_bytes(head)
    out["gguf_garbage"] = d / "garbage.gguf"
    out["gguf_garbage"].write_bytes(head[:8] + bytes(range(256)) * 64)
    for arch in ("bert", "qwen35"):
        w = gguf.GGUFWriter(str(d / f"{arch}.gguf"), arch)
        w.add_block_count(1)
        w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out[f"gguf_{arch}"] = d / f"{arch}.gguf"
    # safetensors folders (copies of the tiny Qwen3.5 checkpoint)
    for name in ("st_truncated", "st_header", "st_arch", "st_config"):
        shutil.copytree(TINY, d / name)
        out[name] = d / name
    shard = sorted((d / "st_truncated").glob("*.safetensors"))[2]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    first = sorted((d / "st_header").glob("*.safetensors"))[0]
    raw = bytearray(first.read_bytes())
    raw[:8] = struct.pack("<Q", 10**12)
    first.write_bytes(raw)
    cfg = d / "st_arch" / "config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "model_type": "bert"}))
    (d / "st_config" / "config.json").write_text("{not json")
    # disk images
    img = FS_IMG.read_bytes()
    lay = FsLayout.load()
    fs = FsImage(img)
    sb = fs.sb
    out["fs_magic"] = d / "magic.img"
    out["fs_magic"].write_bytes(img[:lay.bsize] + b"\xff" * 24 + img[lay.bsize + 24:])
    out["fs_short"] = d / "short.img"
    out["fs_short"].write_bytes(img[: len(img) // 2])
    out["fs_text"] = d / "text.img"
    out["fs_text"].write_bytes(b"hello\n" * 4096)
    # two files claiming the same data block
    files = [st for _, st in fs.walk("/") if st.type == lay.t_file and st.addrs[0]]
    a, b = files[0], files[1]
    dup = bytearray(img)
    off = (sb["inodestart"] + b.inum // lay.ipb) * lay.bsize + (b.inum % lay.ipb) * lay.dinode.size
    addr_off = off + lay.dinode.offset("addrs")
    struct.pack_into("<I", dup, addr_off, a.addrs[0])
    out["fs_shared_block"] = d / "shared.img"
    out["fs_shared_block"].write_bytes(bytes(dup))
    # a block marked in use that nobody owns: only lost space
    leak = bytearray(img)
    last = sb["size"] - 1
    leak[(sb["bmapstart"] + last // lay.bpb) * lay.bsize + (last % lay.bpb) // 8] |= 1 << (last % 8)
    out["fs_leak"] = d / "leak.img"
    out["fs_leak"].write_bytes(bytes(leak))
    # kernels
    out["kernel_text"] = d / "kernel.txt"
    out["kernel_text"].write_text("not a kernel\n")
    out["kernel_x86"] = Path(sys.executable).resolve()
    return out


@pytest.mark.parametrize("key,words", [
    ("gguf_truncated", ["truncated"]),
    ("gguf_garbage", ["malformed GGUF"]),
    ("gguf_bert", ["architecture 'bert'", "not supported"]),
    ("gguf_qwen35", ["GGUF metadata lacks qwen35."]),
    ("st_truncated", ["truncated"]),
    ("st_header", ["malformed safetensors header"]),
    ("st_arch", ["architecture 'bert'"]),
    ("st_config", ["not valid JSON"]),
])
def test_run_refuses_a_bad_model_before_booting(bad, key: str, words: list[str]) -> None:
    r = harness("run", "-q", "--model", str(bad[key]), "-c", "echo booted")
    one_line_error(r, *words)
    assert "booted" not in r.stdout


@pytest.mark.parametrize("key", ["gguf_truncated", "gguf_bert", "st_truncated", "st_config"])
def test_generate_refuses_a_bad_model(bad, key: str) -> None:
    one_line_error(harness("generate", "--model", str(bad[key]), "--tokens", "1 2", "-n", "2"))


def test_unknown_and_missing_models() -> None:
    require_build()
    one_line_error(harness("run", "-q", "--model", "gpt5", "-c", "true"), "unknown model 'gpt5'")
    one_line_error(harness("run", "-q", "--model", "/nonexistent/m.gguf", "-c", "true"),
                   "no such file")
    one_line_error(harness("generate", "--model", "gpt5", "--tokens", "1"), "unknown model")


@pytest.mark.parametrize("key,words", [
    ("fs_magic", ["not a usable file system", "superblock magic"]),
    ("fs_short", ["not a usable file system"]),
    ("fs_text", ["not a usable file system"]),
    ("fs_shared_block", ["is corrupt", "used by inodes"]),
])
def test_run_refuses_a_corrupt_disk_image(bad, key: str, words: list[str]) -> None:
    one_line_error(harness("run", "-q", "--fs", str(bad[key]), "-c", "echo booted"), *words)


def test_lost_blocks_only_warn(bad) -> None:
    r = harness("run", "-q", "--fs", str(bad["fs_leak"]), "-c", "echo booted")
    assert r.returncode == 0 and r.stdout.endswith("booted\n"), r.stderr
    assert "warning: disk image" in r.stderr and "marked in the bitmap" in r.stderr


def test_bad_kernels(bad) -> None:
    one_line_error(harness("run", "-q", "--kernel", "/nonexistent/kernel.elf", "-c", "true"),
                   "kernel not found")
    one_line_error(harness("run", "-q", "--kernel", str(bad["kernel_text"]), "-c", "true"),
                   "ELF")
    one_line_error(harness("run", "-q", "--kernel", str(bad["kernel_x86"]), "-c", "true"),
                   "not an rv64 ELF")


def test_bad_reliability_options() -> None:
    require_build()
    assert KERNEL.exists()
    one_line_error(harness("run", "-q", "--model", str(TINY), "--ai-fault", "explode=1",
                           "-c", "true"), "unknown fault 'explode=1'")
    one_line_error(harness("run", "-q", "--model", str(TINY), "--ai-fault", "fail=2",
                           "-c", "true"), "between 0 and 1")
    one_line_error(harness("run", "-q", "--ai-fault", "fail=0.1", "-c", "true"),
                   "needs the AI device")
    one_line_error(harness("run", "-q", "--hang-timeout", "-1", "-c", "true"), "hang-timeout")
    one_line_error(harness("fuzz", "--faults", "fail=0.1"), "--faults needs --model")
    one_line_error(harness("stress", "--model", "gpt5", "-t", "1"), "unknown model")
