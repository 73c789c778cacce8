"""Guest RAM: one anonymous host mapping shared with Unicorn (zero-copy for devices).

RAM is mapped into Unicorn with `mem_map_ptr` over an `mmap`, so device DMA (virtio
descriptors, buffers, rings) reads and writes it through a memoryview without copying
(a small access costs a slice, not a `uc.mem_read` call), and guest stores are
visible at once. Pages are allocated by the host kernel only when touched, so a large
`--mem` costs nothing up front.

Unicorn does not notice host writes into memory that already holds translated code
(gotcha 12 in the reference), so `write` drops translations of the range it changes.

With several harts (harness/machine/board.py) every hart is its own Unicorn instance and the
one mapping is attached to each of them (`attach`): a store by any hart is visible to
all at once, but each instance keeps its own translated code, so `write` drops the
range in every instance, and `forget_code(..., hart=h)` in one (a hart's fence.i).

Copy-on-write RAM (`cow=True`, for time travel: harness/machine/snapshot.py). The mapping is a
private mapping of a memory file instead of anonymous memory: the file holds RAM as it
was at a checkpoint, and the host kernel gives every page the guest writes afterwards a
private copy. `/proc/self/pagemap` says which pages have one (present, not file-backed),
so a checkpoint finds what changed without comparing 128 MiB, and dropping the private
copies (`madvise(MADV_DONTNEED)`) returns RAM to the file's contents at once, at the same
host address (Unicorn's pointers stay valid).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

import numpy as np
from unicorn import UC_PROT_ALL, Uc

from harness.cpu.registers import PRIV_M, REG_PRIV, Hart

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class PhysMem:
    """Guest physical RAM [base, base + size)."""

    def __init__(self, uc: Uc, hart: Hart, base: int, size: int, cow: bool = False) -> None:
        if size <= 0 or size % 0x1000:
            raise ValueError(f"RAM size must be a positive multiple of 4 KiB, not {size}")
        self.uc, self.hart = uc, hart
        self.base, self.size = base, size
        self.fd = -1  # the memory file under a copy-on-write mapping
        if cow:
            self.fd = os.memfd_create("guest-ram", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, size)
            self._mm = mmap.mmap(self.fd, size, flags=mmap.MAP_PRIVATE,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
        else:
            self._mm = mmap.mmap(-1, size)
        self._anchor = ctypes.c_char.from_buffer(self._mm)  # pins the mapping while Unicorn uses it
        self.view = memoryview(self._mm)
        self._cpus: list[tuple[Uc, Hart]] = []
        self.attach(uc, hart)

    def attach(self, uc: Uc, hart: Hart) -> None:
        """Map this RAM (the same host pages) into another hart's Unicorn instance."""
        uc.mem_map_ptr(self.base, self.size, UC_PROT_ALL, ctypes.addressof(self._anchor))
        self._cpus.append((uc, hart))

    # ---------------------------------------------------------------- copy-on-write
    def changed_pages(self) -> np.ndarray:
        """Page numbers (from 0 at `base`) written since the file was last made the RAM's
        contents (cow only)."""
        assert self.fd >= 0, "changed_pages needs cow=True"
        addr = ctypes.addressof(self._anchor)
        n = self.size >> 12
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
        try:
            data = os.pread(fd, 8 * n, (addr >> 12) * 8)
        finally:
            os.close(fd)
        e = np.frombuffer(data, dtype=np.uint64)
        present, filed = (e >> np.uint64(63)) & np.uint64(1), (e >> np.uint64(61)) & np.uint64(1)
        return np.nonzero(present & (filed ^ np.uint64(1)))[0]

    def file_page(self, page: int) -> bytes:
        return os.pread(self.fd, 0x1000, page << 12)

    def set_file_page(self, page: int, data: bytes) -> None:
        os.pwrite(self.fd, data, page << 12)

    def page(self, page: int) -> bytes:
        return self.view[page << 12 : (page + 1) << 12].tobytes()

    def drop_changes(self) -> None:
        """RAM becomes the file's contents again (every private page dropped)."""
        libc = ctypes.CDLL(None, use_errno=True)
        addr = ctypes.c_void_p(ctypes.addressof(self._anchor))
        if libc.madvise(addr, ctypes.c_size_t(self.size), 4):  # MADV_DONTNEED
            raise OSError(ctypes.get_errno(), "madvise(MADV_DONTNEED) on guest RAM failed")

    def contains(self, pa: int, n: int = 1) -> bool:
        return self.base <= pa and pa + n <= self.base + self.size and n >= 0

    def _off(self, pa: int, n: int) -> int:
        if not self.contains(pa, n):
            raise IndexError(f"[{pa:#x}, {pa + n:#x}) is not inside RAM "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        return pa - self.base

    def read(self, pa: int, n: int) -> bytes:
        o = self._off(pa, n)
        return self.view[o : o + n].tobytes()

    def slice(self, pa: int, n: int) -> memoryview:
        """A zero-copy view of [pa, pa+n); writing through it does NOT drop translated
        code, so use it only for reads or for data pages (see `write`)."""
        o = self._off(pa, n)
        return self.view[o : o + n]

    def write(self, pa: int, data: bytes | bytearray | memoryview) -> None:
        """Store bytes into RAM as a device (DMA) would, then drop any translated code
        for that range so the guest never executes stale instructions."""
        n = len(data)
        o = self._off(pa, n)
        self.view[o : o + n] = data
        if n:
            self.forget_code(pa, n)

    def forget_code(self, pa: int, n: int, hart: int | None = None) -> None:
        """Invalidate Unicorn's translations of [pa, pa+n) in every hart's instance, or
        only in hart `hart`'s."""
        self.forget_pages([(pa, n)], hart)

    def forget_pages(self, ranges: list[tuple[int, int]], hart: int | None = None) -> None:
        """`forget_code` for each (pa, n). Unicorn resolves a range through the current
        MMU context, so do it in M-mode, where addresses are physical."""
        for uc, h in self._cpus if hart is None else self._cpus[hart : hart + 1]:
            p = h.priv
            if p != PRIV_M:
                h.set(REG_PRIV, PRIV_M)
            try:
                for pa, n in ranges:
                    uc.ctl_remove_cache(pa, pa + n)
            finally:
                if p != PRIV_M:
                    h.set(REG_PRIV, p)

    def u16(self, pa: int) -> int:
        return _U16.unpack_from(self.view, self._off(pa, 2))[0]

    def u32(self, pa: int) -> int:
        return _U32.unpack_from(self.view, self._off(pa, 4))[0]

    def u64(self, pa: int) -> int:
        return _U64.unpack_from(self.view, self._off(pa, 8))[0]

    def set_u16(self, pa: int, v: int) -> None:
        _U16.pack_into(self.view, self._off(pa, 2), v)

    def set_u32(self, pa: int, v: int) -> None:
        _U32.pack_into(self.view, self._off(pa, 4), v)
