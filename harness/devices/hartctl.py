"""Hart start/status at HARTCTL (kernel_c/memlayout.h), in the manner of SBI's HSM
extension: hart 0 runs from reset, the others are parked until the kernel starts them.

    HART_START + 4*hart    write a physical address (32 bits): the hart starts there in
                           S-mode, paging off, a0 = hartid, a1 = BOOTINFO
    HART_STATUS + 4*hart   read: 1 once the hart has been started, else 0

Starting a hart that runs already, or one the machine does not have, is a DeviceError:
only the kernel reaches this device, so that is a kernel bug worth a report.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.abi import cheader
from harness.devices.base import Device, DeviceContext

_ML = cheader.load("memlayout.h")
START = _ML["HART_START"] - _ML["HARTCTL"]
STATUS = _ML["HART_STATUS"] - _ML["HARTCTL"]


class HartCtl(Device):
    """`start(hart, pc)` starts a parked hart; `started(hart)` tells whether it runs."""

    size = 0x1000

    def __init__(self, name: str, ctx: DeviceContext, *, start: Callable[[int, int], None],
                 started: Callable[[int], bool], nharts: int = 1) -> None:
        super().__init__(name, ctx)
        self.start, self.started, self.nharts = start, started, nharts

    def _hart(self, offset: int, size: int, base: int) -> int | None:
        h, r = divmod(offset - base, 4)
        if offset < base or r or h >= 0x40:
            return None
        self.need_size(offset, size, 4)
        if h >= self.nharts:
            raise self.error(offset, size, f"no hart {h} (the machine has {self.nharts})")
        return h

    def read(self, offset: int, size: int) -> int:
        h = self._hart(offset, size, STATUS)
        if h is not None:
            return int(self.started(h))
        if self._hart(offset, size, START) is not None:
            return 0
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        h = self._hart(offset, size, START)
        if h is None:
            raise self.error(offset, size, "write to a read-only or unknown register")
        if self.started(h):
            raise self.error(offset, size, f"hart {h} is already running")
        self.start(h, value & 0xFFFF_FFFF)

    def describe(self) -> str:
        return "hartctl"
