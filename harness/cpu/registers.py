"""The machine's one rv64 hart: fast register access, privilege-safe CSRs, guest-virtual reads.

Unicorn's Python binding is slow per register access and trap delivery and MMIO
bookkeeping do many, so this module calls libunicorn directly through a thin cffi (ABI
mode) layer, one wrapper per C function. It also wraps
`uc_vmem_read` / `uc_vmem_translate`, which libunicorn exports but the binding does not.

Unicorn applies the guest's privilege check to CSR access from the host (reading an M
CSR from S returns garbage, writing it is dropped), so `csr`/`set_csr` switch PRIV to M
around the access (see ../shared/reference/unicorn_riscv.md, gotcha 5). A privilege
switch also clears the hart's LR/SC reservation (QEMU's riscv_cpu_set_mode), so a hart
looked at between its LR and its SC would fail that SC because it was looked at: the
access keeps the reservation (`_Reservation`), which a debugger and time travel need
(looking must not change what happens next).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import cffi
from unicorn import UC_PROT_EXEC, UC_PROT_READ, Uc
from unicorn import riscv_const as R
from unicorn.unicorn_py3 import unicorn as _ucmod

_ffi = cffi.FFI()
_ffi.cdef("""
    int uc_reg_read(void *uc, int regid, void *value);
    int uc_reg_write(void *uc, int regid, const void *value);
    int uc_reg_write2(void *uc, int regid, const void *value, size_t *size);
    int uc_reg_read_batch(void *uc, int *regs, void **vals, int count);
    int uc_reg_write_batch(void *uc, int *regs, void **vals, int count);
    int uc_vmem_read(void *uc, uint64_t address, int prot, void *bytes, size_t size);
    int uc_vmem_translate(void *uc, uint64_t address, int prot, uint64_t *paddr);
""")
_lib = _ffi.dlopen(_ucmod.uclib._name)
# the same library through ctypes.PyDLL, whose calls keep the GIL (see emu_stop_holding_gil)
_gil_lib = ctypes.PyDLL(_ucmod.uclib._name)
_gil_lib.uc_emu_stop.argtypes = [ctypes.c_void_p]
_gil_lib.uc_emu_stop.restype = ctypes.c_int


def emu_stop_holding_gil(uc: Uc) -> None:
    """uc.emu_stop() without releasing the GIL during the call (the binding's and cffi's
    calls release it): a Unicorn hook on the emulation thread, which needs the GIL, then
    runs either wholly before or wholly after this stop (harness/machine/board.py,
    _outside_stop)."""
    _gil_lib.uc_emu_stop(uc._uch)

# privilege levels as UC_RISCV_REG_PRIV reports them
PRIV_U, PRIV_S, PRIV_M = 0, 1, 3
PRIV_NAMES = {PRIV_U: "U", PRIV_S: "S", PRIV_M: "M"}

# sstatus / mip bits
SSTATUS_SIE = 1 << 1
SSTATUS_SPIE = 1 << 5
SSTATUS_SPP = 1 << 8
SSTATUS_FS = 3 << 13
SSIP, STIP, SEIP = 1 << 1, 1 << 5, 1 << 9
S_INTERRUPTS = SSIP | STIP | SEIP  # what mideleg delegates to S-mode

ABI_NAMES = ["zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2",
             "a3", "a4", "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9",
             "s10", "s11", "t3", "t4", "t5", "t6"]

REG_PC = R.UC_RISCV_REG_PC
REG_PRIV = R.UC_RISCV_REG_PRIV
REG_X0 = R.UC_RISCV_REG_X0
REG_SP = R.UC_RISCV_REG_X2
REG_S0 = R.UC_RISCV_REG_X8
REG_A0, REG_A1, REG_A7 = R.UC_RISCV_REG_X10, R.UC_RISCV_REG_X11, R.UC_RISCV_REG_X17


_PRIV_SIP_SIE = (REG_PRIV, R.UC_RISCV_REG_SIP, R.UC_RISCV_REG_SIE)


# Unicorn 2.1.4's uc_context: a 16-byte header, then CPURISCVState from gpr[0]; the
# reservation (load_res, load_val) follows pc. Checked against the PC once (_RES_OK).
_CTX_PC = 16 + 8 * 32 + 8 * 32 + 8  # header, gpr, fpr, (8 bytes), pc
_CTX_RES = _CTX_PC + 8
_NO_RES = b"\xff" * 8


class _Reservation:
    """Keep a hart's LR/SC reservation across the privilege switches of a CSR access."""

    ok: bool | None = None  # the layout above holds for this Unicorn (checked once)

    def __init__(self, uc: Uc) -> None:
        self.uc = uc
        self.saved: bytes | None = None
        if _Reservation.ok is None:
            ctx = uc.context_save()
            pc = ctypes.string_at(ctx._context.value + _CTX_PC, 8)
            _Reservation.ok = int.from_bytes(pc, "little") == uc.reg_read(R.UC_RISCV_REG_PC)
        if _Reservation.ok:
            ctx = uc.context_save()
            res = ctypes.string_at(ctx._context.value + _CTX_RES, 16)
            self.saved = None if res[:8] == _NO_RES else res

    def put_back(self) -> None:
        if self.saved is None:
            return
        ctx = self.uc.context_save()
        ctypes.memmove(ctx._context.value + _CTX_RES, self.saved, 16)
        self.uc.context_restore(ctx)


