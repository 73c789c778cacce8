"""The HF safetensors loader: dtypes read by hand, shards, and one clear line for every kind
of broken checkpoint (nothing half-loaded, no traceback for the user)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pyllm.errors import FormatError, ModelNotFoundError, PyllmError, UnsupportedArchitectureError
from pyllm.loaders.safetensors import (
    SafetensorsFile,
    f32_to_bf16,
    open_safetensors,
    write_safetensors,
)
from pyllm.models.qwen35 import from_hf
from pyllm.quants import bf16_to_f32

DATA = Path(__file__).parent / "data" / "qwen35"


def copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def rewrite(folder: Path, edit) -> None:
    """Load model.safetensors of a single-file checkpoint, edit its {name: (dtype, array)}
    dict, write it back with our writer."""
    f = SafetensorsFile(folder / "model.safetensors")
    tensors = {n: (t.dtype, np.array(f.raw(n))) for n, t in f.tensors.items()}
    f.close()
    edit(tensors)
    write_safetensors(folder / "model.safetensors", tensors)


def one_line_error(exc_info, *parts: str) -> None:
    msg = str(exc_info.value)
    assert "\n" not in msg
    for p in parts:
        assert p in msg, msg


def test_bf16_conversion_is_exact_and_rounds_like_torch():
    x = np.array([1.0, -2.5, 3.14159, 1e-20, 65504.0, np.inf, -0.0], np.float32)
    bits = f32_to_bf16(x)
    back = bf16_to_f32(bits)
    assert np.array_equal(bf16_to_f32(f32_to_bf16(back)), back)  # bf16 values are fixed points
    assert back[0] == 1.0 and back[1] == -2.5 and back[5] == np.inf
    assert abs(back[2] - 3.140625) < 1e-7  # nearest bf16 of pi-ish
    tie = np.array([1.0 + 2 ** -8], np.float32)  # exactly half-way: round to even (down)
    assert bf16_to_f32(f32_to_bf16(tie))[0] == 1.0


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_dtypes_load_to_the_same_values(tmp_path, dtype):
    """A checkpoint re-saved as f16 / bf16 loads exactly those rounded values."""
    src = copy("tiny_mm", tmp_path)

    def convert(t):
        for n, (d, a) in list(t.items()):
            f = bf16_to_f32(a) if d == "BF16" else a.astype(np.float32)
            t[n] = {"F32": ("F32", f), "F16": ("F16", f.astype(np.float16)),
                    "BF16": ("BF16", f32_to_bf16(f))}[dtype]

    rewrite(src, convert)
    ck = open_safetensors(src)
    name = "model.language_model.layers.0.mlp.down_proj.weight"
    assert ck.tensors[name].type == dtype
    ref = bf16_to_f32(SafetensorsFile(DATA / "tiny_mm" / "model.safetensors").raw(name))
    got = from_hf(src, backend="numpy-f32", cache=False).w.layers[0].down.w
    assert np.array_equal(got, ref)  # bf16 values are exact in f16 range here, and in f32


def test_sharded_checkpoint_reads_every_shard():
    ck = open_safetensors(DATA / "tiny_text")
    index = json.loads((DATA / "tiny_text" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) <= set(ck.tensors)
    assert len(ck.keepalive) == len(set(index["weight_map"].values())) > 1


def test_missing_folder(tmp_path):
    with pytest.raises(ModelNotFoundError) as e:
        from_hf(tmp_path / "nope")
    one_line_error(e, "nope", "no such file")


def test_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError) as e:
        from_hf(tmp_path)
    one_line_error(e, "no config.json")


def test_bad_config_json(tmp_path):
    src = copy("tiny_mm", tmp_path)
    (src / "config.json").write_text("{not json")
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "config.json", "not valid JSON")


def test_missing_weights(tmp_path):
    src = copy("tiny_mm", tmp_path)
    (src / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError) as e:
        from_hf(src)
    one_line_error(e, "no model.safetensors")


def test_missing_shard(tmp_path):
    src = copy("tiny_text", tmp_path)
    (src / "model-00003-of-00006.safetensors").unlink()
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "missing shard file model-00003-of-00006.safetensors")


def test_index_names_a_tensor_its_shard_lacks(tmp_path):
    src = copy("tiny_text", tmp_path)
    idx = json.loads((src / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.layers.9.extra.weight"] = "model-00001-of-00006.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "model.layers.9.extra.weight", "not stored")


def test_truncated_file(tmp_path):
    src = copy("tiny_mm", tmp_path)
    p = src / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-1000])
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, str(p), "truncated")


@pytest.mark.parametrize("blob,what", [
    (b"\x05\x00", "only 2 bytes"),
    ((10**9).to_bytes(8, "little") + b"{}", "header length"),
    ((5).to_bytes(8, "little") + b"{nope", "bad JSON"),
    ((2).to_bytes(8, "little") + b"[]", "not a JSON object"),
])
def test_malformed_header(tmp_path, blob, what):
    src = copy("tiny_mm", tmp_path)
    (src / "model.safetensors").write_bytes(blob)
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "model.safetensors", what)


def test_header_with_inconsistent_offsets(tmp_path):
    p = tmp_path / "x.safetensors"
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}
    blob = json.dumps(header).encode()
    p.write_bytes(len(blob).to_bytes(8, "little") + blob + bytes(16))
    with pytest.raises(FormatError) as e:
        SafetensorsFile(p)
    one_line_error(e, "'a' is F32 [4] = 16 bytes but its offsets span 12")


def test_wrong_architecture(tmp_path):
    src = copy("tiny_mm", tmp_path)
    conf = json.loads((src / "config.json").read_text())
    conf["model_type"], conf["architectures"] = "llama", ["LlamaForCausalLM"]
    (src / "config.json").write_text(json.dumps(conf))
    with pytest.raises(UnsupportedArchitectureError) as e:
        from_hf(src)
    one_line_error(e, "llama", "not Qwen3.5")


def test_missing_tensor(tmp_path):
    src = copy("tiny_mm", tmp_path)
    rewrite(src, lambda t: t.pop("model.language_model.layers.1.self_attn.k_norm.weight"))
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "required tensor 'model.language_model.layers.1.self_attn.k_norm.weight'",
                   "missing")


def test_misshaped_tensor(tmp_path):
    src = copy("tiny_mm", tmp_path)

    def cut(t):
        d, a = t["model.language_model.layers.0.linear_attn.in_proj_qkv.weight"]
        t["model.language_model.layers.0.linear_attn.in_proj_qkv.weight"] = (d, a[:-1])

    rewrite(src, cut)
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "in_proj_qkv.weight", "shape [95, 64]", "expected [96, 64]")


def test_non_float_tensor(tmp_path):
    src = copy("tiny_mm", tmp_path)

    def to_int(t):
        _, a = t["model.language_model.norm.weight"]
        t["model.language_model.norm.weight"] = ("I16", a.view(np.int16))

    rewrite(src, to_int)
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "norm.weight", "is I16")


def test_incomplete_config(tmp_path):
    src = copy("tiny_mm", tmp_path)
    conf = json.loads((src / "config.json").read_text())
    del conf["text_config"]["linear_num_key_heads"]
    (src / "config.json").write_text(json.dumps(conf))
    with pytest.raises(FormatError) as e:
        from_hf(src)
    one_line_error(e, "incomplete Qwen3.5 config", "linear_num_key_heads")


def test_every_error_is_a_pyllm_error(tmp_path):
    """The CLI prints PyllmError messages; nothing above may escape as another type."""
    for exc in (FormatError, ModelNotFoundError, UnsupportedArchitectureError):
        assert issubclass(exc, PyllmError)


def test_synthetic_flag_from_config(tmp_path):
    src = copy("tiny_mm", tmp_path)
    conf = json.loads((src / "config.json").read_text())
    conf["pyllm_synthetic"] = {"seed": 1}
    (src / "config.json").write_text(json.dumps(conf))
    m = from_hf(src, backend="numpy-f32", cache=False)
    assert m.info.synthetic and m.info.label.endswith("(synthetic weights)")


def test_a_qwen35_gguf_without_its_metadata_is_refused_with_the_reason(tmp_path):
    """Qwen3.5 GGUF files are read (tests/test_gguf*.py); one that lacks the hyper-
    parameters llama.cpp's converter writes gets one line naming the missing key."""
    gguf = pytest.importorskip("gguf")
    from pyllm.registry import load

    p = tmp_path / "qwen35.gguf"
    w = gguf.GGUFWriter(str(p), "qwen35")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(FormatError) as e:
        load(p)
    one_line_error(e, "GGUF metadata lacks qwen35.")


def test_mapping_asks_for_huge_pages(tmp_path):
    """The file is mapped with MADV_HUGEPAGE (VmFlags "hg" in /proc/self/smaps), so weights
    streamed by the matmul kernels come in 2 MB pages where the kernel can give them."""
    import mmap
    import re

    smaps = Path("/proc/self/smaps")
    if not smaps.exists() or not hasattr(mmap, "MADV_HUGEPAGE"):
        pytest.skip("no /proc/self/smaps or MADV_HUGEPAGE here")
    p = tmp_path / "big.safetensors"
    write_safetensors(p, {"w": ("F32", np.zeros((1024, 1024), np.float32))})  # 4 MB
    f = SafetensorsFile(p)
    start = f.raw("w").ctypes.data
    for entry in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", smaps.read_text()):
        lo, hi = (int(a, 16) for a in entry.split(None, 1)[0].split("-"))
        if lo <= start < hi:
            flags = re.search(r"^VmFlags:(.*)$", entry, re.M)
            assert flags is not None and "hg" in flags.group(1).split(), entry
            break
    else:
        pytest.fail("the file's mapping is not in /proc/self/smaps")
    f.close()
