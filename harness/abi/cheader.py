"""Constants and struct layouts read from the kernel's C headers (kernel_c/*.h).

The headers are the single source of truth for everything the kernel and the harness
share: the memory map (memlayout.h), struct bootinfo (bootinfo.h), the virtio-mmio
registers and rings (virtio.h), syscall numbers (syscall.h). This module reads them so
that no number is ever retyped in Python.

- `#define NAME expr` lines whose expression is an integer expression (literals with
  optional U/L suffixes, earlier names, + - * / % << >> & | ^ ~ and parentheses) become
  `Header.defines[NAME]`; anything else (strings, function-like macros) is skipped.
- `struct NAME { ... };` blocks are laid out by cffi's cdef, which applies the C ABI of
  the host. The host must be LP64 like rv64's lp64 ABI (x86-64 and arm64 Linux are), and
  this is checked on import; fixed-width typedefs come from kernel_c/types.h.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import cffi

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernel_c"

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]*(.*)$", re.M)
_STRUCT = re.compile(r"\bstruct\s+([A-Za-z_]\w*)\s*\{(.*?)\}\s*;", re.S)
_TYPEDEF = re.compile(r"^\s*typedef\s+[^;{}]+;", re.M)
_INT_LITERAL = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")


class HeaderError(Exception):
    """A header could not be read or lacks a name the harness needs."""


@dataclass(frozen=True)
class Field:
    """One struct member: byte offset, size in bytes and C type name."""

    name: str
    offset: int
    size: int
    ctype: str
    length: int | None = None  # element count for arrays, None for scalars


@dataclass(frozen=True)
class StructLayout:
    """The layout of one C struct as the rv64 compiler sees it."""

    name: str
    size: int
    fields: dict[str, Field]
    _ffi: cffi.FFI = field(repr=False, compare=False)

    def offset(self, name: str) -> int:
        return self._field(name).offset

    def _field(self, name: str) -> Field:
        try:
            return self.fields[name]
        except KeyError:
            raise HeaderError(f"struct {self.name} has no field '{name}'") from None

    def pack(self, **values: int | bytes) -> bytes:
        """The struct's bytes with the given fields set (others zero)."""
        obj = self._ffi.new(f"struct {self.name} *")
        for name, value in values.items():
            self._field(name)
            if isinstance(value, bytes):
                dst = getattr(obj, name)
                n = len(dst)
                if len(value) > n:
                    raise HeaderError(f"{self.name}.{name}: {len(value)} bytes do not fit in {n}")
                self._ffi.memmove(dst, value, len(value))
            else:
                setattr(obj, name, value)
        return bytes(self._ffi.buffer(obj))

    def unpack(self, data: bytes) -> dict[str, int | bytes]:
        """Field values from the struct's bytes (arrays come back as bytes)."""
        if len(data) < self.size:
            raise HeaderError(f"struct {self.name}: need {self.size} bytes, got {len(data)}")
        out: dict[str, int | bytes] = {}
        for f in self.fields.values():
            raw = data[f.offset : f.offset + f.size]
            if f.length is None and f.ctype in _SCALAR_FMT:
                out[f.name] = struct.unpack("<" + _SCALAR_FMT[f.ctype], raw)[0]
            else:
                out[f.name] = bytes(raw)
        return out

    def scalar_struct(self, *names: str) -> struct.Struct:
        """A struct.Struct that unpacks exactly the named scalar fields, in order.

        The fields must be contiguous and in declaration order (e.g. a whole
        virtq_desc); this is checked, so a header change cannot silently skew offsets.
        """
        fmt, pos = "<", None
        for name in names:
            f = self._field(name)
            if f.length is not None or f.ctype not in _SCALAR_FMT:
                raise HeaderError(f"{self.name}.{name} is not a scalar")
            if pos is None:
                pos = f.offset
            if f.offset != pos:
                raise HeaderError(f"{self.name}.{name}: not contiguous with the previous field")
            fmt += _SCALAR_FMT[f.ctype]
            pos += f.size
        return struct.Struct(fmt)


# C scalar types (after typedef resolution by cffi) -> struct format characters
_SCALAR_FMT = {
    "unsigned char": "B", "char": "b", "signed char": "b",
    "unsigned short": "H", "short": "h",
    "unsigned int": "I", "int": "i",
    "unsigned long": "Q", "long": "q",
    "unsigned long long": "Q", "long long": "q",
}


