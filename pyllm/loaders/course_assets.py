"""The OS course's model assets (course_lab.md section 3): a whole asset folder read and
validated (`open_course`), and the cheap looks at one that the registry and the CLI take.

An asset folder (`SMOL/`, `QWEN/`, any folder holding CFG.BIN or EMB.BIN, or a folder with
exactly one such sub-folder) or a zip holding one (`smol.zip` -> `SMOL/...`) contains, all
little-endian:

    CFG.BIN    "CFG1", version 1 (48 bytes, SmolLM) or 2 (84 bytes); absent -> legacy SmolLM
    EMB.BIN    token embedding, also the (tied) LM head: a qmat vocab x dim
    NRM.BIN    final RMSNorm weight, dim f32
    ROP.BIN    RoPE table, runtime_seq_len x rotary_dim f32; row pos = cos[half] | sin[half],
               angle pos * theta^(-2i/rotary_dim), rotate-half pairing (x[i], x[i + half])
    LTY.BIN    u32 n_layers, then n_layers u32 kinds (0 full attention, 1 Gated DeltaNet);
               required for Qwen, absent -> all full
    Lxx.BIN    one blob per layer (xx = index, at least 2 digits), layouts in `layer_layout`
    PMT.BIN, EXP.BIN   u32 count + count u32: a reference prompt, its greedy continuation
    INFO.TXT   free text; our exporter writes `key=value` lines that `info` parses

A qmat is `rows` f32 scales, then rows x cols int8 (row-major): w[r][c] = scale[r] * q[r][c].
Any file may instead be a directory of chunks `00000`, `00001`, ... read in order.

`open_course(path)` reads everything with the course runtime's checks in its order and raises
`CourseFormatError("<where>: <the course's error text>")` (course_lab.md 1.1), so a broken
asset reads the way students know it. The norms stay as stored: SmolLM's are plain RMSNorm
weights, Qwen's have the `1 +` of its (1 + w) norms folded in (all but the DeltaNet output
norm).

The parts, one module each in pyllm/loaders/: `course_config` (CFG.BIN, `CourseFormatError`),
`course_blobs` (the other files' layouts and checks), `course_sources` (a folder or a zip,
chunked files), `course_writer` (`AssetWriter`, used by pyllm/export.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pyllm.errors import FormatError
from pyllm.loaders.course_blobs import (
    LAYER_FULL,
    LAYER_LINEAR,
    blob_bytes,
    emb_layout,
    layer_layout,
    layer_name,
    parse_blob,
    parse_info,
    parse_u32_list,
    rope_theta,
)
from pyllm.loaders.course_config import (
    F32,
    FOLDERS,
    KIND_NAMES,
    KIND_QWEN,
    KIND_SMOL,
    CourseConfig,
    CourseFormatError,
    kind_name,
    parse_cfg,
)
from pyllm.loaders.course_sources import AssetSource, find_source


@dataclass
class CourseAssets:
    """A validated asset folder. Arrays are views of the mapped files (or of the chunk
    buffers); `source` keeps them alive."""

    where: str
    cfg: CourseConfig
    kinds: list[int]  # LAYER_FULL / LAYER_LINEAR per layer
    emb: tuple[np.ndarray, np.ndarray]  # (scale (vocab,), q (vocab, dim))
    norm: np.ndarray  # (dim,) final norm, as stored
    rope: np.ndarray  # (runtime_seq_len, rotary_dim)
    theta: float  # RoPE base the table was computed with
    theta_from: str  # "CFG.BIN" or "ROP.BIN"
    layers: list[dict[str, Any]]  # per layer: name -> f32 array or (scale, q)
    prompt: list[int] | None  # PMT.BIN
    expected: list[int] | None  # EXP.BIN
    info_text: str  # INFO.TXT ("" if absent)
    log: list[str] = field(default_factory=list)  # the runtime's load-time log lines
    nbytes: int = 0  # bytes of every asset read
    source: AssetSource | None = None

    @property
    def info(self) -> dict[str, str]:
        return parse_info(self.info_text)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    def drop_layers(self) -> None:
        """Forget the layer arrays (a model that copied them into its own format lets those
        mapped files go; EMB.BIN stays: embedding rows are read from it)."""
        self.layers = []


def open_course(path: str | os.PathLike[str], expect: int | None = None) -> CourseAssets:
    """Read and validate the course assets at `path` (see the module docstring). `expect`
    = KIND_SMOL / KIND_QWEN gives the runtime's 'expected X assets, got Y' check; by default
    a folder named SMOL or QWEN expects its kind."""
    src = find_source(Path(path))
    if src is None:
        raise FormatError(f"{path}: no course assets here (expected CFG.BIN or EMB.BIN in "
                          "the folder, or a zip holding such a folder)")
    try:
        return _read(src, expect)
    except BaseException:
        src.close()
        raise



class _Reader:
    """One asset folder being read: each file loaded once, in the runtime's order, its
    bytes counted and the runtime's load-time log kept."""

    def __init__(self, src: AssetSource) -> None:
        self.src, self.where = src, src.where
        self.log = ["loading LLM assets"]
        self.total = 0

    def load(self, name: str) -> np.ndarray | None:
        buf = self.src.load(name, self.log)
        self.total += 0 if buf is None else buf.nbytes
        return buf


