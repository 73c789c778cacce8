"""struct bootinfo (kernel_c/bootinfo.h): what the harness, as firmware, tells the kernel.

The layout is read from the header (harness/abi/cheader.py); this module only fills it in.
"""

from __future__ import annotations

from harness.abi import cheader

H = cheader.load("bootinfo.h")
LAYOUT = H.struct("bootinfo")
CMD_MAX = H["BOOTINFO_CMD_MAX"]
F_ICOUNT = H["BOOT_F_ICOUNT"]
F_AIDEV = H["BOOT_F_AIDEV"]
MAXCPU = H["MAXCPU"]
F_NOLOG = H["BOOT_F_NOLOG"]


def pack(*, ram_base: int, ram_size: int, timebase_hz: int, boot_mtime: int,
         flags: int = 0, cmd: str = "", ncpu: int = 1) -> bytes:
    """The bytes of struct bootinfo. Raises ValueError if cmd does not fit."""
    raw = cmd.encode()
    if len(raw) >= CMD_MAX:
        raise ValueError(f"the command line is {len(raw)} bytes; at most {CMD_MAX - 1} fit "
                         "in bootinfo.cmd")
    if b"\0" in raw:
        raise ValueError("the command line contains a NUL byte")
    return LAYOUT.pack(magic=H["BOOTINFO_MAGIC"], version=H["BOOTINFO_VERSION"],
                       ram_base=ram_base, ram_size=ram_size, timebase_hz=timebase_hz,
                       boot_mtime=boot_mtime, flags=flags, cmd_len=len(raw), ncpu=ncpu, cmd=raw)