@dataclass(frozen=True)
class Header:
    """What one header defines."""

    path: Path
    defines: dict[str, int]
    structs: dict[str, StructLayout]

    def __getitem__(self, name: str) -> int:
        try:
            return self.defines[name]
        except KeyError:
            raise HeaderError(f"{self.path.name} does not define {name}") from None

    def struct(self, name: str) -> StructLayout:
        try:
            return self.structs[name]
        except KeyError:
            raise HeaderError(f"{self.path.name} does not declare struct {name}") from None

    def prefixed(self, prefix: str) -> dict[str, int]:
        """All defines whose name starts with prefix, prefix removed."""
        return {k[len(prefix) :]: v for k, v in self.defines.items() if k.startswith(prefix)}


def strip_comments(text: str) -> str:
    """C source without comments, with line continuations joined."""
    text = text.replace("\\\n", " ")
    text = re.sub(r"/\*.*?\*/", lambda m: " " * m.group(0).count("\n") + " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}


def eval_int(expr: str, env: Mapping[str, int]) -> int | None:
    """Value of a C integer constant expression, or None if it is not one.

    Unsigned 64-bit wrap-around is applied to ~ (so ~0UL is 2**64-1), matching rv64.
    """
    text = _INT_LITERAL.sub(lambda m: str(int(m.group(1), 0)), expr.strip())
    text = text.replace("/", "//")
    text = re.sub(r"\((?:unsigned\s+)?(?:long|int|uint64|uint32)\)", "", text)  # casts
    if not text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.Invert):
                return ~v & (2**64 - 1)
        raise ValueError(ast.dump(node))

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError):
        return None


def parse_defines(text: str, env: Mapping[str, int] | None = None) -> dict[str, int]:
    """Integer #defines of a header's text, evaluated in order (env gives outside names)."""
    known = dict(env or {})
    out: dict[str, int] = {}
    for m in _DEFINE.finditer(strip_comments(text)):
        value = eval_int(m.group(2), known)
        if value is not None:
            known[m.group(1)] = out[m.group(1)] = value
    return out


def _typedefs() -> str:
    return "\n".join(m.group(0) for m in _TYPEDEF.finditer(
        strip_comments((KERNEL_DIR / "types.h").read_text())))


def parse_structs(text: str, defines: Mapping[str, int]) -> dict[str, StructLayout]:
    """Layouts of the struct definitions in a header's text (array sizes may use defines)."""
    ffi = cffi.FFI()
    if ffi.sizeof("long") != 8 or ffi.sizeof("void *") != 8:
        raise HeaderError("the harness needs an LP64 host to lay out rv64 structs")
    bodies = list(_STRUCT.finditer(strip_comments(text)))
    if not bodies:
        return {}
    names = sorted(defines, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
    src = []
    for m in bodies:
        body = m.group(2)
        if pattern is not None:
            body = pattern.sub(lambda n: str(defines[n.group(1)]), body)
        src.append(f"struct {m.group(1)} {{{body}}};")
    ffi.cdef(_typedefs() + "\n" + "\n".join(src))
    out: dict[str, StructLayout] = {}
    for m in bodies:
        name = m.group(1)
        ctype = ffi.typeof(f"struct {name}")
        fields = {}
        for fname, f in ctype.fields:
            t = f.type
            length = t.length if t.kind == "array" else None
            cname = (t.item.cname if t.kind == "array" else t.cname)
            fields[fname] = Field(fname, f.offset, ffi.sizeof(t), cname, length)
        out[name] = StructLayout(name, ffi.sizeof(ctype), fields, ffi)
    return out


_BASE_HEADERS = ("memlayout.h", "param.h")


@functools.cache
def load(name: str, directory: Path = KERNEL_DIR) -> Header:
    """Read kernel_c/<name> (e.g. "memlayout.h"); names from memlayout.h and param.h
    are visible to every other header, as the kernel's include order makes them."""
    path = directory / name
    try:
        text = path.read_text()
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror}") from None
    env: dict[str, int] = {}
    if name not in _BASE_HEADERS:
        for base in _BASE_HEADERS:
            if (directory / base).exists():
                env.update(load(base, directory).defines)
    defines = parse_defines(text, env)
    return Header(path, defines, parse_structs(text, {**env, **defines}))