def _read(src: AssetSource, expect: int | None) -> CourseAssets:
    """Every file of the folder, checked in the order the course runtime checks them."""
    r = _Reader(src)
    cfg = _read_cfg(r, expect)
    kinds = _read_layer_kinds(r, cfg)
    emb, norm = _read_embedding(r, cfg)
    layers = _read_layers(r, cfg, kinds)
    rope, theta, theta_from = _read_rope(r, cfg)
    # the optional reference prompt / continuation and the stamp
    lists: dict[str, list[int] | None] = {}
    for name in ("PMT.BIN", "EXP.BIN"):
        raw = r.load(name)
        lists[name] = None if raw is None else parse_u32_list(raw, name, r.where,
                                                              cfg.vocab_size)
    raw = r.load("INFO.TXT")
    info_text = "" if raw is None else bytes(raw).decode("utf-8", "replace")
    return CourseAssets(r.where, cfg, kinds, emb, norm, rope, theta, theta_from, layers,
                        lists["PMT.BIN"], lists["EXP.BIN"], info_text, r.log, r.total, src)


def _read_cfg(r: _Reader, expect: int | None) -> CourseConfig:
    """CFG.BIN (or the legacy defaults), of the kind expected."""
    where, log = r.where, r.log
    raw_cfg = r.load("CFG.BIN")
    if raw_cfg is None:
        log.append("CFG.BIN missing, using legacy SmolLM defaults")
    cfg = parse_cfg(raw_cfg, where)
    if expect is None:  # /AI/SMOL holds SmolLM assets, /AI/QWEN Qwen's
        expect = {v: k for k, v in FOLDERS.items()}.get(r.src.root_name.upper())
    if expect is not None and cfg.model_kind != expect:
        raise CourseFormatError(where, f"expected {kind_name(expect)} assets, got "
                                f"{kind_name(cfg.model_kind)}")
    if cfg.model_kind not in KIND_NAMES:
        raise CourseFormatError(where, "expected SmolLM or Qwen3.5 assets, got unknown-model")
    log.append(f"cfg kind={cfg.model_kind} dim={cfg.dim} hidden={cfg.hidden_dim} "
               f"layers={cfg.n_layers} heads={cfg.n_heads} kv_heads={cfg.n_kv_heads} "
               f"head_dim={cfg.head_dim} vocab={cfg.vocab_size} "
               f"runtime_seq={cfg.runtime_seq_len}")
    return cfg


def _read_layer_kinds(r: _Reader, cfg: CourseConfig) -> list[int]:
    """LTY.BIN's kind of each layer (all full attention without it, SmolLM only)."""
    where = r.where
    raw = r.load("LTY.BIN")
    kinds = [LAYER_FULL] * cfg.n_layers
    if raw is None:
        if cfg.model_kind == KIND_QWEN:
            raise CourseFormatError(where, "missing LTY.BIN for Qwen")
    else:
        if raw.nbytes < 4:
            raise CourseFormatError(where, "bad LTY.BIN size")
        count = int(np.frombuffer(raw, "<u4", 1)[0])
        if count != cfg.n_layers or raw.nbytes != 4 + 4 * count:
            raise CourseFormatError(where, "bad LTY.BIN layout")
        for v in np.frombuffer(raw, "<u4", count, 4).tolist():
            if v not in (LAYER_FULL, LAYER_LINEAR):
                raise CourseFormatError(where, f"unsupported layer kind {v}")
        kinds = np.frombuffer(raw, "<u4", count, 4).astype(int).tolist()
    n_linear = kinds.count(LAYER_LINEAR)
    if n_linear and cfg.model_kind == KIND_SMOL:  # llmrun_smol's allow_linear = 0
        raise CourseFormatError(where, "this program only supports full-attention layers")
    if n_linear and cfg.conv_dim <= 0:
        raise CourseFormatError(where, "linear layer metadata is incomplete")
    return kinds


