"""A machine's guest as harness/guest/ reads it: RAM and devices of a Machine, its hart.

The glue between the machine (harness/machine/board.py) and the guest readers, which know
neither the machine nor its devices: used by the reports (harness/run/launch.py) and the
debugger's Target (harness/debug/target.py).
"""

from __future__ import annotations

from pathlib import Path

from harness.guest.memory import Phys
from harness.guest.programs import Programs
from harness.guest.spaces import Guest
from harness.machine.board import Machine


def machine_phys(machine: Machine) -> Phys:
    """The physical memory of a machine (device registers are named, never read)."""

    def device_at(pa: int) -> str | None:
        hit = machine.bus.device_at(pa)
        return hit[1].name if hit is not None else None

    return Phys(machine.ram, device_at)


def machine_guest(machine: Machine, user_dir: Path | None = None) -> Guest:
    """The guest of a machine, read through its hart (user programs from user_dir)."""
    return Guest(machine.hart, machine_phys(machine), Programs(machine.config.kernel, user_dir))
