"""A fast GGUF reader: header and metadata parsed with struct, tensors as zero-copy mmap views.

GGUF (v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor count, u64 key/value count; then
the key/value pairs (string key, u32 type, value; arrays are u32 item type + u64 count + items);
then per tensor: name, u32 n_dims, u64 dims[n_dims] (innermost first), u32 ggml type, u64 offset
relative to the data section; the data section starts at the next multiple of `general.alignment`
(default 32) after the tensor infos.

Speed: the `gguf` package builds ~1 M numpy views for the 98 k vocabulary strings and takes seconds.
Here string arrays are only skipped (their lengths read) while parsing, and decoded on first access
(`GGUFFile.metadata` holds `LazyArray` objects for them), so opening SmolLM2 takes milliseconds.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyllm.errors import FormatError, ModelNotFoundError, UnsupportedTensorTypeError
from pyllm.loaders import Checkpoint, TensorRef
from pyllm.quants import BLOCKS

# ggml tensor types we know by name: id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4),
    27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
GGML_TYPE_IDS = {name: i for i, (name, _, _) in GGML_TYPES.items()}
# types our dequantizers (pyllm/quants.py, kquants.py) and kernels read
SUPPORTED = ("F32", "F16", "BF16", *BLOCKS)

# general.file_type (llama.cpp's llama_ftype): the type most tensors of a file have
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
              10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
              16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
              22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
              28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16"}

# metadata value types: id -> struct format (None: string / array)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_NP_SCALAR = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
              6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


class LazyArray:
    """A metadata array decoded on first use (strings become a list[str], numbers an ndarray)."""

    def __init__(self, buf: memoryview, item_type: int, count: int, start: int, end: int) -> None:
        self._buf, self.item_type, self.count = buf, item_type, count
        self._span = (start, end)
        self._value: Any = None

    def __len__(self) -> int:
        return self.count

    @property
    def value(self) -> Any:
        if self._value is None:
            start, end = self._span
            if self.item_type == _STRING:
                out, off, buf = [], start, self._buf
                for _ in range(self.count):
                    n = int.from_bytes(buf[off:off + 8], "little")
                    out.append(bytes(buf[off + 8:off + 8 + n]).decode("utf-8", "replace"))
                    off += 8 + n
                self._value = out
            else:
                self._value = np.frombuffer(self._buf[start:end], dtype=_NP_SCALAR[self.item_type])
        return self._value


@dataclass
class _Cursor:
    buf: memoryview
    off: int
    path: str

    def take(self, n: int) -> memoryview:
        end = self.off + n
        if end > len(self.buf):
            raise FormatError(f"{self.path}: truncated GGUF header (needs byte {end}, file has "
                              f"{len(self.buf)})")
        view = self.buf[self.off:end]
        self.off = end
        return view

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > 1 << 24:
            raise FormatError(f"{self.path}: malformed GGUF (string of {n} bytes at {self.off})")
        return bytes(self.take(n)).decode("utf-8", "replace")

    def value(self, vtype: int) -> Any:
        fmt = _SCALAR.get(vtype)
        if fmt is not None:
            return self.unpack(fmt)
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, count = self.unpack("<I"), self.unpack("<Q")
            start = self.off
            if itype == _STRING:  # skip over the strings, reading only their lengths
                off = _skip_strings(self.buf, self.off, count)
                if off < 0:
                    raise FormatError(f"{self.path}: truncated GGUF header (string array at "
                                      f"byte {self.off})")
                self.off = off
            elif itype in _SCALAR:
                self.take(count * struct.calcsize(_SCALAR[itype]))
            else:
                raise FormatError(f"{self.path}: malformed GGUF (array of type {itype})")
            return LazyArray(self.buf, itype, count, start, self.off)
        raise FormatError(f"{self.path}: malformed GGUF (metadata value type {vtype} at "
                          f"byte {self.off})")


def _skip_strings(buf: memoryview, off: int, count: int) -> int:
    """Offset after `count` length-prefixed strings at `off`, or -1 if they overrun the buffer."""
    from pyllm.kernels import c_kernels

    nat = c_kernels()
    if nat is not None:
        ffi, lib = nat
        return int(lib.pyllm_gguf_skip_strings(ffi.from_buffer(buf), len(buf), off, count))
    size = len(buf)
    for _ in range(count):
        if off + 8 > size:
            return -1
        off += 8 + int.from_bytes(buf[off:off + 8], "little")
    return off if off <= size else -1


def _open_map(path: Path) -> tuple[mmap.mmap, int]:
    if path.is_dir():
        raise FormatError(f"{path}: is a folder, expected a .gguf file")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ModelNotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a folder, expected a .gguf file") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        size = os.fstat(fd).st_size
        if size < 24:
            raise FormatError(f"{path}: too short to be a GGUF file ({size} bytes)")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ), size
    except OSError as exc:
        raise FormatError(f"{path}: cannot map the file ({exc.strerror})") from None
    finally:
        os.close(fd)


def _header(buf: memoryview, path: str) -> tuple[_Cursor, int, int, int]:
    cur = _Cursor(buf, 0, path)
    if bytes(cur.take(4)) != b"GGUF":
        raise FormatError(f"{path}: not a GGUF file (bad magic {bytes(buf[:4])!r})")
    version = cur.unpack("<I")
    if version not in (2, 3):
        raise FormatError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
    if n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise FormatError(f"{path}: malformed GGUF header ({n_tensors} tensors, {n_kv} keys)")
    return cur, version, n_tensors, n_kv


def read_architecture(path: str | os.PathLike[str]) -> str:
    """`general.architecture` of a GGUF file (parses only as far as that key)."""
    mm, _ = _open_map(Path(path))
    cur, _, _, n_kv = _header(memoryview(mm), str(path))
    for _ in range(n_kv):
        key, vtype = cur.string(), cur.unpack("<I")
        val = cur.value(vtype)
        if key == "general.architecture":
            return str(val)
    raise FormatError(f"{path}: GGUF metadata has no general.architecture")


def read_description(path: str | os.PathLike[str]) -> str:
    """`general.description` of a GGUF file, "" if it has none (header only)."""
    mm, _ = _open_map(Path(path))
    cur, _, _, n_kv = _header(memoryview(mm), str(path))
    for _ in range(n_kv):
        key, vtype = cur.string(), cur.unpack("<I")
        val = cur.value(vtype)
        if key == "general.description":
            return str(val)
    return ""


def open_gguf(path: str | os.PathLike[str]) -> Checkpoint:
    """Parse a GGUF file's header; tensors become zero-copy views into the mmap."""
    path = Path(path)
    mm, size = _open_map(path)
    buf = memoryview(mm)
    cur, version, n_tensors, n_kv = _header(buf, str(path))
    meta: dict[str, Any] = {"GGUF.version": version}
    for _ in range(n_kv):
        key = cur.string()
        meta[key] = cur.value(cur.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        if not 1 <= n_dims <= 4:
            raise FormatError(f"{path}: malformed GGUF (tensor '{name}' has {n_dims} dims)")
        dims = [cur.unpack("<Q") for _ in range(n_dims)]
        infos.append((name, dims, cur.unpack("<I"), cur.unpack("<Q")))
    align = int(meta.get("general.alignment", 32))
    if align <= 0 or align & (align - 1):
        raise FormatError(f"{path}: malformed GGUF (alignment {align})")
    data_start = (cur.off + align - 1) // align * align
    whole = np.frombuffer(mm, dtype=np.uint8)
    tensors: dict[str, TensorRef] = {}
    for name, dims, gtype, offset in infos:
        tname, blk, bsize = GGML_TYPES.get(gtype, (f"type{gtype}", 0, 0))
        shape = tuple(int(d) for d in reversed(dims))  # numpy order: outermost first
        n = int(np.prod(dims, dtype=np.int64))
        if blk and dims[0] % blk:
            raise FormatError(f"{path}: tensor '{name}' has a row of {dims[0]} elements, "
                              f"not a multiple of the {tname} block ({blk})")
        nbytes = n // blk * bsize if blk else 0
        begin = data_start + offset
        if begin + nbytes > size:
            raise FormatError(f"{path} is truncated: tensor '{name}' ends at byte "
                              f"{begin + nbytes}, the file has {size}")
        raw = whole[begin:begin + nbytes] if blk else whole[0:0]
        tensors[name] = TensorRef(name, tname, shape, raw, nbytes)
    ck = Checkpoint(str(path), "gguf", meta, tensors, size, keepalive=[mm])
    return ck


def file_type_name(ck: Checkpoint) -> str:
    """The file's quantization as llama.cpp names it (general.file_type: "Q4_K_M", ...),
    or "mixed" when the file does not say."""
    ft = ck.metadata.get("general.file_type")
    if ft is None:
        return "mixed"
    return FILE_TYPES.get(int(ft) & 0x3FF, f"file_type {ft}")  # 1024: "guessed" flag


def tensor_array(ck: Checkpoint, name: str, want: tuple[str, ...] = SUPPORTED) -> TensorRef:
    """A tensor checked to be in a type we read (UnsupportedTensorTypeError otherwise)."""
    t = ck.get(name)
    if t.type not in want:
        raise UnsupportedTensorTypeError(
            f"{ck.path}: tensor '{name}' is stored as {t.type}, which pyllm does not read "
            f"(supported here: {', '.join(want)})")
    return t
