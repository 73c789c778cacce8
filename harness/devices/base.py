"""What every device shares: the error type, the context the machine injects, a base class.

A device is a small class that owns one MMIO window of the memory map
(harness/machine/board.py). The machine calls `read(offset, size)` / `write(offset, size,
value)` from Unicorn's MMIO callbacks on the emulation thread. A device never touches
the CPU: it raises its interrupt line through `ctx.irq`, reaches guest RAM (DMA) through
`ctx.ram`, and anything that happens on a host thread (console input, an inference
engine finishing) is handed to the emulation thread with `ctx.post`, which also wakes a
sleeping `wfi` and stops a running slice promptly.

An access the device does not implement raises DeviceError (never a silent zero): the
run stops and the harness prints the fault report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.cpu.clock import Clock
    from harness.cpu.physmem import PhysMem
    from harness.det.mode import Deterministic
    from harness.det.timeline import HostTimeline, Timeline


class MachineFault(Exception):
    """The guest did something this machine does not implement or allow; the run stops
    and the harness reports it like a panic (registers, instruction, backtrace).
    `pc` is the guest instruction responsible, when the raiser knows it better than the
    PC at which emulation stopped."""

    def __init__(self, message: str, pc: int | None = None) -> None:
        super().__init__(message)
        self.pc = pc


class DeviceError(MachineFault):
    """A guest access to a device register that does not exist or cannot be used so."""

    def __init__(self, device: str, offset: int, size: int, what: str) -> None:
        self.device, self.offset, self.size = device, offset, size
        super().__init__(f"{device}: {what} (offset {offset:#x}, {size}-byte access)")


@dataclass
class DeviceContext:
    """What the machine gives a device."""

    irq: Callable[[bool], None]  # set this device's interrupt line (PLIC source) high/low
    post: Callable[[Callable[[], None]], None]  # thread-safe: run fn on the emulation thread
    ram: PhysMem  # guest physical memory, for DMA
    clock: Clock | None = None  # the machine's mtime source, for device timestamps
    # mtime when the kernel started (bootinfo.boot_mtime): the guest's time_us() is
    # (mtime - boot_mtime) in microseconds
    boot_mtime: Callable[[], int] = lambda: 0
    # a host thread's result for the guest: `timeline.expect(delay)` now, `.fire(fn)` from
    # the thread (harness/det/timeline.py); the ordinary machine's fires straight into `post`
    timeline: Timeline | HostTimeline | None = None
    det: Deterministic | None = None  # deterministic mode's state (harness/det/mode.py)


def _no_irq(level: bool) -> None:
    pass


class Device:
    """Base class: a named MMIO window whose unknown registers raise DeviceError."""

    #: bytes of physical address space the device decodes (a 4 KiB multiple)
    size = 0x1000

    def __init__(self, name: str, ctx: DeviceContext) -> None:
        self.name = name
        self.ctx = ctx

    def read(self, offset: int, size: int) -> int:
        raise self.error(offset, size, "read of an unknown register")

    def write(self, offset: int, size: int, value: int) -> None:
        raise self.error(offset, size, f"write of {value:#x} to an unknown register")

    def error(self, offset: int, size: int, what: str) -> DeviceError:
        return DeviceError(self.name, offset, size, what)

    def need_size(self, offset: int, size: int, *allowed: int) -> None:
        """Raise DeviceError unless the access width is one of `allowed`."""
        if size not in allowed:
            widths = " or ".join(str(a) for a in allowed)
            raise self.error(offset, size, f"register takes {widths}-byte accesses")

    def busy(self) -> bool:
        """True while the device has work in flight that will interrupt the guest later
        (harness/machine/watchdog.py: an idle guest waiting for it is not hung)."""
        return False

    def close(self) -> None:
        """Release host resources (threads, files). Called once when the machine stops."""

    def describe(self) -> str:
        """One phrase for the boot banner, e.g. "virtio-blk 2.0 MiB"."""
        return type(self).__name__.lower()
