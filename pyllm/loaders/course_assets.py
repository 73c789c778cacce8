"""The OS course's model assets (course_lab.md section 3): reading, validating, writing.

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
norm). The writer half (`pack_cfg`, `pack_blob`, `u32_list`, `rope_table`, `AssetWriter`) is
used by pyllm/export.py.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from pyllm.errors import FormatError

F32 = np.float32
CFG_MAGIC = 0x31474643  # "CFG1"
CFG_V1_BYTES, CFG_V2_BYTES = 48, 84
KIND_SMOL, KIND_QWEN = 0, 1
KIND_NAMES = {KIND_SMOL: "SmolLM", KIND_QWEN: "Qwen3.5"}
FOLDERS = {KIND_SMOL: "SMOL", KIND_QWEN: "QWEN"}  # the folder each kind lives in (/AI/SMOL)
FLAG_ATTN_GATE, FLAG_QK_NORM = 0x1, 0x2
LAYER_FULL, LAYER_LINEAR = 0, 1
TOKEN_LIST_MAX = 255  # PMT.BIN / EXP.BIN entries (LLM_REQUEST_TOKEN_MAX)
ROPE_TOL = 1e-4  # ROP.BIN vs the table of its base theta: max |diff| of cos/sin


class CourseFormatError(FormatError):
    """A course asset the course's runtime would refuse; the message ends with its text."""

    def __init__(self, where: str, text: str) -> None:
        self.where, self.text = where, text
        super().__init__(f"{where}: {text}")


def kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, "unknown-model")


# ---------------------------------------------------------------- CFG.BIN

@dataclass(frozen=True)
class CourseConfig:
    """CFG.BIN (v1, v2, or the legacy defaults), with the derived sizes of course_lab.md 3."""

    model_kind: int
    flags: int
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int
    runtime_seq_len: int
    rms_eps: float
    rope_theta: float
    rope_rotary_dim: int
    linear_num_k_heads: int = 0
    linear_num_v_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    version: int = 2  # 0 = no CFG.BIN (legacy defaults)

    @classmethod
    def legacy(cls) -> CourseConfig:
        """The defaults the runtime uses without CFG.BIN (SmolLM2-135M)."""
        return cls(KIND_SMOL, 0, 576, 1536, 30, 9, 3, 64, 49152, 2048, 256,
                   float(F32(1e-5)), 100000.0, 64, version=0)

    @property
    def attn_gate(self) -> bool:
        return bool(self.flags & FLAG_ATTN_GATE)

    @property
    def qk_norm(self) -> bool:
        return bool(self.flags & FLAG_QK_NORM)

    @property
    def attn_out_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def q_rows(self) -> int:
        return self.attn_out_dim * (2 if self.attn_gate else 1)

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def key_dim(self) -> int:
        return self.linear_num_k_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_v_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def validate(self, where: str) -> None:
        """The runtime's config checks (validate_cfg), in its order."""
        core = (self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads,
                self.head_dim, self.vocab_size, self.seq_len, self.runtime_seq_len)
        if min(core) <= 0:
            raise CourseFormatError(where, "invalid model config")
        if self.head_dim % 2:
            raise CourseFormatError(where, "head_dim must be even for RoPE")
        if self.n_heads % self.n_kv_heads:
            raise CourseFormatError(where, "head/kv-head mismatch")
        if self.runtime_seq_len > self.seq_len:
            raise CourseFormatError(where, "runtime_seq_len exceeds seq_len")
        rd = self.rope_rotary_dim
        if rd <= 0 or rd > self.head_dim or rd % 2:
            raise CourseFormatError(where, "invalid rotary dimension")
        lin = (self.linear_num_k_heads, self.linear_num_v_heads, self.linear_key_head_dim,
               self.linear_value_head_dim, self.linear_conv_kernel)
        if min(lin) < 0:
            raise CourseFormatError(where, "invalid linear config")
        if any(lin):
            if min(lin) <= 0:
                raise CourseFormatError(where, "incomplete linear config")
            if self.linear_num_v_heads % self.linear_num_k_heads:
                raise CourseFormatError(where, "linear head mismatch")


_V1 = struct.Struct("<II8iff")  # magic, version, dim .. runtime_seq_len (as int32), eps, theta
_V2 = struct.Struct("<IIII9iffi5i")


