"""How print shows a value: gdb's notation for C types.

    ticks                  1234
    nextpid                3
    proc[0].name           "init"
    proc[0].state          SLEEPING
    cpus[0].proc           (struct proc *) 0x80011f98 <proc+512>
    proc[0].lock           {locked = 0, name = 0x8000a118 "proc", cpu = 0x0}
    sys_fork               {text} 0x8000346a <sys_fork>

`/x`, `/d`, `/u`, `/o`, `/t`, `/c`, `/a` apply to every integer inside the value.
"""

from __future__ import annotations

from harness.debug import DebugError
from harness.debug.expr import Evaluator, Value
from harness.guest.dwarf import CType, c_string, scalar

MAX_ELEMENTS = 200
MAX_STRING = 200
REPEAT_MIN = 10


def format_value(ev: Evaluator, v: Value, fmt: str | None = None) -> str:
    if v.text is not None:
        return c_string(v.text.encode())
    t = v.type
    if t is None:
        return _int(ev, v.raw or 0, fmt, signed=True) if v.raw is not None else "<no value>"
    if v.raw is not None and t.kind == "pointer":
        return _pointer(ev, t, v.raw, v, fmt)
    if v.raw is not None and t.kind in ("base", "enum") and t.size:
        data = (v.raw & ((1 << (8 * t.size)) - 1)).to_bytes(t.size, "little")
        return _bytes(ev, t, data, v, fmt)
    if t.kind == "func":
        sym = _sym(ev, v, v.addr or 0)
        return f"{{text}} {v.addr:#x}{sym}"
    if v.addr is None:
        raise DebugError("value has no address")
    data = ev.read(v, t.size) if t.size else b""
    return _bytes(ev, t, data, v, fmt)


def _bytes(ev: Evaluator, t: CType, data: bytes, v: Value, fmt: str | None) -> str:
    if t.kind in ("base", "enum"):
        x = scalar(t, data)
        if t.kind == "enum" and fmt is None:
            return t.enumerators.get(x, str(x))
        if t.is_char and fmt is None:
            return f"{x} {_char(x)}"
        return _int(ev, x, fmt, t.signed, t.size)
    if t.kind == "pointer":
        return _pointer(ev, t, scalar(t, data), v, fmt)
    if t.kind == "array" and t.target is not None:
        el = t.target
        if el.is_char and fmt is None:
            return c_string(data)
        n = t.count if t.count is not None else 0
        items = [_bytes(ev, el, data[i * el.size : (i + 1) * el.size], v, fmt)
                 for i in range(min(n, MAX_ELEMENTS))]
        text = _runs(items)
        return "{" + text + (", ..." if n > MAX_ELEMENTS else "") + "}"
    if t.kind in ("struct", "union"):
        parts = [f"{f.name} = {_bytes(ev, f.type, data[f.offset : f.offset + f.type.size], v, fmt)}"
                 for f in t.fields]
        return "{" + ", ".join(parts) + "}"
    if t.kind == "func":
        return "{text}"
    return "<incomplete type>"


def _runs(items: list[str]) -> str:
    """gdb's `<repeats N times>` for runs of equal elements."""
    out, i = [], 0
    while i < len(items):
        j = i
        while j < len(items) and items[j] == items[i]:
            j += 1
        if j - i >= REPEAT_MIN:
            out.append(f"{items[i]} <repeats {j - i} times>")
        else:
            out += items[i:j]
        i = j
    return ", ".join(out)


def _pointer(ev: Evaluator, t: CType, p: int, v: Value, fmt: str | None) -> str:
    if fmt not in (None, "a"):
        return _int(ev, p, fmt, False, 8)
    target = t.target
    sym = _sym(ev, v, p) if p else ""
    if target is not None and target.is_char and p:
        try:
            raw = ev.t.read(p, MAX_STRING, v.space) if v.space else ev.t.read(p, MAX_STRING)
        except DebugError:
            raw = _read_some(ev, v, p)
        return f"{p:#x}{sym} {c_string(raw)}" if raw is not None else f"{p:#x}{sym}"
    if target is not None and target.kind in ("struct", "union"):
        return f"({target} *) {p:#x}{sym}"
    return f"{p:#x}{sym}"


def _read_some(ev: Evaluator, v: Value, p: int) -> bytes | None:
    """A string that ends near a page boundary: read what can be read."""
    out = bytearray()
    for i in range(MAX_STRING):
        try:
            b = ev.t.read(p + i, 1, v.space) if v.space else ev.t.read(p + i, 1)
        except DebugError:
            break
        out += b
        if b == b"\0":
            break
    return bytes(out) if out else None


def _sym(ev: Evaluator, v: Value, addr: int) -> str:
    prog = v.program or ev.program
    kernel = ev.t.programs.kernel
    s = kernel.describe(addr) or (prog.describe(addr) if prog is not None and prog.user else "")
    return f" <{s}>" if s else ""


def _char(x: int) -> str:
    c = x & 0xFF
    if 32 <= c < 127 and chr(c) not in "'\\":
        return f"'{chr(c)}'"
    return {0: "'\\000'", 10: "'\\n'", 9: "'\\t'", 39: "'\\''", 92: "'\\\\'"}.get(c, f"'\\{c:03o}'")


def _int(ev: Evaluator, x: int, fmt: str | None, signed: bool = True, size: int = 8) -> str:
    bits = 8 * size
    u = x & ((1 << bits) - 1)
    if fmt == "x":
        return f"{u:#x}"
    if fmt == "o":
        return f"0{u:o}" if u else "0"
    if fmt == "t":
        return f"{u:b}"
    if fmt == "u":
        return str(u)
    if fmt == "d":
        return str(u - (1 << bits) if u >> (bits - 1) else u)
    if fmt == "c":
        return f"{x} {_char(x)}"
    if fmt == "a":
        s = ev.t.programs.kernel.describe(u) or (ev.program.describe(u) if ev.program else "")
        return f"{u:#x}" + (f" <{s}>" if s else "")
    if not signed:
        return str(u)
    return str(x)
