"""Course asset format: CFG.BIN v1/v2/legacy, every validation of the course runtime with its
own error text (course_lab.md 1.1) as a one-line pyllm error, chunk folders, zips, the writer,
and the registry / CLI integration (`--model path/to/smol.zip`, a folder in models/,
`harness models list`, `harness models export`)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from pyllm_util import native_or_skip, tiny_llama_gguf

import pyllm
from pyllm.errors import FormatError, PyllmError
from pyllm.export import export_course
from pyllm.loaders import course_assets as C
from pyllm.loaders import course_blobs as CB
from pyllm.loaders import course_config as CC
from pyllm.loaders.course_sources import find_source
from pyllm.loaders.course_writer import AssetWriter

QWEN = Path(__file__).parent / "data" / "qwen35"


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """Pristine exported folders: SMOL (2-layer Llama), QWEN (tiny_text: 3 DeltaNet + 1 full)."""
    native_or_skip()
    tmp = tmp_path_factory.mktemp("pristine")
    gguf = tiny_llama_gguf(tmp / "tiny.gguf")
    export_course(str(gguf), tmp / "SMOL", n_expect=2)
    export_course(str(QWEN / "tiny_text"), tmp / "QWEN", n_expect=2)
    return tmp


@pytest.fixture
def smol(assets, tmp_path):
    dst = tmp_path / "SMOL"
    shutil.copytree(assets / "SMOL", dst)
    return dst


@pytest.fixture
def qwen(assets, tmp_path):
    dst = tmp_path / "QWEN"
    shutil.copytree(assets / "QWEN", dst)
    return dst


def course_error(path, text: str, expect=None) -> CC.CourseFormatError:
    """Opening `path` fails with the course's `text`, as one line naming the asset."""
    with pytest.raises(CC.CourseFormatError) as ei:
        C.open_course(path, expect=expect)
    msg = str(ei.value)
    assert "\n" not in msg and ei.value.text == text, msg
    assert msg.startswith(str(path)) and msg.endswith(text)
    assert isinstance(ei.value, FormatError) and isinstance(ei.value, PyllmError)
    return ei.value


def cfg_of(path: Path) -> CC.CourseConfig:
    return CC.parse_cfg((path / "CFG.BIN").read_bytes(), "x")


def write_cfg(path: Path, **changes) -> None:
    (path / "CFG.BIN").write_bytes(CC.pack_cfg(dataclasses.replace(cfg_of(path), **changes)))


# ---------------------------------------------------------------- CFG.BIN

def test_cfg_v1_v2_legacy_round_trip():
    legacy = CC.CourseConfig.legacy()
    assert CC.parse_cfg(None, "x") == legacy and legacy.version == 0
    v2 = CC.pack_cfg(legacy)
    assert len(v2) == 84 and v2[:4] == b"CFG1"
    assert CC.parse_cfg(v2, "x") == dataclasses.replace(legacy, version=2)
    v1 = CC.pack_cfg(legacy, 1)
    assert len(v1) == 48
    assert CC.parse_cfg(v1, "x") == dataclasses.replace(legacy, version=1)
    q = dataclasses.replace(legacy, model_kind=1, flags=3)
    with pytest.raises(ValueError, match="v1 only"):
        CC.pack_cfg(q, 1)
    # the derived sizes of course_lab.md 3.2 for the Qwen3.5-0.8B config
    q = CC.CourseConfig(1, 3, 1024, 3584, 24, 8, 2, 256, 248320, 262144, 256, 1e-6, 1e7, 64,
                       16, 16, 128, 128, 4)
    assert (q.conv_dim, q.value_dim, q.attn_out_dim, q.q_rows, q.kv_dim) == \
        (6144, 2048, 2048, 4096, 512)
    assert CB.blob_bytes(CB.layer_layout(q, 0)) == 18_417_664
    assert CB.blob_bytes(CB.layer_layout(q, 1)) == 21_705_472
    assert CB.blob_bytes(CB.emb_layout(q)) == 255_272_960
    assert CB.blob_bytes(CB.layer_layout(legacy, 0)) == 3_564_288  # SmolLM, 3.1


