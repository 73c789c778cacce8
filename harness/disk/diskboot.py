"""Boot the kernel in this process on a disk image held in memory, and keep the disk.

harness/disk/crashtest.py, harness/disk/imagefuzz.py and harness/bench/fs.py boot hundreds of
machines, each on its own copy of an image (a crash point, a mutated image): a machine in
this process boots in well under a second, a `harness run` subprocess takes several
times longer. The disk is never read from or written to a file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.devices.virtio_blk import Journal
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, Exit, MachineConfig

__all__ = ["DEFAULT_FS", "DEFAULT_KERNEL", "DiskBoot", "boot_disk"]


@dataclass
class DiskBoot:
    """How one boot ended, what it printed, and the disk as the guest left it."""

    exit: Exit
    status: int
    message: str
    output: str
    disk: bytearray
    panic: str          # the guest's "panic: ..." line, "" if none
    writes: int = 0     # disk writes and flushes the guest issued
    flushes: int = 0

    @property
    def clean(self) -> bool:
        """Powered off by itself: no panic, machine fault, hang or timeout."""
        return self.exit == Exit.POWEROFF


def boot_disk(image: bytes | bytearray, cmd: str, *, kernel: Path = DEFAULT_KERNEL,
              timeout: float = 30.0, hang_timeout: float | None = 10.0, flags: int = 0,
              journal: Journal | None = None, cut_after: int | None = None,
              clock: str = "host",
              on_tx: Callable[[int], None] | None = None) -> DiskBoot:
    """Run `cmd` (init's -c commands) on a copy of `image`. `journal` records the disk's
    writes and flushes (harness/devices/virtio_blk.py), `cut_after` makes it drop every
    write after that many; `on_tx(byte)` sees each console byte as the guest sends it, in
    order with the disk requests; `clock` as `harness run --clock`."""
    out = bytearray()
    config = MachineConfig(kernel=kernel, fs=None, disk_data=bytearray(image), cmd=cmd,
                           timeout=timeout, hang_timeout=hang_timeout, output=out.extend,
                           flags=flags, disk_journal=journal, clock=clock)
    m = Machine(config)
    m.disk.cut_after = cut_after
    try:
        if on_tx is not None:
            m.uart.tap(on_tx)
        r = m.run()
        panic = m.panic_message()
    finally:
        m.close()
    return DiskBoot(r.exit, r.status, r.message,
                    out.decode(errors="replace").replace("\r\n", "\n"), m.disk.disk, panic,
                    m.disk.writes, m.disk.flushes)
