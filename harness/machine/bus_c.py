"""The MMIO bus with C callbacks and the devices' hot registers in C (harness/fastpath/mmio.c).

`CBus` is an `MmioBus` (harness/machine/bus.py: restart completion, faults) whose Unicorn MMIO
callbacks are C functions. For the devices `CMmio` adopts, C serves the registers
that need no Python decision: the UART's THR write (while the THR-empty interrupt is off)
and LSR read, the PLIC's claim/complete, a virtio device's InterruptStatus read and
InterruptACK write (the block and the AI device: one per interrupt), the AI device's trace
register (the event and its time recorded in C, `VirtioAi._drain`), and with the host clock
the CLINT's mtime and mtimecmp (STIP re-evaluated in C; `CMmio.arm` keeps C told of
the waker's deadline, so only a store of an earlier deadline calls Python); a virtio device's
QUEUE_NOTIFY has its chains walked in C (harness/fastpath/virtq.c), each handed to the device's
`take_chain` through `fp_py_chain`, the first one with a problem left to Python's `_notify`;
`set_mip` of every hart goes through C too (an IPI's SSIP). Those devices then
keep that state in the C structs (`use_c_path` in plic.py, uart.py, virtio_mmio.py), so the
debugger, monitor, hang watch and reports read the same values on both paths. Every other
access goes to the device's Python `read`/`write` through one cffi callback
(`fp_py_mmio`), which is also the path of every DeviceError. C records each hart's last
MMIO instruction for `after_stop`.

The switch is the trap path's (`HARNESS_TRAPS=python`, harness/machine/traps_c.py): the
Python path maps the windows with `MmioBus`, and the devices keep Python state.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import partial
from typing import Any

from unicorn import Uc
from unicorn.unicorn_py3 import unicorn as _ucmod

from harness import fastpath
from harness.abi.bootinfo import MAXCPU
from harness.cpu.clock import HostClock
from harness.cpu.registers import Hart
from harness.devices.base import Device, MachineFault
from harness.devices.clint import Clint
from harness.devices.plic import NSOURCES, Plic
from harness.devices.uart import Uart16550
from harness.devices.virtio_mmio import CHAIN_MAX, VirtioMmio
from harness.machine.bus import Access, MmioBus
from harness.machine.traps_c import _c_lib

_SEIP = 1 << 9
_STIP = 1 << 5
_NO_DEADLINE = 2**63 - 1  # struct fp_clint's armed_ns for "none" (INT64_MAX)


def _fn(name: str, ffi: Any) -> Any:
    return ffi.cast("void *", ctypes.cast(getattr(_ucmod.uclib, name), ctypes.c_void_p).value)


def _engine(uc: Uc, ffi: Any) -> Any:
    return ffi.cast("void *", uc._uch.value)


class CMmio:
    """The machine's C device state: one PLIC, one UART, the virtio devices' interrupts."""

    def __init__(self, ucs: list[Uc], plic: Plic) -> None:
        ffi, lib = _c_lib()
        self.ffi, self.lib = ffi, lib
        if (lib.FP_MAXHARTS, lib.FP_NSOURCES, lib.FP_CHAIN_MAX) != (MAXCPU, NSOURCES,
                                                                    CHAIN_MAX):
            raise ValueError("harness/fastpath/mmio.h: FP_MAXHARTS/FP_NSOURCES/FP_CHAIN_MAX "
                             "are not bootinfo.h's MAXCPU / plic.py's NSOURCES / "
                             "virtio_mmio.py's CHAIN_MAX")
        p = self.plic = ffi.new("struct fp_plic *")
        for i, uc in enumerate(ucs):
            p.uc[i] = _engine(uc, ffi)
        p.reg_read, p.reg_write = _fn("uc_reg_read", ffi), _fn("uc_reg_write", ffi)
        from harness.devices.plic import CSTRIDE, SCLAIM

        p.sclaim, p.cstride, p.seip = SCLAIM, CSTRIDE, _SEIP
        plic.use_c_path(p)
        self.uart = ffi.new("struct fp_uart *")
        self._states: dict[int, tuple[int, Any]] = {id(plic): (lib.FP_WIN_PLIC, p)}
        self._keep: list[Any] = []  # structs only C points to
        self.clint: Any = None  # the struct fp_clint, if the CLINT is served in C

    def adopt(self, dev: Device, irq: int | None) -> None:
        """Serve dev's hot registers in C if it has any (call before its window is mapped)."""
        lib = self.lib
        if isinstance(dev, Uart16550) and not self._has(lib.FP_WIN_UART):
            dev.use_c_path(self.uart)
            self._states[id(dev)] = (lib.FP_WIN_UART, self.uart)
        elif isinstance(dev, VirtioMmio) and irq is not None:
            st = self.ffi.new("struct fp_virtio *")
            tr = self.ffi.new("struct fp_trace *")  # off until a device enables it
            vq = self.ffi.new("struct fp_virtq *")  # queue 0's notify (virtq.c)
            ram = dev.ctx.ram
            vq.ram = self.ffi.cast("uint8_t *", ctypes.addressof(ram._anchor))
            vq.ram_base, vq.ram_size = ram.base, ram.size
            st.src, st.plic, st.trace, st.vq = irq, self.plic, tr, vq
            self._keep += [tr, vq]
            dev.use_c_path(st)
            self._states[id(dev)] = (lib.FP_WIN_VIRTIO, st)
        elif isinstance(dev, Clint) and isinstance(dev.clock, HostClock) and self.clint is None:
            c = self.clint = self.ffi.new("struct fp_clint *")
            for i in range(len(dev.cmp)):
                c.uc[i] = self.plic.uc[i]
            c.reg_read, c.reg_write = self.plic.reg_read, self.plic.reg_write
            c.t0_ns, c.hz, c.stip, c.armed_ns = dev.clock.t0, dev.clock.hz, _STIP, _NO_DEADLINE
            dev.use_c_path(c)
            self._states[id(dev)] = (lib.FP_WIN_CLINT, c)

    def _structs(self) -> list[Any]:
        seen, out = set(), []
        for st in [self.plic, self.uart, *(s for _, s in self._states.values()), *self._keep]:
            if id(st) not in seen:
                seen.add(id(st))
                out.append(st)
        return out

    def state(self) -> list[bytes]:
        """Every C device struct as bytes (a snapshot, harness/machine/snapshot.py)."""
        return [bytes(self.ffi.buffer(st)) for st in self._structs()]

    def restore(self, state: list[bytes]) -> None:
        for st, data in zip(self._structs(), state, strict=True):
            self.ffi.buffer(st)[:] = data

    def arm(self, deadline: int | None) -> None:
        """The running slice's deadline changed (Waker.on_armed): tell the C CLINT."""
        if self.clint is not None:
            self.clint.armed_ns = _NO_DEADLINE if deadline is None else deadline

    def _has(self, kind: int) -> bool:
        return any(k == kind for k, _ in self._states.values())

    def window(self, dev: Device) -> tuple[int, Any]:
        """(window kind, its C state) for dev's window (FP_WIN_PYTHON, NULL if none)."""
        return self._states.get(id(dev), (self.lib.FP_WIN_PYTHON, self.ffi.NULL))

    def fast(self) -> int:
        """Accesses the C bus served without Python, all devices."""
        n = int(self.plic.fast) + int(self.uart.fast)
        return n + sum(int(st.fast) for k, st in self._states.values()
                       if k in (self.lib.FP_WIN_VIRTIO, self.lib.FP_WIN_CLINT))


