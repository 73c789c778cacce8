"""Read .safetensors files by hand: header parse, memory map, bf16/f16/f32 to float32.

The format is an 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`, then the
raw tensor bytes (offsets are relative to the end of the header). We do not use the
`safetensors` package: `safetensors.numpy` cannot read bfloat16 (numpy has no such dtype),
and every tensor of a Qwen3.5 checkpoint is bf16.

`open_safetensors(folder)` opens a whole HF checkpoint folder (config.json plus one file or an
index and its shards) as a `pyllm.loaders.Checkpoint`. `SafetensorsFile` maps one file;
`raw(name)` is a zero-copy view in the stored dtype (bf16 as uint16), `f32(name)` a float32
copy. bf16 -> f32 is exact: the 16 bits
are the top half of the float32.

Errors are one-line `FormatError`s naming the file: truncated file, malformed header,
offsets out of range or overlapping, a shape that does not match the byte count.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyllm.errors import FormatError, ModelNotFoundError, UnsupportedTensorTypeError
from pyllm.loaders import Checkpoint, TensorRef
from pyllm.quants import bf16_to_f32

# safetensors dtype name -> (numpy dtype of the raw view, bytes per element)
DTYPES: dict[str, tuple[np.dtype, int]] = {
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),  # no numpy bfloat16: keep the bits, convert with bf16_to_f32
    "F64": (np.dtype("<f8"), 8),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}
FLOAT_DTYPES = ("F32", "F16", "BF16")
MAX_HEADER = 100 << 20  # the format's own limit on the JSON header (100 MB)


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives inside a .safetensors file."""

    name: str
    dtype: str  # safetensors dtype name: "BF16", "F16", "F32", ...
    shape: tuple[int, ...]
    begin: int  # absolute file offset of the first byte
    end: int  # absolute file offset one past the last byte

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even like torch."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> 16) & 1))
    out = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def parse_header(path: Path, data: bytes | mmap.mmap, size: int) -> tuple[dict[str, TensorInfo],
                                                                         dict[str, str]]:
    """Parse and validate the header; returns (tensors by name, __metadata__)."""
    if size < 8:
        raise FormatError(f"{path}: not a safetensors file (only {size} bytes, no header)")
    n = int.from_bytes(data[:8], "little")
    if n == 0 or n > MAX_HEADER or 8 + n > size:
        raise FormatError(f"{path}: malformed safetensors header (header length {n} does not fit "
                          f"in a {size}-byte file; truncated or not safetensors)")
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: malformed safetensors header (bad JSON: {exc})") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: malformed safetensors header (not a JSON object)")
    meta = header.pop("__metadata__", None) or {}
    base = 8 + n
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        try:
            dtype, shape, (b, e) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            ok = all(isinstance(d, int) and d >= 0 for d in shape) and isinstance(b, int) \
                and isinstance(e, int)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise FormatError(f"{path}: malformed safetensors header (bad entry for '{name}')")
        if dtype not in DTYPES:
            raise UnsupportedTensorTypeError(
                f"{path}: tensor '{name}' has dtype {dtype}, which pyllm does not read "
                f"(supported: {', '.join(DTYPES)})")
        want = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][1]
        if not 0 <= b <= e or e - b != want:
            raise FormatError(f"{path}: malformed safetensors header ('{name}' is {dtype} "
                              f"{list(shape)} = {want} bytes but its offsets span {e - b})")
        if base + e > size:
            raise FormatError(f"{path}: truncated: tensor '{name}' ends at byte {base + e} but the "
                              f"file has {size} bytes")
        tensors[name] = TensorInfo(name, dtype, shape, base + b, base + e)
    spans = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.nbytes)
    for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise FormatError(f"{path}: malformed safetensors header (tensors '{n0}' and '{n1}' "
                              "overlap)")
    return tensors, {str(k): str(v) for k, v in meta.items()}


