"""Supervisor software interrupts at SSWI (kernel_c/memlayout.h), in the manner of the
RISC-V ACLINT SSWI device: the machine's inter-processor interrupts.

    SSWI + 4*hart   write 1: raise that hart's mip.SSIP (write 0: nothing); reads 0

The target clears SSIP itself (csrc sip), as with ACLINT. A hart may interrupt itself.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.devices.base import Device, DeviceContext


class Sswi(Device):
    """One SETSSIP register per hart; `ssip(hart)` raises that hart's SSIP."""

    size = 0x4000

    def __init__(self, name: str, ctx: DeviceContext, *, ssip: Callable[[int], None],
                 nharts: int = 1) -> None:
        super().__init__(name, ctx)
        self.ssip = ssip
        self.nharts = nharts
        self.sent = 0  # interrupts raised

    def _hart(self, offset: int, size: int) -> int:
        self.need_size(offset, size, 4)
        h, r = divmod(offset, 4)
        if r or h >= self.nharts:
            raise self.error(offset, size, f"no such hart (the machine has {self.nharts})")
        return h

    def read(self, offset: int, size: int) -> int:
        self._hart(offset, size)
        return 0

    def write(self, offset: int, size: int, value: int) -> None:
        h = self._hart(offset, size)
        if value & 1:
            self.sent += 1
            self.ssip(h)

    def describe(self) -> str:
        return "sswi"