@pytest.mark.parametrize("raw,text", [
    (b"CFG1\x02", "bad CFG.BIN size (5)"),
    (b"XXXX" + bytes(80), "unsupported CFG.BIN header"),
    (struct.pack("<II", CC.CFG_MAGIC, 1) + bytes(42), "bad CFG.BIN v1 size (50)"),
    (struct.pack("<II", CC.CFG_MAGIC, 2) + bytes(72), "bad CFG.BIN v2 size (80)"),
    (struct.pack("<II", CC.CFG_MAGIC, 3) + bytes(76), "unsupported CFG.BIN version 3"),
])
def test_cfg_header_errors(smol, raw, text):
    (smol / "CFG.BIN").write_bytes(raw)
    course_error(smol, text)


@pytest.mark.parametrize("changes,text", [
    ({"dim": 0}, "invalid model config"),
    ({"runtime_seq_len": 0}, "invalid model config"),
    ({"vocab_size": -5}, "invalid model config"),
    ({"head_dim": 33}, "head_dim must be even for RoPE"),
    ({"n_kv_heads": 3}, "head/kv-head mismatch"),
    ({"runtime_seq_len": 300, "seq_len": 299}, "runtime_seq_len exceeds seq_len"),
    ({"rope_rotary_dim": 64}, "invalid rotary dimension"),
    ({"rope_rotary_dim": 7}, "invalid rotary dimension"),
    ({"linear_conv_kernel": -1}, "invalid linear config"),
    ({"linear_num_k_heads": 2}, "incomplete linear config"),
    ({"linear_num_k_heads": 3, "linear_num_v_heads": 4, "linear_key_head_dim": 8,
      "linear_value_head_dim": 8, "linear_conv_kernel": 4}, "linear head mismatch"),
])
def test_cfg_validation_errors(smol, changes, text):
    write_cfg(smol, **changes)
    course_error(smol, text)


def test_v1_reads_and_missing_cfg_uses_legacy_defaults(smol):
    v2 = cfg_of(smol)
    (smol / "CFG.BIN").write_bytes(CC.pack_cfg(v2, 1))
    a = C.open_course(smol)
    assert a.cfg == dataclasses.replace(v2, version=1)
    a.close()
    (smol / "CFG.BIN").unlink()  # legacy SmolLM2-135M dims: the tiny embedding does not fit
    err = course_error(smol, "embedding blob size mismatch")
    assert err.where == str(smol)


# ---------------------------------------------------------------- model kind and LTY.BIN

def test_kind_checks(smol, qwen, tmp_path):
    course_error(smol, "expected Qwen3.5 assets, got SmolLM", expect=CC.KIND_QWEN)
    mislabelled = tmp_path / "x" / "SMOL"  # the folder name says which kind belongs there
    shutil.copytree(qwen, mislabelled)
    course_error(mislabelled, "expected SmolLM assets, got Qwen3.5")
    write_cfg(smol, model_kind=7)
    course_error(smol, "expected SmolLM assets, got unknown-model")
    anon = tmp_path / "assets"  # no name to go by
    shutil.copytree(smol, anon)
    course_error(anon, "expected SmolLM or Qwen3.5 assets, got unknown-model")
    with pytest.raises(CC.CourseFormatError, match="got unknown-model"):
        pyllm.load(str(anon))