class Hart:
    """Register, CSR and guest-memory access for one Unicorn rv64 CPU."""

    def __init__(self, uc: Uc) -> None:
        self.uc = uc
        self._h = _ffi.cast("void *", uc._uch.value)
        self._v = _ffi.new("uint64_t *")
        self._size = _ffi.new("size_t *")
        self._buf = _ffi.new("char[16]")
        self._batches: dict[tuple[int, ...], tuple[object, object, object]] = {}
        self._mip: Callable[[int, int], None] | None = None  # set_mip in C (use_c_mip)

    # ---------------------------------------------------------------- registers
    def get(self, reg: int) -> int:
        """A register as the current privilege may see it (GPRs, PC, PRIV, S CSRs in S)."""
        _lib.uc_reg_read(self._h, reg, self._v)
        return int(self._v[0])

    def set(self, reg: int, value: int) -> None:
        self._v[0] = value & 0xFFFF_FFFF_FFFF_FFFF
        if reg == REG_PC:
            # uc_reg_write would also set Unicorn's skip_sync_pc_on_exit, which stays set
            # for the rest of the run: the next stop at a load/store would then leave the
            # PC at the start of the translated block and re-execute its first part.
            # uc_reg_write2 only ends the block, which is all a trap delivery needs.
            self._size[0] = 8
            _lib.uc_reg_write2(self._h, reg, self._v, self._size)
        else:
            _lib.uc_reg_write(self._h, reg, self._v)

    def _batch(self, regs: tuple[int, ...]) -> tuple[object, object, object]:
        b = self._batches.get(regs)
        if b is None:
            ids = _ffi.new("int[]", list(regs))
            vals = _ffi.new("uint64_t[]", len(regs))
            ptrs = _ffi.new("void *[]", [vals + i for i in range(len(regs))])
            b = self._batches[regs] = (ids, vals, ptrs)
        return b

    def get_many(self, regs: tuple[int, ...]) -> list[int]:
        """Several registers in one libunicorn call (trap delivery's hot path)."""
        ids, vals, ptrs = self._batch(regs)
        _lib.uc_reg_read_batch(self._h, ids, ptrs, len(regs))
        return list(vals)  # type: ignore[call-overload]

    def set_many(self, regs: tuple[int, ...], values: tuple[int, ...]) -> None:
        """Write several registers in order, in one call. Writing the PC this way ends
        the translated block without uc_reg_write's skip_sync side effect (see set)."""
        ids, vals, ptrs = self._batch(regs)
        for i, v in enumerate(values):
            vals[i] = v & 0xFFFF_FFFF_FFFF_FFFF  # type: ignore[index]
        _lib.uc_reg_write_batch(self._h, ids, ptrs, len(regs))

    @property
    def pc(self) -> int:
        return self.get(REG_PC)

    @property
    def priv(self) -> int:
        return self.get(REG_PRIV)

    def x(self, n: int) -> int:
        """General register xN."""
        return self.get(REG_X0 + n)

    def set_x(self, n: int, value: int) -> None:
        if n:
            self.set(REG_X0 + n, value)

    def gprs(self) -> list[int]:
        return [self.get(REG_X0 + i) for i in range(32)]

    # ---------------------------------------------------------------- CSRs
    def csr(self, reg: int) -> int:
        """Read any CSR regardless of the guest's current privilege."""
        p = self.priv
        if p == PRIV_M:
            return self.get(reg)
        res = _Reservation(self.uc)
        self.set(REG_PRIV, PRIV_M)
        v = self.get(reg)
        self.set(REG_PRIV, p)
        res.put_back()
        return v

    def set_csr(self, reg: int, value: int) -> None:
        """Write any CSR regardless of the guest's current privilege (WARL masks apply)."""
        p = self.priv
        if p == PRIV_M:
            self.set(reg, value)
            return
        res = _Reservation(self.uc)
        self.set(REG_PRIV, PRIV_M)
        self.set(reg, value)
        self.set(REG_PRIV, p)
        res.put_back()

    def use_c_mip(self, fn: Callable[[int, int], None]) -> None:
        """set_mip through fn(mask, level): the C bus's, one call instead of five (an IPI
        raises SSIP on the AI service's submit path)."""
        self._mip = fn

    def set_mip(self, mask: int, level: bool) -> None:
        """Raise (level=True) or lower interrupt-pending bits in mip (STIP, SEIP, SSIP)."""
        if self._mip is not None:
            self._mip(mask, level)
            return
        p = self.priv
        if p != PRIV_M:
            self.set(REG_PRIV, PRIV_M)
        mip = self.get(R.UC_RISCV_REG_MIP)
        self.set(R.UC_RISCV_REG_MIP, (mip | mask) if level else (mip & ~mask))
        if p != PRIV_M:
            self.set(REG_PRIV, p)

    def pending_enabled(self) -> int:
        """mip & mie for the supervisor interrupts: what would wake a wfi. In S-mode (a
        hart in wfi) sip & sie are those bits (mideleg = S_INTERRUPTS), read in one call
        without switching privilege (the run loop asks this of every idle hart)."""
        p, sip, sie = self.get_many(_PRIV_SIP_SIE)
        if p == PRIV_S:
            return sip & sie & S_INTERRUPTS
        if p != PRIV_M:
            self.set(REG_PRIV, PRIV_M)
        v = self.get(R.UC_RISCV_REG_MIP) & self.get(R.UC_RISCV_REG_MIE) & S_INTERRUPTS
        if p != PRIV_M:
            self.set(REG_PRIV, p)
        return v

    # ---------------------------------------------------------------- guest memory
    def vread(self, va: int, size: int, prot: int = UC_PROT_READ) -> bytes | None:
        """Read guest-virtual memory through the MMU at the current privilege and satp;
        None if the address does not translate or is not backed by RAM."""
        buf = self._buf if size <= 16 else _ffi.new("char[]", size)
        if _lib.uc_vmem_read(self._h, va, prot, buf, size):
            return None
        return bytes(_ffi.buffer(buf, size))

    def translate(self, va: int, prot: int = UC_PROT_READ) -> int | None:
        """Physical address of va at the current privilege, or None."""
        if _lib.uc_vmem_translate(self._h, va, prot, self._v):
            return None
        return int(self._v[0])

    def fetch(self, va: int) -> tuple[int, int] | None:
        """(instruction bits, length 2 or 4) at va, or None if it cannot be read."""
        lo = self.vread(va, 2, UC_PROT_EXEC)
        if lo is None:
            return None
        half = lo[0] | lo[1] << 8
        if half & 3 != 3:
            return half, 2
        hi = self.vread(va + 2, 2, UC_PROT_EXEC)
        if hi is None:
            return None
        return half | (hi[0] | hi[1] << 8) << 16, 4

    def read_u64(self, va: int) -> int | None:
        b = self.vread(va, 8)
        return None if b is None else int.from_bytes(b, "little")