def parse_cfg(raw: bytes | np.ndarray | None, where: str) -> CourseConfig:
    """CFG.BIN bytes (None when absent) -> a validated config (load_model_cfg's checks).
    Dimensions are read as int32 like the runtime does, so a huge u32 is 'invalid'."""
    if raw is None:
        cfg = CourseConfig.legacy()
        cfg.validate(where)
        return cfg
    raw = bytes(raw)
    if len(raw) < 8:
        raise CourseFormatError(where, f"bad CFG.BIN size ({len(raw)})")
    magic, version = struct.unpack_from("<II", raw)
    if magic != CFG_MAGIC:
        raise CourseFormatError(where, "unsupported CFG.BIN header")
    if version == 1:
        if len(raw) != CFG_V1_BYTES:
            raise CourseFormatError(where, f"bad CFG.BIN v1 size ({len(raw)})")
        _, _, dim, hidden, layers, heads, kv, vocab, seq, rt_seq, eps, theta = _V1.unpack(raw)
        hd = dim // heads if heads > 0 else 0
        cfg = CourseConfig(KIND_SMOL, 0, dim, hidden, layers, heads, kv, hd, vocab, seq,
                           rt_seq, eps, theta, hd, version=1)
    elif version == 2:
        if len(raw) != CFG_V2_BYTES:
            raise CourseFormatError(where, f"bad CFG.BIN v2 size ({len(raw)})")
        v = _V2.unpack(raw)
        cfg = CourseConfig(*v[2:], version=2)
    else:
        raise CourseFormatError(where, f"unsupported CFG.BIN version {version}")
    cfg.validate(where)
    return cfg


def pack_cfg(cfg: CourseConfig, version: int = 2) -> bytes:
    """The CFG.BIN bytes of `cfg` (version 1 only for plain SmolLM configs)."""
    if version == 1:
        if cfg.model_kind != KIND_SMOL or cfg.flags or cfg.head_dim * cfg.n_heads != cfg.dim \
                or cfg.rope_rotary_dim != cfg.head_dim or cfg.conv_dim:
            raise ValueError("CFG.BIN v1 only describes SmolLM configs (no flags, "
                             "head_dim = dim / n_heads, full rotary, no linear layers)")
        return _V1.pack(CFG_MAGIC, 1, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads,
                        cfg.n_kv_heads, cfg.vocab_size, cfg.seq_len, cfg.runtime_seq_len,
                        cfg.rms_eps, cfg.rope_theta)
    vals = [getattr(cfg, f.name) for f in fields(cfg) if f.name != "version"]
    return _V2.pack(CFG_MAGIC, 2, *vals)


# ---------------------------------------------------------------- blobs

# (name, "vec" | "qmat", shape); a qmat's shape is (rows, cols)
Layout = list[tuple[str, str, tuple[int, ...]]]


def layer_layout(cfg: CourseConfig, kind: int) -> Layout:
    """The items of a layer blob, in file order (parse_full_layer_blob /
    parse_linear_layer_blob)."""
    D, F = cfg.dim, cfg.hidden_dim
    out: Layout = [("input_norm", "vec", (D,)), ("post_norm", "vec", (D,))]
    if kind == LAYER_FULL:
        if cfg.qk_norm:
            out += [("q_norm", "vec", (cfg.head_dim,)), ("k_norm", "vec", (cfg.head_dim,))]
        out += [("q_proj", "qmat", (cfg.q_rows, D)), ("k_proj", "qmat", (cfg.kv_dim, D)),
                ("v_proj", "qmat", (cfg.kv_dim, D)), ("o_proj", "qmat", (D, cfg.attn_out_dim))]
    else:
        Hv, C = cfg.linear_num_v_heads, cfg.conv_dim
        out += [("conv_weight", "vec", (C, cfg.linear_conv_kernel)), ("dt_bias", "vec", (Hv,)),
                ("a_log", "vec", (Hv,)), ("norm", "vec", (cfg.linear_value_head_dim,)),
                ("qkv_proj", "qmat", (C, D)), ("z_proj", "qmat", (cfg.value_dim, D)),
                ("a_proj", "qmat", (Hv, D)), ("b_proj", "qmat", (Hv, D)),
                ("out_proj", "qmat", (D, cfg.value_dim))]
    return out + [("gate_proj", "qmat", (F, D)), ("up_proj", "qmat", (F, D)),
                  ("down_proj", "qmat", (D, F))]