class CBus(MmioBus):
    """One hart's bus with C callbacks (see the module docstring)."""

    def __init__(self, uc: Uc, hart: Hart, cmmio: CMmio) -> None:
        ffi, lib = cmmio.ffi, cmmio.lib
        self._ffi, self._lib, self._cmmio = ffi, lib, cmmio
        c = self._c = ffi.new("struct fp_bus *")
        self._handle = ffi.new_handle(self)  # kept: C holds only the pointer
        c.uc, c.handle, c.mmio_map = _engine(uc, ffi), self._handle, _fn("uc_mmio_map", ffi)
        self._wins: list[Any] = []  # the struct fp_window of each mapping, kept alive
        super().__init__(uc, hart)
        hart.use_c_mip(partial(lib.fp_set_mip, c.uc, cmmio.plic.reg_read,
                                    cmmio.plic.reg_write))
        uc._harness_bus = self  # type: ignore[attr-defined]  # C points into self._c

    @property  # type: ignore[override]
    def accesses(self) -> int:
        return int(self._c.accesses)

    @accesses.setter
    def accesses(self, value: int) -> None:
        self._c.accesses = value

    def map(self, base: int, device: Device) -> None:
        self.windows.append((base, device))
        w = self._ffi.new("struct fp_window *")
        w.bus, w.index = self._c, len(self.windows) - 1
        w.kind, w.dev = self._cmmio.window(device)
        self._wins.append(w)
        err = self._lib.fp_bus_map(w, base, device.size)
        if err:
            raise RuntimeError(f"uc_mmio_map failed for {device.name} (uc_err {err})")

    def new_run(self) -> None:
        self._c.nlast = 0

    def _take_last(self) -> list[Access]:
        c, out = self._c, []
        for i in range(c.nlast):
            a = c.last[i]
            base, dev = self.windows[a.win]
            out.append(Access(dev, base, a.offset, a.size, bool(a.write), int(a.value)))
        c.nlast = 0
        return out


