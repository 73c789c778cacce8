"""What a machine is built from and what a run gives back: MachineConfig, RunResult, Exit,
the memory map and the run loop's constants.

The memory map is MEMORY_MAP below; base addresses and interrupt numbers are names from
kernel_c/memlayout.h.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.abi import cheader
from harness.det.journal import Journal
from harness.det.schedule import ScheduleSpec
from harness.devices.base import Device, DeviceContext
from harness.devices.clint import Clint
from harness.devices.hartctl import HartCtl
from harness.devices.plic import Plic
from harness.devices.power import Power
from harness.devices.sswi import Sswi
from harness.devices.uart import Uart16550
from harness.devices.virtio_blk import VirtioBlk

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
DEFAULT_FS = ROOT / "build" / "fs.img"
ML = cheader.load("memlayout.h")
UNTIL = 2**64 - 2  # never 0: VA 0 is user text (reference, gotcha 13)
WFI = (0x1050_0073).to_bytes(4, "little")
REACHED = "reached"  # run_to's PAUSE message: the position asked for
ICOUNT_SLICE = 200_000  # instructions per counted slice in --clock icount mode
ICOUNT_SLICE_SMP = 20_011  # the same while another hart could run (prime: slice ends
#                            do not alias with the length of a guest loop)
QUANTUM_NS = 4_000_000  # a hart's slice (host clock) while another hart could run
IPI_GRACE_NS = 2_000_000  # a slice that woke an idle hart ends at a trap after this (_hurry)
HURRY_MAX_NS = 10_000_000  # and at the latest after this (our kernel's timer tick)
ATOMIC_WINDOW_MAX_NS = 50_000_000  # an outside stop waits at most this for an AMO/SC window
# an image that defines this symbol says its AMOs and SCs survive being repeated
# (kernel_c/spinlock.c), so the machine does not hook them (_on_atomic_edge)
ATOMICS_SURVIVE_REPEAT = "atomics_survive_repeat"
CONSOLE_TAIL = 1 << 16  # bytes of console output kept for fault reports

# The memory map: (name, base name in memlayout.h, device class, PLIC source name or None).
# Window sizes are the classes' `size`; RAM and the boot info page are added by Machine.
# Optional devices (the AI device at VIRTIO1) come from MachineConfig.extra_devices.
MEMORY_MAP: list[tuple[str, str, type[Device], str | None]] = [
    ("power", "POWER", Power, None),
    ("hartctl", "HARTCTL", HartCtl, None),
    ("clint", "CLINT", Clint, None),
    ("sswi", "SSWI", Sswi, None),
    ("plic", "PLIC", Plic, None),
    ("uart0", "UART0", Uart16550, "UART0_IRQ"),
    ("virtio0", "VIRTIO0", VirtioBlk, "VIRTIO0_IRQ"),
]


DeviceFactory = Callable[[str, DeviceContext], Device]


class Exit(enum.Enum):
    POWEROFF = "poweroff"    # the guest powered off with a status (POWER_PASS)
    PANIC = "panic"          # the guest reported failure (POWER_FAIL), e.g. a kernel panic
    RESET = "reset"          # the guest asked for a reboot (POWER_RESET)
    FAULT = "fault"          # the machine stopped the guest: unknown MMIO, unmapped memory, ...
    TIMEOUT = "timeout"      # --timeout passed
    QUIT = "quit"            # the user quit (Ctrl-A X) or the harness was told to stop
    HANG = "hang"            # no guest progress for --hang-timeout s (machine/watchdog.py)
    PAUSE = "pause"          # a debugger stopped the guest; run()/step() go on from there


@dataclass
class RunResult:
    exit: Exit
    status: int = 0        # guest status (POWEROFF) or failure code (PANIC)
    message: str = ""      # what happened, for FAULT/PANIC/TIMEOUT/QUIT
    pc: int | None = None  # where the guest was stopped, for the report
    error: BaseException | None = None


@dataclass
class MachineConfig:
    """Everything `harness run` can set."""

    kernel: Path
    fs: Path | None = None
    ram_size: int = 128 << 20
    clock: str = "host"            # "host" or "icount"
    cmd: str = ""                  # bootinfo.cmd: commands for init, "" = interactive
    persist: bool = False          # write disk changes back to the image file
    timeout: float | None = None   # wall-clock seconds
    output: Callable[[bytes], None] | None = None  # console output sink (default: stdout)
    flags: int = 0                 # extra BOOT_F_* bits
    disk_data: bytearray | None = None  # disk contents to use instead of reading `fs`
    disk_journal: list | None = None  # record the disk's writes and flushes here
    hang_timeout: float | None = None  # seconds without guest progress -> Exit.HANG
    cpus: int = 1                  # harts (1..bootinfo.MAXCPU)
    traps: str = ""                # "c" or "python"; "" = $HARNESS_TRAPS, else c
    # deterministic mode (harness/det/mode.py): a seeded schedule, and the journal it
    # records into or replays from (a new one if None)
    schedule: ScheduleSpec | None = None
    journal: Journal | None = None
    time_travel: bool = False      # checkpoints for going back (harness/machine/timetravel.py)
    # optional devices: (name, base name in memlayout.h, factory(name, ctx), PLIC source name)
    extra_devices: list[tuple[str, str, DeviceFactory, str | None]] = field(default_factory=list)


@dataclass
class Stats:
    runs: int = 0
    wfi_sleeps: int = 0
    sleep_s: float = 0.0
    run_s: float = 0.0
    ipis: int = 0
    ipi_wakes: int = 0        # IPIs that woke a hart idle in wfi
    ipi_wake_s: float = 0.0   # from the SSWI store to the woken hart's next run