def item_bytes(kind: str, shape: tuple[int, ...]) -> int:
    n = int(np.prod(shape))
    return 4 * n if kind == "vec" else 4 * shape[0] + n


def blob_bytes(layout: Layout) -> int:
    return sum(item_bytes(k, s) for _, k, s in layout)


def parse_blob(buf: np.ndarray, layout: Layout) -> dict[str, Any]:
    """Views into `buf` (uint8): vec -> f32 array of its shape, qmat -> (scale, q)."""
    out: dict[str, Any] = {}
    off = 0
    for name, kind, shape in layout:
        n = int(np.prod(shape))
        if kind == "vec":
            out[name] = np.frombuffer(buf, F32, n, off).reshape(shape)
            off += 4 * n
        else:
            rows, cols = shape
            scale = np.frombuffer(buf, F32, rows, off)
            q = np.frombuffer(buf, np.int8, rows * cols, off + 4 * rows).reshape(rows, cols)
            out[name] = (scale, q)
            off += 4 * rows + rows * cols
    return out


def pack_blob(items: dict[str, Any], layout: Layout) -> list[bytes | np.ndarray]:
    """Pieces of a blob, in order (vec: float array; qmat: (scale, q)); shapes are checked."""
    out: list[bytes | np.ndarray] = []
    for name, kind, shape in layout:
        v = items[name]
        if kind == "vec":
            a = np.ascontiguousarray(v, dtype="<f4")
            if a.shape != shape:
                raise ValueError(f"{name}: shape {a.shape}, expected {shape}")
            out.append(a)
        else:
            scale, q = (np.ascontiguousarray(x) for x in v)
            if q.shape != shape or scale.shape != (shape[0],) or q.dtype != np.int8:
                raise ValueError(f"{name}: qmat {q.shape} {q.dtype}, expected {shape} int8")
            out += [scale.astype("<f4"), q]
    return out


def emb_layout(cfg: CourseConfig) -> Layout:
    return [("emb", "qmat", (cfg.vocab_size, cfg.dim))]


def layer_name(i: int) -> str:
    """L00.BIN ... L99.BIN, L100.BIN (make_layer_path)."""
    return f"L{i:02d}.BIN"


def u32_list(ids: list[int]) -> bytes:
    """PMT.BIN / EXP.BIN: u32 count, then the ids."""
    return struct.pack(f"<I{len(ids)}I", len(ids), *ids)


def rope_table(theta: float, rotary_dim: int, seq: int) -> np.ndarray:
    """ROP.BIN's table (seq, rotary_dim) f32: cos of pos * theta^(-2i/rotary_dim) for
    i < rotary_dim/2, then the sines (computed in float64)."""
    half = rotary_dim // 2
    inv = np.float64(theta) ** (-np.arange(half, dtype=np.float64) * 2 / rotary_dim)
    ang = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(F32)


def rope_theta(table: np.ndarray, cfg: CourseConfig, where: str) -> tuple[float, str]:
    """The base theta that ROP.BIN was computed with: CFG.BIN's if the table matches it,
    else the one its own angles give (the runtime never reads CFG's theta, so the table is
    the truth). Returns (theta, "CFG.BIN" | "ROP.BIN"); raises if the table is not a RoPE
    table of any base within ROPE_TOL."""
    seq, rd = table.shape
    half = rd // 2

    def dev(theta: float) -> float:
        return float(np.abs(rope_table(theta, rd, seq) - table).max()) if theta > 0 else np.inf

    if not np.all(np.isfinite(table)):
        raise CourseFormatError(where, "ROP.BIN holds non-finite values (damaged file)")
    d_cfg = dev(cfg.rope_theta)
    if d_cfg <= ROPE_TOL:
        return float(cfg.rope_theta), "CFG.BIN"
    theta = float("nan")
    if seq > 1 and half > 1:
        # the angle of frequency 1 at position 1, then refined at the last position
        # (angles wrap: unwrap with the first estimate)
        a1 = math.atan2(float(table[1, half + 1]), float(table[1, 1]))
        if a1 > 0:
            p = seq - 1
            ap = math.atan2(float(table[p, half + 1]), float(table[p, 1]))
            ap += 2 * math.pi * round((p * a1 - ap) / (2 * math.pi))
            theta = (ap / p) ** (-rd / 2)
    d_est = dev(theta) if math.isfinite(theta) else np.inf
    if d_est <= ROPE_TOL:
        return theta, "ROP.BIN"
    raise CourseFormatError(
        where, f"ROP.BIN is not a RoPE table cos|sin(pos * theta^(-2i/{rd})) of any base "
        f"theta (off by {min(d_cfg, d_est):.3g} from CFG.BIN's theta {cfg.rope_theta:g})")