def test_layer_kind_errors(smol, qwen):
    lty = qwen / "LTY.BIN"
    good = lty.read_bytes()
    lty.unlink()
    course_error(qwen, "missing LTY.BIN for Qwen")
    lty.write_bytes(b"\x01\x00")
    course_error(qwen, "bad LTY.BIN size")
    lty.write_bytes(good[:-4])
    course_error(qwen, "bad LTY.BIN layout")
    lty.write_bytes(CB.u32_list([1, 1, 1, 1, 1]))
    course_error(qwen, "bad LTY.BIN layout")
    lty.write_bytes(CB.u32_list([1, 5, 1, 0]))
    course_error(qwen, "unsupported layer kind 5")
    lty.write_bytes(good)
    write_cfg(qwen, linear_num_k_heads=0, linear_num_v_heads=0, linear_key_head_dim=0,
              linear_value_head_dim=0, linear_conv_kernel=0)
    course_error(qwen, "linear layer metadata is incomplete")
    (smol / "LTY.BIN").write_bytes(CB.u32_list([0, 1]))
    course_error(smol, "this program only supports full-attention layers")


# ---------------------------------------------------------------- blobs

def test_blob_errors(smol, qwen):
    emb = smol / "EMB.BIN"
    data = emb.read_bytes()
    emb.write_bytes(data[:-1])
    course_error(smol, "embedding blob size mismatch")
    emb.unlink()
    course_error(smol, "missing EMB.BIN")
    emb.write_bytes(data)
    (smol / "NRM.BIN").write_bytes(bytes(12))
    course_error(smol, "bad NRM.BIN size")
    (smol / "NRM.BIN").unlink()
    course_error(smol, "bad NRM.BIN size")
    (smol / "NRM.BIN").write_bytes(bytes(4 * 64))
    layer = smol / "L01.BIN"
    full = layer.stat().st_size
    layer.write_bytes(layer.read_bytes()[:-100])
    course_error(smol, f"full layer blob size mismatch ({full} vs {full - 100})")
    layer.unlink()
    course_error(smol, "missing L01.BIN")
    lin = qwen / "L00.BIN"
    size = lin.stat().st_size
    with open(lin, "ab") as f:
        f.write(b"\0" * 3)
    course_error(qwen, f"linear layer blob size mismatch ({size} vs {size + 3})")


def test_rope_and_token_list_errors(smol):
    rop = smol / "ROP.BIN"
    good = rop.read_bytes()
    rop.write_bytes(good[:-4])
    course_error(smol, "bad ROP.BIN size")
    rop.unlink()
    course_error(smol, "bad ROP.BIN size")
    rop.write_bytes(good)
    (smol / "PMT.BIN").write_bytes(struct.pack("<II", 2, 5))
    with pytest.raises(CC.CourseFormatError, match="bad PMT.BIN"):
        C.open_course(smol)
    (smol / "PMT.BIN").write_bytes(CB.u32_list([1, 64]))  # vocab is 64
    with pytest.raises(CC.CourseFormatError, match="PMT.BIN: token 1 out of range"):
        C.open_course(smol)
    (smol / "PMT.BIN").unlink()
    (smol / "EXP.BIN").unlink()
    a = C.open_course(smol)  # both optional
    assert a.prompt is None and a.expected is None
    a.close()


# ---------------------------------------------------------------- chunks

def split(path: Path, size: int) -> int:
    """Turn file `path` into a chunk folder of `size`-byte pieces; returns the count."""
    data = path.read_bytes()
    path.unlink()
    path.mkdir()
    n = 0
    for n, at in enumerate(range(0, len(data), size)):
        (path / f"{n:05d}").write_bytes(data[at:at + size])
    return n + 1


def test_chunk_folders_load_like_files(smol, assets):
    n = split(smol / "EMB.BIN", 1000)
    split(smol / "L00.BIN", 4096)
    a, b = C.open_course(smol), C.open_course(assets / "SMOL")
    assert n == 5 and f"loaded EMB.BIN from {n} chunks (4352 bytes)" in a.log
    assert np.array_equal(a.emb[1], b.emb[1]) and np.array_equal(a.emb[0], b.emb[0])
    assert np.array_equal(a.layers[0]["q_proj"][1], b.layers[0]["q_proj"][1])
    a.close()
    b.close()