class SafetensorsFile:
    """One .safetensors file, memory-mapped read-only."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise FormatError(f"{self.path}: file not found") from None
        except IsADirectoryError:
            raise FormatError(f"{self.path}: is a directory, expected a .safetensors file") \
                from None
        try:
            self.size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if self.size else None
        finally:
            os.close(fd)
        self._advise_hugepage()
        self.tensors, self.metadata = parse_header(self.path, self._mm or b"", self.size)
        self._buf = np.frombuffer(self._mm, dtype=np.uint8) if self._mm else None

    def raw(self, name: str) -> np.ndarray:
        """Zero-copy read-only view in the stored dtype (BF16 as uint16)."""
        t = self.tensors[name]
        dtype = DTYPES[t.dtype][0]
        return self._buf[t.begin:t.end].view(dtype).reshape(t.shape)

    def f32(self, name: str) -> np.ndarray:
        """A float32 copy of a float tensor (bf16 and f16 converted exactly)."""
        t = self.tensors[name]
        raw = self.raw(name)
        if t.dtype == "BF16":
            return bf16_to_f32(raw)
        if t.dtype not in FLOAT_DTYPES:
            raise UnsupportedTensorTypeError(f"{self.path}: tensor '{name}' is {t.dtype}, "
                                             "expected a float type (F32, F16 or BF16)")
        return raw.astype(np.float32)

    def _advise_hugepage(self) -> None:
        """Ask for 2 MB pages (a THP mapping), before anything is read: pages the kernel reads
        in from then on come in large folios, mapped 2 MB at a time (pages already cached in
        small ones stay as they are). The matmul kernels stream every weight once per token,
        and on 4 KB pages that stream can take a TLB miss every 4 KB; what the page size does
        to products and whole decode steps, and how it is measured, is in docs/ARCHITECTURE.md
        ("Batched decode: what bounds it")."""
        if self._mm is not None and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._mm.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass

    def advise_willneed(self) -> None:
        """Ask the kernel to start reading the whole file (no-op where unsupported)."""
        if self._mm is not None and hasattr(self._mm, "madvise"):
            try:
                self._mm.madvise(mmap.MADV_WILLNEED)
            except (OSError, AttributeError):
                pass

    def populate(self) -> None:
        """Fault every page of the file in now (MADV_POPULATE_READ, Linux 5.14+; else touch
        one byte per page), so the first token does not pay for it."""
        if self._mm is None:
            return
        try:
            self._mm.madvise(getattr(mmap, "MADV_POPULATE_READ", 22))
        except (OSError, ValueError):
            int(self._buf[::4096].sum())  # one read per page

    def close(self) -> None:
        self._buf = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view is still alive; the GC will unmap it
                pass
            self._mm = None


def open_safetensors(path: str | os.PathLike[str]) -> Checkpoint:
    """Open a Hugging Face checkpoint: a folder with config.json and either model.safetensors
    or model.safetensors.index.json plus its shards (or one bare .safetensors file).

    Returns a `Checkpoint` whose `metadata` is the parsed config.json (empty for a bare file)
    and whose tensors are zero-copy views under their full names. Only headers are read.
    """
    path = Path(path)
    if not path.exists():
        raise ModelNotFoundError(f"{path}: no such file or folder")
    config: dict[str, Any] = {}
    if path.is_file():
        shards = [path]
    else:
        cfg = path / "config.json"
        if not cfg.exists():
            raise ModelNotFoundError(
                f"{path}: not a Hugging Face checkpoint folder (no config.json)")
        config = _read_json(cfg, "config.json")
        shards = _shard_list(path)
    files = [SafetensorsFile(p) for p in shards]
    tensors: dict[str, TensorRef] = {}
    for f in files:
        for name, t in f.tensors.items():
            if name in tensors:
                raise FormatError(f"{f.path}: tensor '{name}' is stored in two shards")
            tensors[name] = TensorRef(name, t.dtype, t.shape, f.raw(name), t.nbytes)
    index = path / INDEX if path.is_dir() else None
    if index is not None and index.exists():
        for name, shard in _read_json(index, INDEX).get("weight_map", {}).items():
            if name not in tensors:
                raise FormatError(f"{index}: tensor '{name}' is listed in {shard} but not stored "
                                  "there (truncated or mismatched shard)")
    return Checkpoint(path=str(path), format="safetensors", metadata=config, tensors=tensors,
                      file_bytes=sum(f.size for f in files), keepalive=files)


INDEX = "model.safetensors.index.json"


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: {what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FormatError(f"{path}: {what} is not a JSON object")
    return data


def _shard_list(folder: Path) -> list[Path]:
    """The .safetensors files of a checkpoint folder, in index order."""
    index = folder / INDEX
    if index.exists():
        weight_map = _read_json(index, INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise FormatError(f"{index}: no weight_map (malformed index)")
        names = list(dict.fromkeys(str(v) for v in weight_map.values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise FormatError(f"{folder}: missing shard file {missing[0]} listed in {INDEX}"
                              + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    raise ModelNotFoundError(f"{folder}: no model.safetensors or {INDEX} (weights missing)")


def write_safetensors(path: str | os.PathLike[str], tensors: dict[str, tuple[str, np.ndarray]],
                      metadata: dict[str, str] | None = None) -> None:
    """Write tensors given as {name: (dtype_name, array)}; arrays must already hold the
    stored representation (BF16 as uint16 bits). Used by tests and the repack cache."""
    with SafetensorsWriter(path, [(n, d, a.shape) for n, (d, a) in tensors.items()],
                           metadata) as w:
        for name, (_, arr) in tensors.items():
            w.write(name, arr)


class SafetensorsWriter:
    """Streams a .safetensors file: the header is written first from (name, dtype, shape)
    specs, then each tensor in the same order with `write` (so a 1.5 GB checkpoint never
    has to be in memory at once)."""

    def __init__(self, path: str | os.PathLike[str],
                 specs: list[tuple[str, str, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None, align: int = 8) -> None:
        # With align > 8, U8 tensors named "__pad.N" fill the gaps so that every tensor's
        # data starts at a file offset that is a multiple of `align` (the format allows no
        # holes); readers skip them.
        header: dict[str, object] = {}
        if metadata:
            header["__metadata__"] = dict(metadata)
        entries = []
        for name, dtype, shape in specs:
            n = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][1]
            entries.append((name, dtype, tuple(shape), n))
        # the header's own length decides where data starts; size it with room for pads
        n_pad_max = len(entries) if align > 8 else 0
        probe = dict(header)
        for name, dtype, shape, _ in entries:
            probe[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [10**12, 10**12]}
        for i in range(n_pad_max):
            probe[f"__pad.{i}"] = {"dtype": "U8", "shape": [align],
                                   "data_offsets": [10**12, 10**12]}
        hlen = len(json.dumps(probe, separators=(",", ":")).encode())
        hlen += -(8 + hlen) % max(align, 8)
        off, npad = 0, 0
        self._order: list[tuple[str, str, tuple[int, ...]]] = []
        for name, dtype, shape, n in entries:
            gap = -(8 + hlen + off) % align if align > 8 else 0
            if gap:
                header[f"__pad.{npad}"] = {"dtype": "U8", "shape": [gap],
                                           "data_offsets": [off, off + gap]}
                self._order.append((f"__pad.{npad}", "U8", (gap,)))
                off += gap
                npad += 1
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
            self._order.append((name, dtype, shape))
            off += n
        blob = json.dumps(header, separators=(",", ":")).encode()
        assert len(blob) <= hlen
        blob += b" " * (hlen - len(blob))
        self._f = open(path, "wb")
        self._f.write(len(blob).to_bytes(8, "little"))
        self._f.write(blob)
        self._next = 0

    def write(self, name: str, arr: np.ndarray) -> None:
        want, dtype, shape = self._order[self._next]
        if want.startswith("__pad.") and not name.startswith("__pad."):
            self._f.write(bytes(shape[0]))
            self._next += 1
            want, dtype, shape = self._order[self._next]
        if name != want or tuple(arr.shape) != shape or np.dtype(arr.dtype) != DTYPES[dtype][0]:
            raise ValueError(f"expected {want} {dtype}{list(shape)}, got {name} {arr.dtype}"
                             f"{list(arr.shape)}")
        self._f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
        self._next += 1

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
