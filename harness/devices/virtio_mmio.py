"""virtio-mmio transport, version 2 ("modern"), with split virtqueues (virtio 1.1, 4.2 and 2.6).

Register offsets, status and feature bits and the ring layouts come from
kernel_c/virtio.h. A concrete device (virtio_blk.py, later the AI device) subclasses
VirtioMmio and provides `device_id`, `device_features()`, `config_space()` and
`handle(queue, chain)`:

- `handle` returns the number of bytes it wrote into the chain's device-writable buffers,
  and the transport puts the chain on the used ring and raises the interrupt at once; or
  it returns None and calls `complete(queue, head, written)` later, on the emulation
  thread. A device whose work runs on a host thread posts that call with `ctx.post`.
- Feature negotiation: the driver reads the 64 device feature bits through
  DEVICE_FEATURES_SEL, writes the bits it accepts, then sets FEATURES_OK; the device keeps
  FEATURES_OK only if the accepted bits are a subset of the offered ones (the driver must
  read STATUS back). VIRTIO_F_VERSION_1 is always offered; drivers that do not accept it
  (xv6's) are still served.
- Driver mistakes that real hardware would answer by hanging (a notify before DRIVER_OK, a
  descriptor index past the queue, a buffer outside RAM, a loop in a chain) raise
  DeviceError, so they show up as a machine fault with a report instead of a hang.
- The device raises the interrupt for every batch of used buffers; it does not implement
  VIRTIO_F_EVENT_IDX and does not look at the avail ring's NO_INTERRUPT flag.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from harness.abi import cheader
from harness.devices.base import Device, DeviceContext

V = cheader.load("virtio.h")
REG = V.prefixed("VIRTIO_MMIO_")  # register name -> offset
MAGIC_VALUE, DEVICE_ID, VENDOR_ID = REG["MAGIC_VALUE"], REG["DEVICE_ID"], REG["VENDOR_ID"]
CONFIG, QUEUE_NOTIFY = REG["CONFIG"], REG["QUEUE_NOTIFY"]
F_VERSION_1 = 1 << V["VIRTIO_F_VERSION_1"]
DESC_F_NEXT, DESC_F_WRITE = V["VRING_DESC_F_NEXT"], V["VRING_DESC_F_WRITE"]
STATUS_FEATURES_OK = V["VIRTIO_STATUS_FEATURES_OK"]
STATUS_DRIVER_OK = V["VIRTIO_STATUS_DRIVER_OK"]
INT_USED_RING = V["VIRTIO_INT_USED_RING"]
VENDOR = 0x4E455841  # "AXEN": ours, not QEMU's

_DESC = V.struct("virtq_desc")
DESC_FMT = _DESC.scalar_struct("addr", "len", "flags", "next")
DESC_SIZE = _DESC.size
_AVAIL, _USED = V.struct("virtq_avail"), V.struct("virtq_used")
AVAIL_IDX, AVAIL_RING = _AVAIL.offset("idx"), _AVAIL.offset("ring")
USED_IDX, USED_RING = _USED.offset("idx"), _USED.offset("ring")
USED_ELEM = V.struct("virtq_used_elem")
USED_ELEM_SIZE = USED_ELEM.size
USED_ELEM_ID, USED_ELEM_LEN = USED_ELEM.offset("id"), USED_ELEM.offset("len")
AVAIL_ELEM_SIZE = _AVAIL.fields["ring"].size // (_AVAIL.fields["ring"].length or 1)
CHAIN_MAX = 16  # harness/fastpath/mmio.h FP_CHAIN_MAX: struct fp_virtq's head, n, nread, addr, len
_CQ_HEAD = struct.Struct("=3I")
_CQ_ADDR, _CQ_LEN = struct.Struct(f"={CHAIN_MAX}Q"), struct.Struct(f"={CHAIN_MAX}I")


@dataclass
class Virtqueue:
    """Driver-visible state of one split virtqueue."""

    num_max: int
    num: int = 0
    ready: bool = False
    desc: int = 0    # physical address of the descriptor table
    driver: int = 0  # ... of the avail ring
    device: int = 0  # ... of the used ring
    used_idx: int = 0    # next used ring slot the device will fill (mod 2**16)
    c: Any = None    # the C bus's struct fp_virtq, which then holds last_avail
    _last_avail: int = 0

    @property
    def last_avail(self) -> int:
        """The next avail ring slot the device will look at (mod 2**16)."""
        return int(self.c.last_avail) if self.c is not None else self._last_avail

    @last_avail.setter
    def last_avail(self, value: int) -> None:
        if self.c is not None:
            self.c.last_avail = value
        else:
            self._last_avail = value

    def reset(self) -> None:
        self.num = 0
        self.ready = False
        self.desc = self.driver = self.device = 0
        self.last_avail = self.used_idx = 0


@dataclass
class Chain:
    """One descriptor chain: the buffers the device reads, then the ones it writes."""

    head: int
    readable: list[tuple[int, int]] = field(default_factory=list)  # (phys addr, length)
    writable: list[tuple[int, int]] = field(default_factory=list)

    @property
    def writable_len(self) -> int:
        return sum(n for _, n in self.writable)


@dataclass
class IrqState:
    """InterruptStatus and the level driven to the PLIC (the Python path's twin of
    `struct fp_virtio`)."""

    isr: int = 0
    line: int = 0


class VirtioMmio(Device):
    """The transport; subclasses implement one device type."""

    device_id = 0
    num_queues = 1
    queue_num_max = 256
    chain_type: type[Chain] = Chain  # what _walk and take_chain make

    def __init__(self, name: str, ctx: DeviceContext) -> None:
        super().__init__(name, ctx)
        self.queues = [Virtqueue(self.queue_num_max) for _ in range(self.num_queues)]
        self.status = 0
        self.device_features_sel = 0
        self.driver_features_sel = 0
        self.driver_features = 0
        self.queue_sel = 0
        self.irqs: Any = IrqState()  # or the C bus's struct fp_virtio (use_c_path)
        self._notifies = 0  # QUEUE_NOTIFY writes Python served (see `notifies`)
        self.completed = 0
        self.resets = 0  # device resets by the driver (a request served later checks it)
        self._cq: Any = None  # the C bus's struct fp_virtq for queue 0 (use_c_path)
        self._cq_view: tuple[memoryview, int, int, int] | None = None

    @property
    def notifies(self) -> int:
        """QUEUE_NOTIFY writes served, by Python or by the C bus."""
        return self._notifies + (int(self._cq.notifies) if self._cq is not None else 0)

    @property
    def interrupt_status(self) -> int:
        return int(self.irqs.isr)

    @interrupt_status.setter
    def interrupt_status(self, value: int) -> None:
        self.irqs.isr = value & 0xFFFF_FFFF

    def use_c_path(self, st: Any) -> None:
        """Keep the interrupt state in `st` (a `struct fp_virtio`, harness/fastpath/mmio.h),
        whose InterruptStatus read and InterruptACK write the C bus serves; with its `vq`,
        the C bus also walks queue 0's chains on QUEUE_NOTIFY (harness/fastpath/virtq.c)
        and hands each to `take_chain`, and that queue's last_avail lives there."""
        st.isr, st.line = self.irqs.isr, self.irqs.line
        st.isr_off, st.ack_off = REG["INTERRUPT_STATUS"], REG["INTERRUPT_ACK"]
        self.irqs = st
        if st.vq:
            from harness import fastpath

            ffi = fastpath.load()[0]  # type: ignore[index]
            q = self.queues[0]
            st.vq.last_avail, st.vq.notify_off = q.last_avail, QUEUE_NOTIFY
            st.vq.f_next, st.vq.f_write = DESC_F_NEXT, DESC_F_WRITE
            q.c = st.vq
            self._cq = st.vq
            # the walked chain read as bytes (struct.unpack: cheaper than cdata fields)
            self._cq_view = (memoryview(ffi.buffer(st.vq)),
                             ffi.offsetof("struct fp_virtq", "head"),
                             ffi.offsetof("struct fp_virtq", "addr"),
                             ffi.offsetof("struct fp_virtq", "len"))
            self._sync_cq()

    def _sync_cq(self) -> None:
        """Tell the C bus whether it may walk queue 0 (DRIVER_OK and QUEUE_READY), and
        where the queue is (it cannot move while ready)."""
        cq = self._cq
        if cq is None:
            return
        q = self.queues[0]
        on = bool(self.status & STATUS_DRIVER_OK and q.ready)
        if on and not cq.enabled:
            cq.desc, cq.avail, cq.num = q.desc, q.driver, q.num
        cq.enabled = on

    def take_chain(self) -> None:
        """A chain of queue 0 the C bus walked (fp_virtq, as _walk would have found it):
        what _notify does with each."""
        view, o_head, o_addr, o_len = self._cq_view  # type: ignore[misc]
        head, n, nread = _CQ_HEAD.unpack_from(view, o_head)
        bufs = list(zip(_CQ_ADDR.unpack_from(view, o_addr)[:n],
                        _CQ_LEN.unpack_from(view, o_len)[:n], strict=True))
        chain = self.chain_type(head)
        chain.readable, chain.writable = bufs[:nread], bufs[nread:]
        written = self.handle(0, chain)
        if written is not None:
            self.complete(0, chain.head, written)

    # ---------------------------------------------------------------- device type hooks
    def device_features(self) -> int:
        """Feature bits this device offers (VIRTIO_F_VERSION_1 is added by the transport)."""
        return 0

    def config_space(self) -> bytes:
        """The device-specific configuration at CONFIG."""
        return b""

    def handle(self, queue: int, chain: Chain) -> int | None:
        """Serve one chain; bytes written, or None if `complete` will be called later."""
        raise NotImplementedError

    def reset_device(self) -> None:
        """Forget device-type state (status was written 0)."""

    # ---------------------------------------------------------------- registers
    def read(self, offset: int, size: int) -> int:
        if offset >= CONFIG:
            return self._config_read(offset, size)
        self.need_size(offset, size, 4)
        q = self._selected()
        if offset == MAGIC_VALUE:
            return V["VIRTIO_MAGIC"]
        if offset == REG["VERSION"]:
            return V["VIRTIO_VERSION"]
        if offset == DEVICE_ID:
            return self.device_id
        if offset == VENDOR_ID:
            return VENDOR
        if offset == REG["DEVICE_FEATURES"]:
            feats = self.device_features() | F_VERSION_1
            return (feats >> (32 * self.device_features_sel)) & 0xFFFF_FFFF \
                if self.device_features_sel < 2 else 0
        if offset == REG["QUEUE_NUM_MAX"]:
            return q.num_max if q else 0
        if offset == REG["QUEUE_READY"]:
            return int(q.ready) if q else 0
        if offset == REG["INTERRUPT_STATUS"]:
            return self.interrupt_status
        if offset == REG["STATUS"]:
            return self.status
        if offset == REG["CONFIG_GENERATION"]:
            return 0
        if offset in REG.values():
            raise self.error(offset, size, f"{_name(offset)} is write-only")
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == QUEUE_NOTIFY and size == 4:  # the hot one first: a request's hand-off
            self._notify(value, offset, size)
            return
        if offset >= CONFIG:
            raise self.error(offset, size, "the configuration space is read-only")
        self.need_size(offset, size, 4)
        value &= 0xFFFF_FFFF
        if offset == REG["DEVICE_FEATURES_SEL"]:
            self.device_features_sel = value
        elif offset == REG["DRIVER_FEATURES_SEL"]:
            self.driver_features_sel = value
        elif offset == REG["DRIVER_FEATURES"]:
            if self.driver_features_sel < 2:
                shift = 32 * self.driver_features_sel
                keep = self.driver_features & ~(0xFFFF_FFFF << shift)
                self.driver_features = keep | (value << shift)
        elif offset == REG["QUEUE_SEL"]:
            self.queue_sel = value
        elif offset == REG["STATUS"]:
            self._write_status(value)
            self._sync_cq()
        elif offset == REG["INTERRUPT_ACK"]:
            self.interrupt_status &= ~value
            self._update_irq()
        elif offset == REG["QUEUE_NOTIFY"]:
            self._notify(value, offset, size)
        elif offset in _QUEUE_REGS:
            self._write_queue(offset, size, value)
            self._sync_cq()
        elif offset in REG.values():
            raise self.error(offset, size, f"{_name(offset)} is read-only")
        else:
            super().write(offset, size, value)

    def _selected(self) -> Virtqueue | None:
        return self.queues[self.queue_sel] if self.queue_sel < len(self.queues) else None

    def _write_status(self, value: int) -> None:
        if value == 0:
            self._reset()
            return
        new = value & ~self.status
        if new & STATUS_FEATURES_OK:
            offered = self.device_features() | F_VERSION_1
            if self.driver_features & ~offered:
                value &= ~STATUS_FEATURES_OK  # refuse: the driver must read STATUS back
        self.status = value

    def _reset(self) -> None:
        self.resets += 1
        self.status = 0
        self.driver_features = 0
        self.device_features_sel = self.driver_features_sel = self.queue_sel = 0
        for q in self.queues:
            q.reset()
        self.interrupt_status = 0
        self.reset_device()
        self._update_irq()

    def _write_queue(self, offset: int, size: int, value: int) -> None:
        q = self._selected()
        if q is None:
            raise self.error(offset, size, f"queue {self.queue_sel} does not exist "
                             f"(the device has {len(self.queues)})")
        if offset == REG["QUEUE_READY"]:
            if value & 1:
                self._check_queue(q, offset, size)
            else:
                q.reset()
            q.ready = bool(value & 1)
            return
        if q.ready:
            raise self.error(offset, size, f"{_name(offset)} written while queue "
                             f"{self.queue_sel} is ready")
        if offset == REG["QUEUE_NUM"]:
            q.num = value
            return
        attr, high = _QUEUE_REGS[offset]
        old = getattr(q, attr)
        if high:
            setattr(q, attr, (old & 0xFFFF_FFFF) | (value << 32))
        else:
            setattr(q, attr, (old & ~0xFFFF_FFFF) | value)

    def _check_queue(self, q: Virtqueue, offset: int, size: int) -> None:
        n = q.num
        if not (0 < n <= q.num_max and n & (n - 1) == 0):
            raise self.error(offset, size, f"queue size {n} must be a power of two "
                             f"in 1..{q.num_max}")
        areas = (("descriptor table", q.desc, DESC_SIZE * n, 16),
                 ("avail ring", q.driver, AVAIL_RING + AVAIL_ELEM_SIZE * n + 2, 2),
                 ("used ring", q.device, USED_RING + USED_ELEM_SIZE * n + 2, 4))
        for what, addr, length, align in areas:
            if addr % align:
                raise self.error(offset, size, f"{what} at {addr:#x} is not {align}-byte aligned")
            if not self.ctx.ram.contains(addr, length):
                raise self.error(offset, size, f"{what} [{addr:#x}, +{length:#x}) is not in RAM")

    # ---------------------------------------------------------------- queue processing
    def _notify(self, qi: int, offset: int, size: int) -> None:
        self._notifies += 1
        if qi >= len(self.queues):
            raise self.error(offset, size, f"notify of queue {qi}, which does not exist")
        q = self.queues[qi]
        if not (self.status & STATUS_DRIVER_OK and q.ready):
            raise self.error(offset, size, f"notify of queue {qi} before DRIVER_OK and "
                             f"QUEUE_READY (status {self.status:#x})")
        ram = self.ctx.ram
        avail_idx = ram.u16(q.driver + AVAIL_IDX)
        if (avail_idx - q.last_avail) & 0xFFFF > q.num:
            raise self.error(offset, size, f"queue {qi}: avail idx {avail_idx} is more than "
                             f"{q.num} ahead of the device ({q.last_avail})")
        while q.last_avail != avail_idx:
            slot = q.last_avail % q.num
            head = ram.u16(q.driver + AVAIL_RING + AVAIL_ELEM_SIZE * slot)
            chain = self._walk(qi, q, head, offset, size)
            q.last_avail = (q.last_avail + 1) & 0xFFFF
            written = self.handle(qi, chain)
            if written is not None:
                self.complete(qi, head, written)

    def _walk(self, qi: int, q: Virtqueue, head: int, offset: int, size: int) -> Chain:
        chain = Chain(head)
        ram = self.ctx.ram
        idx = head
        for _ in range(q.num):
            if idx >= q.num:
                raise self.error(offset, size, f"queue {qi}: descriptor index {idx} >= "
                                 f"queue size {q.num}")
            addr, length, flags, nxt = DESC_FMT.unpack_from(
                ram.slice(q.desc + DESC_SIZE * idx, DESC_SIZE))
            if flags & ~(DESC_F_NEXT | DESC_F_WRITE):
                raise self.error(offset, size, f"queue {qi}: descriptor {idx} has flags "
                                 f"{flags:#x}; only NEXT and WRITE are supported")
            if not ram.contains(addr, length):
                raise self.error(offset, size, f"queue {qi}: descriptor {idx} buffer "
                                 f"[{addr:#x}, +{length:#x}) is not in RAM")
            if flags & DESC_F_WRITE:
                chain.writable.append((addr, length))
            elif chain.writable:
                raise self.error(offset, size, f"queue {qi}: descriptor {idx} is "
                                 "device-readable but follows a device-writable one")
            else:
                chain.readable.append((addr, length))
            if not flags & DESC_F_NEXT:
                return chain
            idx = nxt
        raise self.error(offset, size, f"queue {qi}: descriptor chain from {head} is "
                         f"longer than the queue ({q.num}): a loop?")

    def complete(self, queue: int, head: int, written: int) -> None:
        """Put a finished chain on the used ring and interrupt (emulation thread only)."""
        q = self.queues[queue]
        if not q.ready:
            return  # the driver reset the queue while the request was in flight
        ram = self.ctx.ram
        elem = q.device + USED_RING + USED_ELEM_SIZE * (q.used_idx % q.num)
        ram.set_u32(elem + USED_ELEM_ID, head)
        ram.set_u32(elem + USED_ELEM_LEN, written)
        q.used_idx = (q.used_idx + 1) & 0xFFFF
        ram.set_u16(q.device + USED_IDX, q.used_idx)  # after the element, as the spec orders
        self.completed += 1
        self.interrupt_status |= INT_USED_RING
        self._update_irq()

    def _update_irq(self) -> None:
        line = int(self.irqs.isr != 0)
        if line != self.irqs.line:
            self.irqs.line = line
            self.ctx.irq(bool(line))

    # ---------------------------------------------------------------- buffers
    def gather(self, bufs: list[tuple[int, int]]) -> bytes:
        """The bytes of device-readable buffers, concatenated."""
        ram = self.ctx.ram
        return b"".join(ram.read(a, n) for a, n in bufs)

    def scatter(self, bufs: list[tuple[int, int]], data: bytes | memoryview) -> int:
        """Copy data into device-writable buffers in order; bytes copied."""
        ram, pos = self.ctx.ram, 0
        for a, n in bufs:
            if pos >= len(data):
                break
            chunk = data[pos : pos + n]
            ram.write(a, chunk)
            pos += len(chunk)
        return pos

    def _config_read(self, offset: int, size: int) -> int:
        cfg = self.config_space()
        rel = offset - CONFIG
        if size not in (1, 2, 4) or rel + size > len(cfg):
            raise self.error(offset, size, f"outside the {len(cfg)}-byte configuration space")
        return int.from_bytes(cfg[rel : rel + size], "little")


_QUEUE_REGS: dict[int, tuple[str, bool]] = {
    REG["QUEUE_NUM"]: ("num", False),
    REG["QUEUE_READY"]: ("ready", False),
    REG["QUEUE_DESC_LOW"]: ("desc", False), REG["QUEUE_DESC_HIGH"]: ("desc", True),
    REG["DRIVER_DESC_LOW"]: ("driver", False), REG["DRIVER_DESC_HIGH"]: ("driver", True),
    REG["DEVICE_DESC_LOW"]: ("device", False), REG["DEVICE_DESC_HIGH"]: ("device", True),
}


def _name(offset: int) -> str:
    for k, v in REG.items():
        if v == offset:
            return k
    return f"register {offset:#x}"