def _py_mmio(handle: Any, win: int, offset: int, size: int, write: int, value: int,
             out: Any) -> int:
    """_py_call's work inline, without a closure: every Python-served access comes here
    (an IPI's SSWI store, on the AI service's submit path, among them)."""
    bus: CBus = _ffi.from_handle(handle)
    try:
        dev = bus.windows[win][1]
        if write:
            dev.write(offset, size, value)
        else:
            out[0] = dev.read(offset, size)
        return 0
    except BaseException as e:
        return _failed(bus, e)


def _py_chain(handle: Any, win: int) -> int:
    """A chain harness/fastpath/virtq.c walked: the device's take_chain."""
    bus: CBus = _ffi.from_handle(handle)
    try:
        bus.windows[win][1].take_chain()  # type: ignore[attr-defined]
        return 0
    except BaseException as e:
        return _failed(bus, e)


def _py_clint(handle: Any, win: int) -> None:
    _py_call(handle, win, lambda dev: dev.on_deadline())  # type: ignore[attr-defined]


def _py_call(handle: Any, win: int, fn: Callable[[Device], None]) -> int:
    """fn(the window's device) for C: 0, or 1 after a fault or error (the run then stops)."""
    bus: CBus = _ffi.from_handle(handle)
    try:
        fn(bus.windows[win][1])
        return 0
    except BaseException as e:
        return _failed(bus, e)


def _failed(bus: CBus, e: BaseException) -> int:
    """A device's fault or error stops the run: 1 for C."""
    if isinstance(e, MachineFault):
        bus._stop(e)
        return 1
    if bus.uc._hook_exception is None:  # a harness bug: emu_start re-raises it (as ctypes')
        bus.uc._hook_exception = e
    bus.uc.emu_stop()
    return 1


_ffi: Any = None
if fastpath.load() is not None:
    _ffi = fastpath.load()[0]  # type: ignore[index]
    _ffi.def_extern(name="fp_py_mmio")(_py_mmio)
    _ffi.def_extern(name="fp_py_clint")(_py_clint)
    _ffi.def_extern(name="fp_py_chain")(_py_chain)
