"""virtio block device: the file-system disk at VIRTIO0 (driver: kernel_c/virtio_disk.c).

The disk image (`--fs`, build/fs.img) is read into host memory at start. Requests are
served synchronously inside the QUEUE_NOTIFY write, so the used ring is filled and the
interrupt raised before the driver's next instruction. Writes stay in memory unless the
machine was started with `persist=True`, which also writes them through to the file.

Request layout (virtio 1.1, 5.2.6): a device-readable header `struct virtio_blk_req`
(kernel_c/virtio.h), the data buffers, and a one-byte device-writable status.
VIRTIO_BLK_T_IN, _OUT and _FLUSH (offered as VIRTIO_BLK_F_FLUSH) are served; other types
get VIRTIO_BLK_S_UNSUPP, and transfers past the end of the disk or not in whole sectors
get VIRTIO_BLK_S_IOERR.

Crash consistency. `persist=True` writes each guest write through to the file with one
pwrite(2), in the order the guest issued them, and fsyncs the file at each flush. A
`kill -9` of the harness lands between two pwrites, so the file always holds a prefix of
the guest's writes: exactly what a power cut after the k-th write leaves, which the
kernel's log (kernel_c/log.c) recovers from at the next mount. The fdatasync makes each
flush a barrier for the host's own power too (it costs a host disk flush, four per
commit).

`journal` (a list, when given) records every write as `(byte offset, data)` and every
flush as None, so harness/disk/crashtest.py can rebuild the disk as any crash would have left
it: after the k-th write, or with the writes since the last flush reordered or lost.
`cut_after = k` cuts the power live instead: the disk ignores every write after the k-th
(the guest runs on, talking to a dead disk), which the tests use to check that rebuilding
from the journal gives the same disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.devices.base import DeviceContext
from harness.devices.virtio_mmio import Chain, V, VirtioMmio

SECTOR = V["VIRTIO_BLK_SECTOR"]
CAPACITY_OFFSET = V["VIRTIO_BLK_CONFIG_CAPACITY"] - V["VIRTIO_MMIO_CONFIG"]
T_IN, T_OUT, T_FLUSH = V["VIRTIO_BLK_T_IN"], V["VIRTIO_BLK_T_OUT"], V["VIRTIO_BLK_T_FLUSH"]
F_FLUSH = 1 << V["VIRTIO_BLK_F_FLUSH"]
S_OK, S_IOERR, S_UNSUPP = V["VIRTIO_BLK_S_OK"], V["VIRTIO_BLK_S_IOERR"], V["VIRTIO_BLK_S_UNSUPP"]
REQ = V.struct("virtio_blk_req")
REQ_FMT = REQ.scalar_struct("type", "reserved", "sector")

# one entry per write (byte offset, data) or flush (None), in the order served
Journal = list[tuple[int, bytes] | None]


class DiskHistory:
    """Every write to the disk with what it overwrote, and where in that list the disk
    is now (time travel, harness/machine/snapshot.py): going back undoes writes, going forward
    again redoes them; a deterministic re-execution writes what is already there, so its
    writes just move the position on."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, bytes, bytes]] = []  # (offset, old, new)
        self.pos = 0

    def write(self, disk: bytearray, start: int, data: bytes) -> None:
        if self.pos < len(self.writes) and self.writes[self.pos][0] == start \
                and self.writes[self.pos][2] == data:
            self.pos += 1
            return
        del self.writes[self.pos:]  # another future than the recorded one
        self.writes.append((start, bytes(disk[start : start + len(data)]), data))
        self.pos += 1

    def move_to(self, disk: bytearray, pos: int) -> None:
        while self.pos > pos:
            self.pos -= 1
            start, old, _ = self.writes[self.pos]
            disk[start : start + len(old)] = old
        while self.pos < pos:
            start, _, new = self.writes[self.pos]
            disk[start : start + len(new)] = new
            self.pos += 1


