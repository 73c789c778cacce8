"""16550-style UART: the console (kernel_c/uart.c is the driver; UART0, UART0_IRQ).

Registers are the National Semiconductor PC16550D's, 8 bits wide at byte offsets 0-7
(register shift 0, as on QEMU's virt board). The model:

- Transmit is instantaneous: a THR write hands the byte to `tx` and the transmitter is
  always idle (LSR.THRE|TEMT), so polled output needs no interrupt. If the driver enables
  the THR-empty interrupt (IER.ETBEI) it gets one per byte, cleared by reading IIR or by
  the next THR write, as the datasheet says.
- Receive: `receive(data)` (on the emulation thread; host threads go through
  `ctx.post`) appends to an unbounded host-side FIFO; LSR.DR says a byte waits, RHR pops
  it, and the line to the PLIC is high while IER.ERBFI is set and bytes wait.
- Divisor latch (LCR.DLAB) registers, FCR, MCR, MSR and SCR are kept but do nothing; in
  particular a FIFO reset through FCR does not throw away input that already arrived.

On the C path (`use_c_path`, a `struct fp_uart` of harness/fastpath/mmio.h) the C bus serves
the LSR read and the THR write while the THR-empty interrupt is off (such a byte changes
nothing but the output) into a buffer that `take_tx` drains; this model serves the rest
and mirrors IER, LCR and "a byte waits" into the struct after each change (`_sync`).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any

from harness.devices.base import Device, DeviceContext


class Reg(enum.IntEnum):
    RBR_THR_DLL = 0  # receive buffer (read) / transmit holding (write) / divisor low
    IER_DLM = 1      # interrupt enable / divisor high
    IIR_FCR = 2      # interrupt identification (read) / FIFO control (write)
    LCR = 3          # line control
    MCR = 4          # modem control
    LSR = 5          # line status (read-only)
    MSR = 6          # modem status (read-only)
    SCR = 7          # scratch


class IER(enum.IntFlag):
    ERBFI = 1 << 0  # received data available
    ETBEI = 1 << 1  # transmit holding register empty
    ELSI = 1 << 2   # receiver line status
    EDSSI = 1 << 3  # modem status


class LSR(enum.IntFlag):
    DR = 1 << 0    # data ready
    THRE = 1 << 5  # transmit holding register empty
    TEMT = 1 << 6  # transmitter empty


class IIR(enum.IntEnum):
    NONE = 0x01      # no interrupt pending
    THR_EMPTY = 0x02
    RX_DATA = 0x04
    FIFOS_ON = 0xC0  # or-ed in while FCR enabled the FIFOs


LCR_DLAB = 1 << 7
FCR_ENABLE = 1 << 0


class Uart16550(Device):
    """The console UART; `tx(byte)` receives every transmitted byte."""

    def __init__(self, name: str, ctx: DeviceContext, *, tx: Callable[[int], None]) -> None:
        super().__init__(name, ctx)
        self.tx = tx
        self.rx: deque[int] = deque()
        self.ier = 0
        self.lcr = 0
        self.mcr = 0
        self.scr = 0
        self.fcr = 0
        self.dll, self.dlm = 1, 0
        self.thre_pending = False  # THR-empty interrupt condition (datasheet table IV)
        self.py_tx = 0   # bytes this model transmitted (tx_count adds the C path's)
        self.rx_count = 0
        self._line = False
        self.fast: Any = None  # struct fp_uart on the C path

    @property
    def tx_count(self) -> int:
        """Bytes written to THR since reset, on either path."""
        return self.py_tx + (int(self.fast.tx) if self.fast is not None else 0)

    def use_c_path(self, st: Any) -> None:
        """Let the C bus serve LSR and THR through `st` (see the module docstring)."""
        st.thr, st.lsr, st.dlab, st.etbei = Reg.RBR_THR_DLL, Reg.LSR, LCR_DLAB, IER.ETBEI
        st.lsr_idle, st.lsr_dr = LSR.THRE | LSR.TEMT, LSR.DR
        self.fast = st
        self._sync()

    def tap(self, fn: Callable[[int], None]) -> None:
        """Also give every transmitted byte to fn, at once, in order with everything else
        the machine does (the C bus then leaves THR to this model)."""
        tx = self.tx

        def tee(byte: int) -> None:
            fn(byte)
            tx(byte)

        self.tx = tee
        if self.fast is not None:
            self.fast.tapped = 1

    def take_tx(self) -> bytes:
        """The bytes the C bus transmitted since the last call (b"" on the Python path)."""
        st = self.fast
        if st is None or not st.n:
            return b""
        data = bytes(st.buf[0 : st.n])
        st.n = 0
        return data

    def _sync(self) -> None:
        st = self.fast
        if st is not None:
            st.ier, st.lcr, st.rx_ready = self.ier, self.lcr, int(bool(self.rx))

    # ---------------------------------------------------------------- host side
    def receive(self, data: bytes) -> None:
        """Bytes typed on the host console arrive (emulation thread only)."""
        self.rx.extend(data)
        self._update()
        self._sync()

    # ---------------------------------------------------------------- registers
    def read(self, offset: int, size: int) -> int:
        if offset > Reg.SCR:
            return super().read(offset, size)
        self.need_size(offset, size, 1)
        dlab = self.lcr & LCR_DLAB
        if offset == Reg.RBR_THR_DLL:
            if dlab:
                return self.dll
            if not self.rx:
                return 0
            self.rx_count += 1
            b = self.rx.popleft()
            self._update()
            self._sync()
            return b
        if offset == Reg.IER_DLM:
            return self.dlm if dlab else self.ier
        if offset == Reg.IIR_FCR:
            iir = self._iir()
            if iir == IIR.THR_EMPTY:
                self.thre_pending = False  # reading IIR clears a THR-empty interrupt
                self._update()
            return iir | (IIR.FIFOS_ON if self.fcr & FCR_ENABLE else 0)
        if offset == Reg.LCR:
            return self.lcr
        if offset == Reg.MCR:
            return self.mcr
        if offset == Reg.LSR:
            return LSR.THRE | LSR.TEMT | (LSR.DR if self.rx else 0)
        if offset == Reg.MSR:
            return 0
        return self.scr

    def write(self, offset: int, size: int, value: int) -> None:
        self._write(offset, size, value)
        self._sync()

    def _write(self, offset: int, size: int, value: int) -> None:
        if offset > Reg.SCR:
            return super().write(offset, size, value)
        self.need_size(offset, size, 1)
        value &= 0xFF
        dlab = self.lcr & LCR_DLAB
        if offset == Reg.RBR_THR_DLL:
            if dlab:
                self.dll = value
                return
            self.py_tx += 1
            self.tx(value)
            self.thre_pending = True  # the byte left at once: THR is empty again
            self._update()
        elif offset == Reg.IER_DLM:
            if dlab:
                self.dlm = value
                return
            if value & IER.ETBEI and not self.ier & IER.ETBEI:
                self.thre_pending = True  # enabling ETBEI with THR empty interrupts at once
            self.ier = value & 0x0F
            self._update()
        elif offset == Reg.IIR_FCR:
            # FCR's "clear receive FIFO" does not drop host input: bytes typed or piped
            # before the driver initialised the UART wait for it, as on a line with flow
            # control (otherwise `echo cmd | harness run` would race the boot)
            self.fcr = value
        elif offset == Reg.LCR:
            self.lcr = value
        elif offset == Reg.MCR:
            self.mcr = value
        elif offset == Reg.SCR:
            self.scr = value
        else:
            raise self.error(offset, size, f"write of {value:#x} to read-only {Reg(offset).name}")

    # ---------------------------------------------------------------- interrupt line
    def _iir(self) -> int:
        if self.ier & IER.ERBFI and self.rx:
            return IIR.RX_DATA
        if self.ier & IER.ETBEI and self.thre_pending:
            return IIR.THR_EMPTY
        return IIR.NONE

    def _update(self) -> None:
        line = self._iir() != IIR.NONE
        if line != self._line:
            self._line = line
            self.ctx.irq(line)

    def describe(self) -> str:
        return "uart16550"