def parse_u32_list(raw: np.ndarray, name: str, where: str, vocab: int) -> list[int]:
    """PMT.BIN / EXP.BIN -> ids (1 <= count <= 255, every id < vocab)."""
    b = bytes(raw)
    count = struct.unpack_from("<I", b)[0] if len(b) >= 4 else -1
    if count < 1 or count > TOKEN_LIST_MAX or len(b) != 4 + 4 * count:
        raise CourseFormatError(where, f"bad {name} ({len(b)} bytes: expected a u32 count "
                                f"1..{TOKEN_LIST_MAX}, then count u32 token ids)")
    ids = list(struct.unpack_from(f"<{count}I", b, 4))
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise CourseFormatError(where, f"{name}: token {ids.index(bad[0])} out of range "
                                f"({bad[0]} >= vocab {vocab})")
    return ids


def parse_info(text: str) -> dict[str, str]:
    """`key=value` lines of INFO.TXT (other lines are ignored)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------- where the bytes come from

class AssetSource:
    """One asset folder, on disk or inside a zip: `load(name)` is the runtime's load_file
    (a file, or a directory of chunks), returning uint8 bytes (mapped when possible)."""

    where: str  # display name used in errors: "/x/SMOL" or "/x/smol.zip:SMOL"
    root_name: str  # the folder's own name ("SMOL"), "" at the top of a zip

    def stat(self, name: str) -> str | None:
        """'file', 'dir', 'other' or None (absent)."""
        raise NotImplementedError

    def entries(self, name: str) -> list[str]:
        """Names directly inside directory `name`."""
        raise NotImplementedError

    def read_file(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def load(self, name: str, log: list[str]) -> np.ndarray | None:
        kind = self.stat(name)
        if kind is None:
            return None
        if kind == "file":
            return self.read_file(name)
        if kind != "dir":
            raise CourseFormatError(self.where, f"unsupported asset type for {name}")
        chunks = []
        while True:
            path = f"{name}/{len(chunks):05d}"
            k = self.stat(path)
            if k is None:
                break
            if k != "file":
                raise CourseFormatError(self.where, f"chunk {path} is not a file")
            chunks.append(path)
        # the runtime stops at the first gap; a numbered chunk after it means a lost one
        later = [e for e in self.entries(name) if e.isdigit() and int(e) > len(chunks)]
        if later:
            raise CourseFormatError(self.where, f"missing chunk {name}/{len(chunks):05d}")
        if not chunks:
            return None
        parts = [self.read_file(c) for c in chunks]
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            log.append(f"loaded {name} from {len(parts)} chunks ({out.nbytes} bytes)")
        return out


class DirSource(AssetSource):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)
        self.root_name = root.name

    def stat(self, name: str) -> str | None:
        p = self.root / name
        if not p.exists():
            return None
        return "file" if p.is_file() else "dir" if p.is_dir() else "other"

    def entries(self, name: str) -> list[str]:
        return [p.name for p in (self.root / name).iterdir()]

    def read_file(self, name: str) -> np.ndarray:
        p = self.root / name
        try:
            if p.stat().st_size == 0:
                return np.zeros(0, np.uint8)
            return np.memmap(p, np.uint8, mode="r")
        except (OSError, ValueError):
            raise CourseFormatError(self.where, f"failed to open {name}") from None


class ZipSource(AssetSource):
    """Members under `prefix` of a zip; stored members are mapped (CRC-checked), deflated
    ones read into memory."""

    def __init__(self, path: Path, zf: zipfile.ZipFile, prefix: str) -> None:
        self.path, self.zf, self.prefix = path, zf, prefix
        self.root_name = prefix.rstrip("/").rsplit("/", 1)[-1]
        self.where = f"{path}:{self.root_name}" if self.root_name else str(path)
        self.files: dict[str, zipfile.ZipInfo] = {}
        self.dirs: set[str] = set()
        for info in zf.infolist():
            if not info.filename.startswith(prefix):
                continue
            rel = info.filename[len(prefix):]
            if not rel:
                continue
            parts = rel.rstrip("/").split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
            if info.is_dir():
                self.dirs.add(rel.rstrip("/"))
            else:
                self.files[rel] = info

    def stat(self, name: str) -> str | None:
        return "file" if name in self.files else "dir" if name in self.dirs else None

    def entries(self, name: str) -> list[str]:
        pre = name + "/" if name else ""
        names = {n[len(pre):].split("/")[0] for n in (*self.files, *self.dirs)
                 if n.startswith(pre)}
        return sorted(names)

    def read_file(self, name: str) -> np.ndarray:
        info = self.files[name]
        try:
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                off = self._data_offset(info)
                if info.file_size == 0:
                    return np.zeros(0, np.uint8)
                data = np.memmap(self.path, np.uint8, mode="r", offset=off,
                                 shape=(info.file_size,))
                if zlib.crc32(data) != info.CRC:
                    raise zipfile.BadZipFile("CRC mismatch")
                return data
            return np.frombuffer(self.zf.read(info), np.uint8)
        except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise CourseFormatError(self.where, f"failed to read {name} ({exc}: the archive "
                                    "is damaged)") from None

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            head = f.read(30)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile("bad local header")
            n, m = struct.unpack_from("<HH", head, 26)
            off = info.header_offset + 30 + n + m
            if off + info.file_size > os.fstat(f.fileno()).st_size:
                raise zipfile.BadZipFile("member runs past the end of the file")
            return off

    def close(self) -> None:
        self.zf.close()


MARKERS = ("CFG.BIN", "EMB.BIN")  # a folder holding either is an asset folder


def _is_zip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")
    except OSError:
        return False


def find_source(path: Path) -> AssetSource | None:
    """The asset folder at `path` (a folder, a folder with one asset sub-folder, or a zip),
    or None if `path` holds no course assets. Raises CourseFormatError for an unreadable zip
    or an ambiguous one."""
    path = Path(path)
    if path.is_dir():
        if any((path / m).exists() for m in MARKERS):
            return DirSource(path)
        if (path / "config.json").exists() or any(path.glob("*.gguf")):
            return None  # our own formats' folders
        subs = [p for p in sorted(path.iterdir()) if p.is_dir()
                and any((p / m).exists() for m in MARKERS)]
        return DirSource(subs[0]) if len(subs) == 1 else None
    if not path.is_file() or not (path.suffix.lower() == ".zip" or _is_zip(path)):
        return None
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise CourseFormatError(str(path), f"not a readable zip archive ({exc})") from None
    roots = set()
    for n in zf.namelist():  # SMOL/CFG.BIN, SMOL/EMB.BIN/00000, or CFG.BIN at the top
        parts = n.split("/")
        for i, part in enumerate(parts):
            if part in MARKERS:
                roots.add("/".join(parts[:i]) + "/" if i else "")
                break
    roots = sorted(roots)
    if not roots:
        zf.close()
        raise CourseFormatError(str(path), "no course assets in this zip (expected "
                                "<MODEL>/CFG.BIN or <MODEL>/EMB.BIN, e.g. SMOL/CFG.BIN)")
    if len(roots) > 1:
        want = path.stem.upper() + "/"
        pick = [r for r in roots if r.upper().endswith(want)]
        if len(pick) != 1:
            zf.close()
            shown = ", ".join(r.rstrip("/") or "(top level)" for r in roots)
            raise CourseFormatError(str(path), f"several asset folders in this zip ({shown}); "
                                    "extract one and load that folder")
        roots = pick
    return ZipSource(path, zf, roots[0])


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


# ---------------------------------------------------------------- reading a whole asset

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


def _read(src: AssetSource, expect: int | None) -> CourseAssets:
    where, log = src.where, ["loading LLM assets"]
    total = 0

    def load(name: str) -> np.ndarray | None:
        nonlocal total
        buf = src.load(name, log)
        total += 0 if buf is None else buf.nbytes
        return buf

    raw_cfg = load("CFG.BIN")
    if raw_cfg is None:
        log.append("CFG.BIN missing, using legacy SmolLM defaults")
    cfg = parse_cfg(raw_cfg, where)
    if expect is None:  # /AI/SMOL holds SmolLM assets, /AI/QWEN Qwen's
        expect = {v: k for k, v in FOLDERS.items()}.get(src.root_name.upper())
    if expect is not None and cfg.model_kind != expect:
        raise CourseFormatError(where, f"expected {kind_name(expect)} assets, got "
                                f"{kind_name(cfg.model_kind)}")
    if cfg.model_kind not in KIND_NAMES:
        raise CourseFormatError(where, "expected SmolLM or Qwen3.5 assets, got unknown-model")
    log.append(f"cfg kind={cfg.model_kind} dim={cfg.dim} hidden={cfg.hidden_dim} "
               f"layers={cfg.n_layers} heads={cfg.n_heads} kv_heads={cfg.n_kv_heads} "
               f"head_dim={cfg.head_dim} vocab={cfg.vocab_size} "
               f"runtime_seq={cfg.runtime_seq_len}")

    # layer kinds
    raw = load("LTY.BIN")
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

    # embedding (= LM head) and the final norm
    raw = load("EMB.BIN")
    if raw is None:
        raise CourseFormatError(where, "missing EMB.BIN")
    log.append(f"EMB.BIN loaded ({raw.nbytes} bytes)")
    if raw.nbytes != blob_bytes(emb_layout(cfg)):
        raise CourseFormatError(where, "embedding blob size mismatch")
    emb = parse_blob(raw, emb_layout(cfg))["emb"]
    raw = load("NRM.BIN")
    if raw is None or raw.nbytes != 4 * cfg.dim:
        raise CourseFormatError(where, "bad NRM.BIN size")
    norm = np.frombuffer(raw, F32)

    # layers
    layers = []
    for i, kind in enumerate(kinds):
        name = layer_name(i)
        raw = load(name)
        if raw is None:
            raise CourseFormatError(where, f"missing {name}")
        layout = layer_layout(cfg, kind)
        want = blob_bytes(layout)
        if raw.nbytes != want:
            what = "full" if kind == LAYER_FULL else "linear"
            raise CourseFormatError(where, f"{what} layer blob size mismatch ({want} vs "
                                    f"{raw.nbytes})")
        layers.append(parse_blob(raw, layout))
        if i % 5 == 4 or i == cfg.n_layers - 1:
            log.append(f"layers 0..{i} loaded")
    log.append(f"layer mix full={cfg.n_layers - n_linear} linear={n_linear}")

    # RoPE table
    raw = load("ROP.BIN")
    if raw is None or raw.nbytes != 4 * cfg.runtime_seq_len * cfg.rope_rotary_dim:
        raise CourseFormatError(where, "bad ROP.BIN size")
    rope = np.frombuffer(raw, F32).reshape(cfg.runtime_seq_len, cfg.rope_rotary_dim)
    theta, theta_from = rope_theta(rope, cfg, where)

    # the optional reference prompt / continuation and the stamp
    lists: dict[str, list[int] | None] = {}
    for name in ("PMT.BIN", "EXP.BIN"):
        raw = load(name)
        lists[name] = None if raw is None else parse_u32_list(raw, name, where, cfg.vocab_size)
    raw = load("INFO.TXT")
    info_text = "" if raw is None else bytes(raw).decode("utf-8", "replace")
    return CourseAssets(where, cfg, kinds, emb, norm, rope, theta, theta_from, layers,
                        lists["PMT.BIN"], lists["EXP.BIN"], info_text, log, total, src)


# ---------------------------------------------------------------- writing

Piece = bytes | np.ndarray


class AssetWriter:
    """Writes an asset folder into a zip (members `<root>/NAME`) or a folder, atomically:
    everything goes to a temporary path that `commit()` renames to `out`. A file larger
    than `chunk_size` bytes (0 = never) becomes a directory of chunks 00000, 00001, ...

        with AssetWriter(out, "SMOL", chunk_size) as w:
            w.add("CFG.BIN", [cfg_bytes]); ...
            w.close_files(); (read w.tmp back); w.reopen(); w.add("EXP.BIN", ...)
            w.commit()
    """

    def __init__(self, out: Path, root: str, chunk_size: int = 0, compress: bool = False,
                 progress: Callable[[int], Any] | None = None) -> None:
        self.out, self.root, self.chunk_size = Path(out), root, chunk_size
        self.zip = self.out.suffix.lower() == ".zip"
        self.compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        self.progress = progress
        self.tmp = self.out.with_name(f".{self.out.name}.tmp{os.getpid()}")
        self.written: dict[str, int] = {}  # name -> bytes
        self.chunked: dict[str, int] = {}  # name -> chunks
        self._zf: zipfile.ZipFile | None = None
        self._remove_tmp()
        self.reopen()

    def _remove_tmp(self) -> None:
        if self.tmp.is_dir():
            shutil.rmtree(self.tmp)
        else:
            self.tmp.unlink(missing_ok=True)

    def reopen(self) -> None:
        """(Re)open the temporary output for adding files."""
        if self.zip:
            mode = "a" if self.tmp.exists() else "w"
            self._zf = zipfile.ZipFile(self.tmp, mode, self.compression, allowZip64=True)
            if mode == "w" and self.root:
                self._zf.writestr(zipfile.ZipInfo(self.root + "/", (2026, 1, 1, 0, 0, 0)), b"")
        else:
            self.tmp.mkdir(parents=True, exist_ok=True)

    def close_files(self) -> None:
        """Finish the temporary output so it can be read back (the zip's directory)."""
        if self._zf is not None:
            self._zf.close()
            self._zf = None

    @property
    def asset_path(self) -> Path:
        """Where the assets can be read back from before commit()."""
        return self.tmp

    def add(self, name: str, pieces: list[Piece]) -> None:
        total = sum(memoryview(p).nbytes for p in pieces)
        if self.chunk_size and total > self.chunk_size:
            chunks = self._split(pieces, self.chunk_size)
            for i, chunk in enumerate(chunks):
                self._put(f"{name}/{i:05d}", chunk)
            self.chunked[name] = len(chunks)
        else:
            self._put(name, pieces)
        self.written[name] = total

    @staticmethod
    def _split(pieces: list[Piece], size: int) -> list[list[Piece]]:
        out: list[list[Piece]] = [[]]
        room = size
        for p in pieces:
            mv = memoryview(p).cast("B")
            while len(mv):
                if room == 0:
                    out.append([])
                    room = size
                take = mv[:room]
                out[-1].append(take)
                mv, room = mv[len(take):], room - len(take)
        return out

    def _put(self, rel: str, pieces: list[Piece]) -> None:
        if self._zf is not None:
            size = sum(memoryview(p).nbytes for p in pieces)
            info = zipfile.ZipInfo(f"{self.root}/{rel}" if self.root else rel,
                                   date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = self.compression
            info.external_attr = 0o644 << 16
            info.file_size = size
            with self._zf.open(info, "w", force_zip64=size >= 1 << 31) as f:
                for p in pieces:
                    f.write(memoryview(p).cast("B"))
                    if self.progress:
                        self.progress(memoryview(p).nbytes)
        else:
            dst = self.tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(dst, "wb") as f:
                for p in pieces:
                    f.write(memoryview(p).cast("B"))
                    if self.progress:
                        self.progress(memoryview(p).nbytes)

    def commit(self) -> Path:
        """Rename the finished output to `out` (replacing an older one)."""
        self.close_files()
        if self.out.is_dir() and not self.zip:
            old = self.out.with_name(f".{self.out.name}.old{os.getpid()}")
            os.replace(self.out, old)
            os.replace(self.tmp, self.out)
            shutil.rmtree(old)
        else:
            os.replace(self.tmp, self.out)
        return self.out

    def abort(self) -> None:
        self.close_files()
        self._remove_tmp()

    def __enter__(self) -> AssetWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None or self.tmp.exists():
            self.abort()
