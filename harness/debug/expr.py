"""The expression language of print, x, watch and `break ... if`: a small C subset.

    42  0x80001000  'a'  "sh"        literals
    ticks  proc[1].name  cpus[0].proc->pid  *p  &nextpid    globals (DWARF types)
    sh::buf                           a global of user program sh
    $a0  $sp  $pc  $sstatus  $satp    registers and CSRs
    $pid  $prog  $priv                the process on the CPU (0 / "" without one), mode
    p  np->pid  path                  locals and arguments of frame #0 (locals.py)
    (struct proc *)0x80011d98  (char *)$a0  (uint64 *)$sp      casts
    + - * / % << >> & | ^ ~ ! == != < > <= >= && ||

Names resolve in the program of the current context (the kernel in S-mode, the
process's program in U-mode); a name with debug info has its C type, an ELF symbol
without one stands for its address. Memory is read through the address space of the
program the value belongs to (target.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from unicorn import riscv_const as R

from harness.cpu.registers import ABI_NAMES
from harness.debug import DebugError
from harness.debug.target import Target
from harness.guest.dwarf import VOID, CType, scalar
from harness.guest.memory import AddressSpace
from harness.guest.programs import Program

MASK = (1 << 64) - 1

REGISTERS: dict[str, int] = {name: R.UC_RISCV_REG_X0 + i for i, name in enumerate(ABI_NAMES)}
REGISTERS.update({f"x{i}": R.UC_RISCV_REG_X0 + i for i in range(32)})
REGISTERS.update({"fp": R.UC_RISCV_REG_X8, "pc": R.UC_RISCV_REG_PC})
CSRS = ("sstatus", "sie", "sip", "stvec", "sepc", "scause", "stval", "satp", "sscratch",
        "scounteren", "mstatus", "mie", "mip", "mepc", "mcause", "mtval", "mtvec",
        "medeleg", "mideleg", "misa")
CSR_REGS = {name: getattr(R, f"UC_RISCV_REG_{name.upper()}") for name in CSRS}

_CODE = CType("func", "", 1)
POINTER_REGS = {"pc": _CODE, "ra": _CODE, "sp": VOID, "fp": VOID, "s0": VOID, "gp": VOID,
                "tp": VOID}

BASE_TYPES = {
    "char": CType("base", "char", 1, True), "uchar": CType("base", "unsigned char", 1),
    "short": CType("base", "short", 2, True), "ushort": CType("base", "unsigned short", 2),
    "int": CType("base", "int", 4, True), "uint": CType("base", "unsigned int", 4),
    "uint32": CType("base", "unsigned int", 4), "long": CType("base", "long", 8, True),
    "uint64": CType("base", "unsigned long", 8), "void": CType("void", "void", 1),
}

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>0[xX][0-9a-fA-F]+|\d+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<chr>'(?:[^'\\]|\\.)')
  | (?P<reg>\$[A-Za-z_]\w*)
  | (?P<name>[A-Za-z_][\w.-]*::[A-Za-z_]\w*|[A-Za-z_]\w*)
  | (?P<op>->|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^~!<>()\[\].,])
""", re.X)


@dataclass
class Value:
    """An expression's value: a typed object in memory (addr), or a plain value."""

    type: CType | None = None           # None: a plain 64-bit integer
    addr: int | None = None             # where the object is (an lvalue)
    raw: int | None = None              # the value itself (an rvalue)
    text: str | None = None             # a string literal or $prog
    space: AddressSpace | None = None   # where addr (and pointers in it) live
    program: Program | None = None      # whose symbols describe it


