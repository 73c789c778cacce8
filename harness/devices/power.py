"""Power/reset device (SiFive "test finisher" style) at POWER (kernel_c/memlayout.h).

One 32-bit write-only register at offset 0: the low 16 bits say what to do, the high
16 bits carry a status:

    POWER_PASS  | status << 16   power off; the harness exits with `status`
    POWER_FAIL  | code << 16     report a failure (the kernel's panic() uses code 1)
    POWER_RESET                  reboot the machine

The write ends the current run at once (the machine stops emulation from the callback).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from harness.abi import cheader
from harness.devices.base import Device, DeviceContext

_ML = cheader.load("memlayout.h")


class PowerCmd(enum.IntEnum):
    PASS = _ML["POWER_PASS"]
    FAIL = _ML["POWER_FAIL"]
    RESET = _ML["POWER_RESET"]


class Power(Device):
    """The power register; `on_power(cmd, status)` is the machine's halt hook."""

    def __init__(self, name: str, ctx: DeviceContext, *,
                 on_power: Callable[[PowerCmd, int], None]) -> None:
        super().__init__(name, ctx)
        self.on_power = on_power

    def read(self, offset: int, size: int) -> int:
        if offset == 0:
            self.need_size(offset, size, 4)
            return 0  # write-only; reads as zero like the SiFive test device
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset != 0:
            return super().write(offset, size, value)
        self.need_size(offset, size, 4)
        try:
            cmd = PowerCmd(value & 0xFFFF)
        except ValueError:
            raise self.error(offset, size, f"unknown power command {value & 0xFFFF:#x} "
                             f"(expected POWER_PASS, POWER_FAIL or POWER_RESET)") from None
        self.on_power(cmd, value >> 16)

    def describe(self) -> str:
        return "power"
