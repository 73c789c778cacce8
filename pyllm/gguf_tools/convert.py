"""llama.cpp's converter and quantizer, run on our files (see the package docstring).

    src = llamacpp_source()                     # the sdist's vendor/llama.cpp (fetched once)
    convert(hf_dir, "x.F32.gguf", "f32")        # its convert_hf_to_gguf.py, in a child process
    quantize("x.F32.gguf", "x.Q4_K_M.gguf", "Q4_K_M")   # llama_model_quantize (the wheel)

The source distribution comes from PyPI with pip (`pip download --no-binary`), unpacked
under `cache_root()`; PYLLM_LLAMACPP_SRC points at an unpacked llama.cpp tree instead. The
converter needs torch and transformers (the `ref` extra), the quantizer llama-cpp-python
(the `llamacpp` extra). Both run in child processes: a converter or quantizer failure is
one error line, never a dead harness.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from pyllm.errors import PyllmError

SDIST_VERSION = "0.3.36"  # the llama-cpp-python release whose wheel is the reference engine
# llama_model_quantize's file types by the names llama.cpp's `llama-quantize` uses
FTYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
          "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16")


class ToolError(PyllmError):
    """llama.cpp's converter or quantizer could not run or failed."""


def cache_root() -> Path:
    """Where the sdist is unpacked: PYLLM_REF_CACHE, else ~/.cache/pyllm."""
    env = os.environ.get("PYLLM_REF_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "pyllm"


def llamacpp_source(fetch: bool = True) -> Path:
    """The llama.cpp tree of the llama-cpp-python sdist (convert_hf_to_gguf.py, conversion/,
    gguf-py/), downloaded and unpacked on first use."""
    env = os.environ.get("PYLLM_LLAMACPP_SRC")
    if env:
        src = Path(env)
        if not (src / "convert_hf_to_gguf.py").exists():
            raise ToolError(f"PYLLM_LLAMACPP_SRC={env}: no convert_hf_to_gguf.py there")
        return src
    root = cache_root() / f"llama_cpp_python-{SDIST_VERSION}"
    src = root / "vendor" / "llama.cpp"
    if (src / "convert_hf_to_gguf.py").exists():
        return src
    if not fetch:
        raise ToolError(f"llama.cpp's converter is not unpacked in {root}")
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
               "llama-cpp-python", f"llama-cpp-python=={SDIST_VERSION}", "-d", tmp]
        p = subprocess.run(cmd, capture_output=True, text=True)
        tars = list(Path(tmp).glob("*.tar.gz"))
        if p.returncode or not tars:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            raise ToolError(f"cannot fetch the llama-cpp-python {SDIST_VERSION} sdist: {last}")
        with tarfile.open(tars[0]) as tf:
            tf.extractall(tmp, filter="data")
        os.replace(Path(tmp) / root.name, root)  # atomic: a half-unpacked tree is never seen
    return src


def _run(cmd: list[str], what: str, timeout: float) -> None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what}: no result within {timeout:.0f} s") from None
    if p.returncode:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()] or ["no message"]
        raise ToolError(f"{what} failed (exit {p.returncode}): {lines[-1]}")


def convert(hf_dir: str | os.PathLike[str], out: str | os.PathLike[str], outtype: str = "f32",
            name: str = "", description: str = "", timeout: float = 3600) -> Path:
    """llama.cpp's convert_hf_to_gguf.py on an HF checkpoint folder -> `out` (written to a
    temporary name first, so an interrupted run leaves no half file). `description` goes
    to general.description (through the converter's --metadata override)."""
    import json

    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    meta = out.with_name(out.name + ".meta.json")
    meta.write_text(json.dumps({"general.description": description} if description else {}))
    driver = Path(__file__).with_name("driver.py")
    try:
        _run([sys.executable, str(driver), str(llamacpp_source()), str(hf_dir), str(tmp),
              outtype, str(meta), name], f"convert_hf_to_gguf.py {hf_dir}", timeout)
    finally:
        meta.unlink(missing_ok=True)
    os.replace(tmp, out)
    return out


QUANTIZE = """
import ctypes, sys
import llama_cpp as L
p = L.llama_model_quantize_default_params()
p.ftype = getattr(L, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
p.nthread = int(sys.argv[4])
p.allow_requantize = True  # a quantized source (SmolLM2's Q4_1 file) is dequantized first
sys.exit(L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
"""


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str,
             threads: int = 2, timeout: float = 3600) -> Path:
    """llama.cpp's llama_model_quantize: `src` (an F32/F16/BF16 GGUF, or a quantized one,
    which it dequantizes first) -> `dst` of file type `ftype` (one of FTYPES, e.g. Q4_K_M:
    Q4_K with Q6_K where llama.cpp wants more bits)."""
    if ftype not in FTYPES:
        raise ToolError(f"unknown quantization '{ftype}' (choose {', '.join(FTYPES)})")
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".part")
    _run([sys.executable, "-c", QUANTIZE, str(src), str(tmp), ftype, str(threads)],
         f"llama_model_quantize {ftype}", timeout)
    os.replace(tmp, dst)
    return dst