class Evaluator:
    """Evaluates expressions against a stopped target."""

    def __init__(self, target: Target, program: Program | None,
                 local: Callable[[str], Value | None] | None = None) -> None:
        self.t = target
        self.program = program  # the context's program (kernel or user)
        self.local = local      # the selected frame's locals and arguments, by name

    # ---------------------------------------------------------------- entry points
    def evaluate(self, text: str) -> Value:
        self.toks = [(k, v) for k, v in _tokens(text)]
        self.pos = 0
        v = self._expr()
        if self.pos != len(self.toks):
            raise DebugError(f"A syntax error in expression, near `{self._rest()}'.")
        return v

    def integer(self, text: str) -> int:
        return self.to_int(self.evaluate(text))

    def truth(self, text: str) -> bool:
        v = self.evaluate(text)
        return bool(v.text) if v.text is not None else self.to_int(v) != 0

    def address(self, text: str) -> tuple[int, Value]:
        """An address for x/watch: an object's own address for arrays and structs
        (like gdb's x), a pointer's value, or the integer."""
        v = self.evaluate(text)
        if (v.type is not None and v.type.kind in ("array", "struct", "union", "func")
                and v.addr is not None):
            return v.addr, v
        return self.to_int(v), v

    # ---------------------------------------------------------------- values
    def read(self, v: Value, n: int) -> bytes:
        assert v.addr is not None
        return self.t.read(v.addr, n, v.space)

    def to_int(self, v: Value) -> int:
        if v.raw is not None:
            return v.raw
        if v.text is not None:
            raise DebugError("a string is not a number")
        t = v.type
        if t is None or v.addr is None:
            raise DebugError("value has no address")
        if t.kind in ("array", "func"):
            return v.addr
        if t.kind in ("struct", "union"):
            raise DebugError(f"{t} is not a number")
        if t.kind == "void":
            raise DebugError("Attempt to use a type name as an expression")
        x = scalar(t, self.read(v, t.size))
        return x if t.signed else x & MASK

    def deref(self, v: Value) -> Value:
        t = v.type
        if t is not None and t.kind == "array":
            return Value(t.target, v.addr, space=v.space, program=v.program)
        if t is None or t.kind != "pointer":
            raise DebugError("Attempt to take contents of a non-pointer value.")
        if t.target is None or t.target.kind == "void":
            raise DebugError("Attempt to take contents of a void pointer (cast it first).")
        return Value(t.target, self.to_int(v) & MASK, space=v.space, program=v.program)

    # ---------------------------------------------------------------- grammar
    def _peek(self) -> str | None:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else None

    def _kind(self) -> str | None:
        return self.toks[self.pos][0] if self.pos < len(self.toks) else None

    def _take(self, want: str | None = None) -> str:
        if self.pos >= len(self.toks):
            raise DebugError("A syntax error in expression, near `'.")
        tok = self.toks[self.pos][1]
        if want is not None and tok != want:
            raise DebugError(f"A syntax error in expression, near `{self._rest()}'.")
        self.pos += 1
        return tok

    def _rest(self) -> str:
        return "".join(v for _, v in self.toks[self.pos :])

    _BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="),
               ("<", ">", "<=", ">="), ("<<", ">>"), ("+", "-"), ("*", "/", "%")]

    def _expr(self, level: int = 0) -> Value:
        if level == len(self._BINARY):
            return self._unary()
        left = self._expr(level + 1)
        while self._kind() == "op" and self._peek() in self._BINARY[level]:
            op = self._take()
            right = self._expr(level + 1)
            left = self._binary(op, left, right)
        return left

    def _binary(self, op: str, a: Value, b: Value) -> Value:
        if a.text is not None or b.text is not None:
            if op not in ("==", "!=") or a.text is None or b.text is None:
                raise DebugError("strings can only be compared with == and !=")
            return Value(raw=int((a.text == b.text) == (op == "==")))
        x = self.to_int(a)
        y = self.to_int(b)
        ptr = a.type if a.type is not None and a.type.kind in ("pointer", "array") else None
        if ptr is not None and op in ("+", "-") and not (b.type and b.type.kind == "pointer"):
            scale = ptr.target.size if ptr.target and ptr.target.size else 1
            t = CType("pointer", "", 8, target=ptr.target) if ptr.kind == "array" else ptr
            return Value(t, raw=(x + y * scale if op == "+" else x - y * scale) & MASK,
                         space=a.space, program=a.program)
        if op in ("/", "%") and y == 0:
            raise DebugError("Division by zero")
        r = {"||": lambda: int(bool(x) or bool(y)), "&&": lambda: int(bool(x) and bool(y)),
             "|": lambda: x | y, "^": lambda: x ^ y, "&": lambda: x & y,
             "==": lambda: int(x == y), "!=": lambda: int(x != y), "<": lambda: int(x < y),
             ">": lambda: int(x > y), "<=": lambda: int(x <= y), ">=": lambda: int(x >= y),
             "<<": lambda: x << y, ">>": lambda: x >> y, "+": lambda: x + y,
             "-": lambda: x - y, "*": lambda: x * y, "/": lambda: int(x / y),
             "%": lambda: x % y}[op]()
        return Value(raw=r & MASK if r >= 0 else r)

    def _unary(self) -> Value:
        tok = self._peek()
        if self._kind() == "op" and tok in ("-", "!", "~", "*", "&", "+"):
            self._take()
            v = self._unary()
            if tok == "*":
                return self.deref(v)
            if tok == "&":
                if v.addr is None:
                    raise DebugError("Attempt to take address of value not located in memory.")
                return Value(CType("pointer", "", 8, target=v.type), raw=v.addr, space=v.space,
                             program=v.program)
            x = self.to_int(v)
            return Value(raw={"-": -x, "!": int(not x), "~": ~x & MASK, "+": x}[tok])
        if tok == "(" and self._is_cast():
            t = self._cast_type()
            v = self._unary()
            if t.kind == "pointer":
                return Value(t, raw=self.to_int(v) & MASK, space=v.space,
                             program=v.program or self.program)
            x = self.to_int(v) & ((1 << (8 * t.size)) - 1)
            return Value(raw=x - (1 << (8 * t.size)) if t.signed and x >> (8 * t.size - 1) else x)
        return self._postfix(self._primary())

    def _is_cast(self) -> bool:
        nxt = self.toks[self.pos + 1][1] if self.pos + 1 < len(self.toks) else ""
        return nxt in ("struct", "union", "unsigned") or nxt in BASE_TYPES

    def _cast_type(self) -> CType:
        self._take("(")
        word = self._take()
        if word in ("struct", "union"):
            name = self._take()
            d = (self.program or self.t.programs.kernel).dwarf
            t = d.struct(name) or self.t.programs.kernel.dwarf.struct(name)
            if t is None:
                raise DebugError(f"No struct type named {name}.")
        elif word == "unsigned":
            t = BASE_TYPES["uint"]
            if self._peek() in ("long", "int", "char", "short"):
                t = {"long": BASE_TYPES["uint64"], "int": BASE_TYPES["uint"],
                     "char": BASE_TYPES["uchar"], "short": BASE_TYPES["ushort"]}[self._take()]
        else:
            t = BASE_TYPES[word]
        while self._peek() == "*":
            self._take()
            t = CType("pointer", "", 8, target=t)
        self._take(")")
        return t

    def _postfix(self, v: Value) -> Value:
        while self._kind() == "op" and self._peek() in ("[", ".", "->"):
            tok = self._take()
            if tok == "[":
                i = self.to_int(self._expr())
                self._take("]")
                base = v
                if v.type is not None and v.type.kind == "pointer":
                    base = self.deref(v)
                    base = replace(base, type=CType("array", "", 0, target=base.type))
                if base.type is None or base.type.kind != "array" or base.addr is None:
                    raise DebugError("cannot subscript something of type "
                                     f"`{v.type or 'long'}'")
                el = base.type.target
                assert el is not None
                n = base.type.count
                if n is not None and not 0 <= i < n and v.type is not None \
                        and v.type.kind == "array":
                    raise DebugError(f"index {i} is out of bounds (the array has {n})")
                v = Value(el, base.addr + i * el.size, space=v.space, program=v.program)
                continue
            name = self._take()
            if tok == "->":
                v = self.deref(v)
            if v.type is None or v.type.kind not in ("struct", "union"):
                raise DebugError(f"Attempt to extract a component of a value that is not a "
                                 f"structure{' pointer' if tok == '->' else ''}.")
            f = v.type.field(name)
            if f is None or v.addr is None:
                raise DebugError(f"There is no member named {name}.")
            v = Value(f.type, v.addr + f.offset, space=v.space, program=v.program)
        return v

    def _primary(self) -> Value:
        kind = self._kind()
        tok = self._take()
        if kind == "num":
            octal = len(tok) > 1 and tok[0] == "0" and tok[1].isdigit()
            return Value(raw=int(tok, 8) if octal else int(tok, 0))
        if kind == "str":
            return Value(text=bytes(tok[1:-1], "utf-8").decode("unicode_escape"))
        if kind == "chr":
            return Value(raw=ord(bytes(tok[1:-1], "utf-8").decode("unicode_escape")))
        if kind == "reg":
            return self._register(tok[1:])
        if kind == "name":
            return self._name(tok)
        if tok == "(":
            v = self._expr()
            self._take(")")
            return v
        raise DebugError(f"A syntax error in expression, near `{tok}{self._rest()}'.")

    def _register(self, name: str) -> Value:
        h = self.t.hart
        if name in POINTER_REGS:  # gdb types these as pointers: printed in hex
            return Value(CType("pointer", "", 8, target=POINTER_REGS[name]),
                         raw=h.get(REGISTERS[name]), program=self.program)
        if name in REGISTERS:
            return Value(raw=h.get(REGISTERS[name]))
        if name in CSR_REGS:
            return Value(raw=h.csr(CSR_REGS[name]))
        if name == "priv":
            return Value(raw=h.priv)
        if name == "pid":
            p = self.t.current_proc()
            return Value(raw=p.pid if p else 0)
        if name in ("prog", "comm"):
            p = self.t.current_proc()
            return Value(text=p.name if p else "")
        raise DebugError(f"No register or convenience variable ${name}.")

    def _name(self, name: str) -> Value:
        prog = self.program or self.t.programs.kernel
        if self.local is not None and "::" not in name:
            v = self.local(name)
            if v is not None:
                return v
        if "::" in name:
            pname, name = name.split("::", 1)
            p = self.t.programs.get(pname)
            if p is None:
                raise DebugError(f"No program \"{pname}\".")
            progs = [p]
        else:  # the context's program first, then the kernel (visible from user mode)
            progs = [prog] + ([self.t.programs.kernel] if prog.user else [])
        for prog in progs:
            var = prog.dwarf.variable(name)
            if var is not None:
                return Value(var.type, var.addr, space=self.t.space_for(prog), program=prog)
            sym = prog.symbol(name)
            if sym is not None:
                kind = "func" if prog.has_code(sym.addr) else "array"
                t = CType(kind, name, sym.size or 1, target=BASE_TYPES["uchar"],
                          count=sym.size or None)
                return Value(t, sym.addr, space=self.t.space_for(prog), program=prog)
        raise DebugError(f"No symbol \"{name}\" in current context.")


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise DebugError(f"Invalid character '{text[pos]}' in expression.")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup or "", m.group()))
    return out