def _read_embedding(
        r: _Reader, cfg: CourseConfig) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """EMB.BIN (the embedding, also the LM head) and NRM.BIN (the final norm)."""
    where = r.where
    raw = r.load("EMB.BIN")
    if raw is None:
        raise CourseFormatError(where, "missing EMB.BIN")
    r.log.append(f"EMB.BIN loaded ({raw.nbytes} bytes)")
    if raw.nbytes != blob_bytes(emb_layout(cfg)):
        raise CourseFormatError(where, "embedding blob size mismatch")
    emb = parse_blob(raw, emb_layout(cfg))["emb"]
    raw = r.load("NRM.BIN")
    if raw is None or raw.nbytes != 4 * cfg.dim:
        raise CourseFormatError(where, "bad NRM.BIN size")
    return emb, np.frombuffer(raw, F32)


def _read_layers(r: _Reader, cfg: CourseConfig, kinds: list[int]) -> list[dict[str, Any]]:
    """L00.BIN ...: each layer blob, its size checked against its kind's layout."""
    layers = []
    for i, kind in enumerate(kinds):
        name = layer_name(i)
        raw = r.load(name)
        if raw is None:
            raise CourseFormatError(r.where, f"missing {name}")
        layout = layer_layout(cfg, kind)
        want = blob_bytes(layout)
        if raw.nbytes != want:
            what = "full" if kind == LAYER_FULL else "linear"
            raise CourseFormatError(r.where, f"{what} layer blob size mismatch ({want} vs "
                                    f"{raw.nbytes})")
        layers.append(parse_blob(raw, layout))
        if i % 5 == 4 or i == cfg.n_layers - 1:
            r.log.append(f"layers 0..{i} loaded")
    n_linear = kinds.count(LAYER_LINEAR)
    r.log.append(f"layer mix full={cfg.n_layers - n_linear} linear={n_linear}")
    return layers


def _read_rope(r: _Reader, cfg: CourseConfig) -> tuple[np.ndarray, float, str]:
    """ROP.BIN, and the base theta it was computed with (and from which file)."""
    raw = r.load("ROP.BIN")
    if raw is None or raw.nbytes != 4 * cfg.runtime_seq_len * cfg.rope_rotary_dim:
        raise CourseFormatError(r.where, "bad ROP.BIN size")
    rope = np.frombuffer(raw, F32).reshape(cfg.runtime_seq_len, cfg.rope_rotary_dim)
    theta, theta_from = rope_theta(rope, cfg, r.where)
    return rope, theta, theta_from


# ---------------------------------------------------------------- cheap looks at a path

def is_course_asset(path: Path) -> bool:
    """Cheap check (no validation) used by `harness models list` and the registry."""
    try:
        src = find_source(path)
    except FormatError:  # a damaged zip: listed, and loading it says what is wrong
        return Path(path).suffix.lower() == ".zip"
    if src is None:
        return False
    src.close()
    return True


def is_synthetic_asset(path: Path) -> bool:
    """INFO.TXT says `synthetic=1` (our exporter writes it for synthetic sources)."""
    try:
        src = find_source(path)
    except FormatError:
        return False
    if src is None:
        return False
    try:
        raw = src.load("INFO.TXT", [])
    except FormatError:
        return False
    finally:
        src.close()
    text = "" if raw is None else bytes(raw).decode("utf-8", "replace")
    return parse_info(text).get("synthetic", "0") not in ("0", "", "no", "false")


def sniff(path: Path) -> tuple[str, str] | None:
    """For the registry: ("course", "llama" | "qwen3_5") when `path` holds course assets
    (CFG.BIN is parsed and validated), None when it does not look like course assets."""
    src = find_source(Path(path))
    if src is None:
        return None
    try:
        cfg = parse_cfg(src.load("CFG.BIN", []), src.where)
    finally:
        src.close()
    arch = {KIND_SMOL: "llama", KIND_QWEN: "qwen3_5"}.get(cfg.model_kind)
    if arch is None:
        raise CourseFormatError(src.where, "expected SmolLM or Qwen3.5 assets, got "
                                f"{kind_name(cfg.model_kind)}")
    return "course", arch


def reference_files(path: Path) -> dict[str, bytes]:
    """The assets' PMT.BIN / EXP.BIN as the course's guest expects them, keyed by their path
    there without the /AI prefix ({"SMOL/PMT.BIN": raw bytes, ...}); {} when `path` is not
    course assets or holds neither file. Only CFG.BIN and those two files are read."""
    src = find_source(Path(path))
    if src is None:
        return {}
    try:
        cfg = parse_cfg(src.load("CFG.BIN", []), src.where)
        folder = FOLDERS.get(cfg.model_kind)
        out = {}
        for name in ("PMT.BIN", "EXP.BIN"):
            raw = src.load(name, []) if folder else None
            if raw is not None:
                out[f"{folder}/{name}"] = bytes(raw)
        return out
    finally:
        src.close()