def test_chunk_errors(smol):
    split(smol / "EMB.BIN", 1000)
    (smol / "EMB.BIN" / "00002").unlink()
    course_error(smol, "missing chunk EMB.BIN/00002")
    for f in (smol / "EMB.BIN").iterdir():
        f.unlink()
    course_error(smol, "missing EMB.BIN")  # an empty chunk folder is no file at all
    (smol / "EMB.BIN" / "00000").mkdir()
    course_error(smol, "chunk EMB.BIN/00000 is not a file")
    shutil.rmtree(smol / "EMB.BIN")
    os.mkfifo(smol / "EMB.BIN")
    course_error(smol, "unsupported asset type for EMB.BIN")


# ---------------------------------------------------------------- zips

def zip_folder(folder: Path, out: Path, root: str = "SMOL",
               method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(out, "w", method) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                rel = str(p.relative_to(folder))
                z.write(p, f"{root}/{rel}" if root else rel)
    return out


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zips_by_hand_load(smol, tmp_path, method):
    """Zips made by other tools (stored or deflated, with or without a top folder, chunked
    members) read the same as the folder."""
    split(smol / "EMB.BIN", 1000)
    ref = C.open_course(smol)
    for root in ("SMOL", "deep/er/SMOL", ""):
        z = zip_folder(smol, tmp_path / "m.zip", root, method)
        a = C.open_course(z)
        assert np.array_equal(a.emb[1], ref.emb[1]) and a.prompt == ref.prompt
        assert a.where == (f"{z}:SMOL" if root else str(z))
        a.close()
    ref.close()


def test_zip_errors(smol, tmp_path):
    z = zip_folder(smol, tmp_path / "smol.zip")
    data = bytearray(z.read_bytes())
    (tmp_path / "cut.zip").write_bytes(data[:len(data) // 2])  # the directory is at the end
    with pytest.raises(CC.CourseFormatError, match="not a readable zip archive"):
        C.open_course(tmp_path / "cut.zip")
    with zipfile.ZipFile(z) as zf:
        info = zf.getinfo("SMOL/L00.BIN")
    at = info.header_offset + 30 + len(info.filename) + 500
    data[at] ^= 0xFF  # one flipped bit pattern in a stored member
    (tmp_path / "flip.zip").write_bytes(data)
    with pytest.raises(CC.CourseFormatError, match=r"failed to read L00\.BIN .*damaged"):
        C.open_course(tmp_path / "flip.zip")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("README.txt", "hello")
    with pytest.raises(CC.CourseFormatError, match="no course assets in this zip"):
        pyllm.load(str(tmp_path / "other.zip"))
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("A/CFG.BIN", b"")
        zf.writestr("B/CFG.BIN", b"")
    with pytest.raises(CC.CourseFormatError, match="several asset folders"):
        C.open_course(tmp_path / "two.zip")


# ---------------------------------------------------------------- the writer

def test_writer_chunks_and_zip_equals_folder(tmp_path):
    blob = np.arange(10_000, dtype=np.uint8)
    for out in (tmp_path / "a.zip", tmp_path / "A"):
        w = AssetWriter(out, "SMOL", chunk_size=4096)
        w.add("EMB.BIN", [blob[:3000], blob[3000:]])
        w.add("NRM.BIN", [b"1234"])
        w.commit()
        assert w.chunked == {"EMB.BIN": 3} and not w.tmp.exists()
    assert sorted((tmp_path / "A" / "EMB.BIN").iterdir())[-1].stat().st_size == 10_000 - 8192
    src = find_source(tmp_path / "a.zip")
    assert np.array_equal(src.load("EMB.BIN", []), blob)
    assert bytes(src.load("NRM.BIN", [])) == b"1234"
    src.close()
    w = AssetWriter(tmp_path / "b.zip", "QWEN")
    w.add("X", [b"x"])
    w.abort()
    assert not (tmp_path / "b.zip").exists() and not w.tmp.exists()


# ---------------------------------------------------------------- registry and CLI

def test_registry_paths_names_and_models_dir(assets, tmp_path, monkeypatch):
    from pyllm.fetch import installed
    from pyllm.registry import detect, load_tokenizer, resolve

    z = zip_folder(assets / "SMOL", tmp_path / "smol.zip")
    assert detect(z) == ("course", "llama")
    assert detect(assets / "QWEN") == ("course", "qwen3_5")
    m = pyllm.load(str(z))
    assert m.info.name == "smol" and m.info.arch == "llama" and m.info.max_context == 256
    assert m.info.extra["format"] == "course" and m.info.extra["expected"]
    assert m.info.title == "SmolLM course assets (SMOL)"  # its CFG.BIN kind, its folder
    # dropped into models/: by folder name, and as the fallback of the short name
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("PYLLM_MODELS_DIR", str(models))
    shutil.copytree(assets / "QWEN", models / "QWEN")
    shutil.copy(z, models / "smol.zip")
    assert resolve("QWEN") == ("QWEN", models / "QWEN")
    assert resolve("qwen") == ("qwen", models / "QWEN")
    assert resolve("smol") == ("smol", models / "smol.zip")
    q = pyllm.load("qwen")
    assert q.info.arch == "qwen3_5" and q.info.extra["deltanet_layers"] == 3
    assert q.info.title == "Qwen3.5 course assets (QWEN)"
    assert load_tokenizer("QWEN").vocab_size == 512
    rows = {r.path.name: r for r in installed()}
    assert {"QWEN", "smol.zip"} <= set(rows) and rows["QWEN"].name == "qwen"
    assert "course assets" in rows["smol.zip"].origin
    from harness.cli.cmd_models import models as models_cli

    out = CliRunner().invoke(models_cli, ["list"])
    assert out.exit_code == 0 and "smol.zip" in out.output and "QWEN" in out.output


def test_synthetic_source_stays_labelled(tmp_path, monkeypatch):
    src = tmp_path / "synth"
    shutil.copytree(QWEN / "tiny_text", src)
    (src / "SYNTHETIC").write_text("random weights\n")
    res = export_course(str(src), tmp_path / "q.zip", n_expect=1)
    assert res.synthetic
    m = pyllm.load(str(tmp_path / "q.zip"))
    assert m.info.synthetic and "synthetic" in m.info.label


def test_export_cli(tmp_path):
    from harness.cli.cmd_models import models as models_cli

    gguf = tiny_llama_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "tiny.zip"
    run = CliRunner().invoke(models_cli, ["export", "--format", "course", str(gguf), str(out),
                                          "--prompt", "1 2 3", "--expect", "4",
                                          "--chunk-size", "8K"])
    assert run.exit_code == 0, run.output
    assert "PMT.BIN 3 ids" in run.output and "EXP.BIN 4 ids" in run.output
    assert "L00.BIN in 5 chunks" in run.output
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        info = z.read("SMOL/INFO.TXT").decode()
    assert "SMOL/INFO.TXT" in names and "SMOL/L00.BIN/00004" in names
    assert "prompt=1 2 3" in info and "kind=0 (SmolLM)" in info
    again = CliRunner().invoke(models_cli, ["export", str(gguf), str(out)])
    assert again.exit_code == 1 and "already exists (use --force" in again.output
    bad = CliRunner().invoke(models_cli, ["export", str(gguf), str(tmp_path / "x.zip"),
                                          "--cfg-version", "none"])
    assert bad.exit_code == 1 and "only fits the legacy SmolLM2-135M" in bad.output
    assert not (tmp_path / "x.zip").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]  # nothing left behind
    bad = CliRunner().invoke(models_cli, ["export", str(gguf), str(tmp_path / "y.zip"),
                                          "--seq-len", "8", "--prompt", "1 2 3 4 5",
                                          "--expect", "4"])
    assert bad.exit_code == 1 and "does not fit runtime_seq_len 8" in bad.output