class VirtioBlk(VirtioMmio):
    """A virtio-blk disk backed by an in-memory image."""

    device_id = V["VIRTIO_ID_BLOCK"]

    def __init__(self, name: str, ctx: DeviceContext, *, image: str | Path | None,
                 persist: bool = False, data: bytearray | None = None,
                 journal: Journal | None = None) -> None:
        super().__init__(name, ctx)
        self.path = Path(image) if image is not None else None
        if data is not None:
            self.disk = data  # a reboot keeps the disk as the guest left it
        elif self.path is None:
            self.disk = bytearray()
        else:
            try:
                self.disk = bytearray(self.path.read_bytes())
            except OSError as exc:
                raise ValueError(f"disk image {self.path}: {exc.strerror}") from None
            if len(self.disk) % SECTOR:
                raise ValueError(f"disk image {self.path}: {len(self.disk)} bytes is not a "
                                 f"multiple of the {SECTOR}-byte sector")
        self._file = open(self.path, "r+b") if persist and self.path is not None else None  # noqa: SIM115
        self.reads = self.writes = self.flushes = 0
        self.bytes_read = self.bytes_written = 0
        self.journal = journal
        self.cut_after: int | None = None
        self.history: DiskHistory | None = None  # time travel's undo/redo of the writes

    def device_features(self) -> int:
        return F_FLUSH

    def config_space(self) -> bytes:
        cap = (len(self.disk) // SECTOR).to_bytes(8, "little")
        return bytes(CAPACITY_OFFSET) + cap

    def handle(self, queue: int, chain: Chain) -> int | None:
        """Serve one request. Under a random or PCT schedule (harness/det/mode.py) it
        is served later, at a guest time drawn from the seed, as a real disk's DMA would
        be: so the driver's handling of a slow completion gets exercised too."""
        det = self.ctx.det
        if det is not None and det.defer_disk and self.ctx.timeline is not None:
            epoch = self.resets
            self.ctx.timeline.at(det.latency("disk"),
                                 lambda: self._served_later(queue, chain, epoch))
            return None
        return self._serve(chain)

    def _served_later(self, queue: int, chain: Chain, epoch: int) -> None:
        if epoch != self.resets:
            return  # the driver reset the device meanwhile: the request is gone
        self.complete(queue, chain.head, self._serve(chain))

    def _serve(self, chain: Chain) -> int:
        head = self.gather(chain.readable)
        if len(head) < REQ.size or not chain.writable:
            return self._finish(chain, S_IOERR, 0)
        kind, _, sector = REQ_FMT.unpack_from(head)
        out_data = memoryview(head)[REQ.size :]
        in_room = chain.writable_len - 1  # the last writable byte is the status
        start = sector * SECTOR
        if kind == T_IN:
            if in_room % SECTOR or start + in_room > len(self.disk):
                return self._finish(chain, S_IOERR, 0)
            data = memoryview(self.disk)[start : start + in_room]
            n = self.scatter(chain.writable, data)
            self.reads += 1
            self.bytes_read += n
            return self._finish(chain, S_OK, n)
        if kind == T_OUT:
            n = len(out_data)
            if n % SECTOR or start + n > len(self.disk):
                return self._finish(chain, S_IOERR, 0)
            if self.cut_after is not None and self.writes >= self.cut_after:
                return self._finish(chain, S_OK, 0)   # the power is gone: lost
            if self.history is not None:
                self.history.write(self.disk, start, bytes(out_data))
            self.disk[start : start + n] = out_data
            if self._file is not None:
                os.pwrite(self._file.fileno(), out_data, start)
            if self.journal is not None:
                self.journal.append((start, bytes(out_data)))
            self.writes += 1
            self.bytes_written += n
            return self._finish(chain, S_OK, 0)
        if kind == T_FLUSH:
            if self._file is not None:
                os.fdatasync(self._file.fileno())
            if self.journal is not None:
                self.journal.append(None)
            self.flushes += 1
            return self._finish(chain, S_OK, 0)
        return self._finish(chain, S_UNSUPP, 0)

    def _finish(self, chain: Chain, status: int, data_written: int) -> int:
        addr, length = chain.writable[-1] if chain.writable else (0, 0)
        if length:
            self.ctx.ram.write(addr + length - 1, bytes([status]))
        return data_written + 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def describe(self) -> str:
        size = len(self.disk)
        return f"virtio-blk {size / 2**20:.1f} MiB" if size else "virtio-blk (no disk)"
