"""The board: harts with their traps and MMIO bus, the devices' memory map, the run loop,
the watchdog, snapshots and time travel."""
