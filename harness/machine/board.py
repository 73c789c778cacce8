"""The machine: 1..MAXCPU rv64 harts under Unicorn, RAM, devices, and the run loop.

The memory map is the table MEMORY_MAP below; base addresses and interrupt numbers are
names from kernel_c/memlayout.h. The harness is the firmware: it loads the kernel ELF,
writes struct bootinfo, and starts hart 0 in S-mode at the ELF entry with a0 = 0
(hartid), a1 = BOOTINFO, satp = 0, mideleg = 0x222 (S software/timer/external
interrupts go natively to the guest's stvec) and mstatus.FS = 0. There is no M-mode code.
The other harts are parked until the kernel starts them (HART_START, devices/hartctl.py).
Each hart is its own Unicorn instance over the one RAM mapping (harness/machine/cpus.py).

The run loop is harness/machine/runloop.py (a deterministic machine's slices:
detloop.py); what harts and devices signal to it, harness/machine/events.py.

Synchronous traps are delivered inside Unicorn's hooks (harness/machine/traps.py), interrupts are
native: the devices raise STIP/SEIP in mip and the guest takes them through stvec.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

from unicorn import UC_ARCH_RISCV, UC_HOOK_CODE, UC_MODE_RISCV64, UC_PROT_READ, Uc
from unicorn import riscv_const as R

from harness.abi import bootinfo
from harness.cpu.clock import DetClock, HostClock, IcountClock
from harness.cpu.physmem import PhysMem
from harness.cpu.registers import PRIV_S, REG_A0, REG_A1, REG_PC, REG_PRIV, S_INTERRUPTS, Hart
from harness.det.journal import Journal
from harness.det.mode import Deterministic
from harness.det.timeline import HostTimeline
from harness.devices.base import Device, DeviceContext
from harness.devices.clint import Clint
from harness.devices.hartctl import HartCtl
from harness.devices.plic import Plic
from harness.devices.power import Power
from harness.devices.sswi import Sswi
from harness.devices.uart import Uart16550
from harness.devices.virtio_blk import DiskHistory, VirtioBlk
from harness.guest.elf import ElfImage
from harness.machine.bus import MmioBus
from harness.machine.bus_c import CBus, CMmio
from harness.machine.config import (
    ATOMICS_SURVIVE_REPEAT,
    CONSOLE_TAIL,
    MEMORY_MAP,
    ML,
    Exit,
    MachineConfig,
    RunResult,
    Stats,
)
from harness.machine.cpus import FENCE_I, PAUSE, CodeLog, Cpu, scan_atomic_writes, scan_words
from harness.machine.detloop import DetLoop
from harness.machine.events import HartEvents
from harness.machine.runloop import RunLoop
from harness.machine.timetravel import TimeTravel
from harness.machine.traps import Traps
from harness.machine.traps_c import make_traps, new_counts, trap_path
from harness.machine.waker import Waker
from harness.machine.watchdog import HangWatch


class Machine(HartEvents, RunLoop, DetLoop):
    """One rv64 machine; build it, `run()` it once, then `close()` it. Its run loop is in
    harness/machine/runloop.py (deterministic slices: detloop.py), what harts and devices
    signal in events.py."""

    def __init__(self, config: MachineConfig) -> None:
        self.config = config
        if config.clock not in ("host", "icount"):
            raise ValueError(f"unknown clock '{config.clock}' (host or icount)")
        if not 1 <= config.cpus <= bootinfo.MAXCPU:
            raise ValueError(f"--cpus must be 1..{bootinfo.MAXCPU}, not {config.cpus}")
        self.kernel = ElfImage.load(config.kernel)
        self._make_clock()
        self._make_harts()
        self._init_run_state()
        try:
            self._build_devices()
            self._load_kernel()
        except BaseException:
            self.close()  # no waker thread or open disk file left behind
            raise
        for c in self.cpus:
            self._reset_cpu(c)
        self._start_hart(0, self.kernel.entry)
        self._init_time_travel()

    def _make_clock(self) -> None:
        """The clock, and in deterministic mode the schedule's state (harness/det/)."""
        config = self.config
        self.det: Deterministic | None = None
        if config.schedule is not None:
            self.det = Deterministic(config.schedule, config.cpus, config.journal or Journal())
            counter = self.det.counter
            self.clock: HostClock | IcountClock = DetClock(lambda: counter.total)
            self.det.timeline.now = lambda: self.clock.insns
        else:
            self.clock = HostClock() if config.clock == "host" else IcountClock()

    def _make_harts(self) -> None:
        """One Unicorn instance per hart over the one RAM mapping, with its traps and bus."""
        config = self.config
        self.cpus: list[Cpu] = []
        self.cur = 0  # the hart that runs now, or last ran (the debugger's selection)
        self.trap_path = trap_path(config.traps)  # harness/machine/traps_c.py
        counts = new_counts(self.trap_path)
        for i in range(config.cpus):
            uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
            if self.det is not None:  # the counter's hook is every hart's first code hook
                self.det.counter.attach(uc, i)
            hart = Hart(uc)
            if i == 0:
                self.ram = PhysMem(uc, hart, ML["KERNBASE"], config.ram_size,
                                   cow=config.time_travel)
            else:
                self.ram.attach(uc, hart)
            self.cpus.append(Cpu(i, uc, hart,
                                 make_traps(self.trap_path, uc, hart, self.clock, counts),
                                 MmioBus(uc, hart)))
        self.c_mmio: CMmio | None = None  # the C bus (harness/machine/bus_c.py)

    def _init_run_state(self) -> None:
        """What the run loop keeps between slices (harness/machine/runloop.py, detloop.py)."""
        config = self.config
        self._run_uc = self.cpus[0].uc
        self._others = False  # at the start of this run, another hart could run
        self.only: int | None = None  # a debugger runs only this hart (gdb's vCont;c:N)
        self._in_run = False  # emu_start is running (on this thread)
        self._kicked = False  # _kick stopped this run
        self._hurry_at = 0  # host ns after which the running slice ends at a trap (_hurry)
        self._slice_end: int | None = None  # host ns at which this hart's slice ends
        self._atomics: frozenset[int] = frozenset()  # hooked AMO/SC addresses
        self._atomic_since = 0  # host ns: the running hart is in an AMO/SC window since then
        self._stop_wanted = False  # an outside stop waits for the window's end
        self.waker = Waker(self._outside_stop)
        self.stats = Stats()
        self.result: RunResult | None = None
        self.console_tail = bytearray()
        self.console_hash = hashlib.blake2b(digest_size=16)  # every byte (a recording's end)
        self.console_bytes = 0  # bytes of console output so far
        self.console_shown = 0  # ... and the most ever shown (time travel repeats the past)
        self._out = bytearray()
        self._sink = config.output or _stdout_sink
        self._timeout_at: int | None = None
        self._pause: RunResult | None = None  # set by pause(): run()/step() return it
        self._stopped_before = False  # a code hook stopped the run before an instruction
        self._yielded = False  # the last run ended in a spin loop's pause
        self._det_budget = 0  # deterministic mode: the slice the policy allowed
        self._det_resume: tuple[int, int] | None = None  # (hart, budget left) of a slice
        # the data-race watch (harness/race/kcsan.py) when on: takes the counter's samples
        # and keeps a held hart out of the schedule's choices
        self.race_watch: Any = None
        self.det_observers: list[Any] = []  # checkers whose state() snapshots keep too
        #                                                  a debugger's stop cut short
        self._det_goal: tuple[int | None, int | None, int | None] = (None, None, None)
        self._inbox: list[bytes] = []  # deterministic mode: console input not taken yet
        self._det_posted: list[Callable[[], None]] = []  # ... and the devices' own posts
        self._inbox_lock = threading.Lock()
        self._output_hooks: list[Callable[[bytes], None]] = []
        self.devices: dict[str, Device] = {}
        self.boot_mtime = 0  # bootinfo.boot_mtime, set when the kernel is loaded
        self.hang: HangWatch | None = (HangWatch(self, config.hang_timeout)
                                       if config.hang_timeout else None)

    def _init_time_travel(self) -> None:
        """Checkpoints for going back (harness/machine/timetravel.py), if asked for."""
        config = self.config
        self.travel: TimeTravel | None = None
        if config.time_travel:
            if self.det is None:
                raise ValueError("time travel needs a deterministic machine (a schedule)")
            if config.persist:
                raise ValueError("time travel cannot go back over disk writes that went to "
                                 "the image file (--persist)")
            self.disk.history = DiskHistory()
            self.travel = TimeTravel(self)

    # ---------------------------------------------------------------- the current hart
    @property
    def cpu(self) -> Cpu:
        """The hart that runs now (or last ran, or the debugger selected)."""
        return self.cpus[self.cur]

    @property
    def uc(self) -> Uc:
        return self.cpus[self.cur].uc

    @property
    def hart(self) -> Hart:
        return self.cpus[self.cur].hart

    @property
    def traps(self) -> Traps:
        return self.cpus[self.cur].traps

    @property
    def bus(self) -> MmioBus:
        return self.cpus[self.cur].bus

    @property
    def _pc(self) -> int:
        return self.cpus[self.cur].pc

    @_pc.setter
    def _pc(self, pc: int) -> None:
        self.cpus[self.cur].pc = pc

    # ---------------------------------------------------------------- construction
    def _build_devices(self) -> None:
        n = self.config.cpus
        self.plic = Plic("plic", self._context(None), seip=self._set_seip, nharts=n)
        if self.trap_path == "c":  # the C bus with the devices' hot registers
            nm = self.c_mmio = CMmio([c.uc for c in self.cpus], self.plic)
            for c in self.cpus:
                c.bus = CBus(c.uc, c.hart, nm)
        for name, base_name, cls, irq_name in MEMORY_MAP:
            irq = ML[irq_name] if irq_name else None
            if cls is Plic:
                dev: Device = self.plic
            else:
                dev = cls(name, self._context(irq), **self._device_options(cls))
            self._add_device(name, ML[base_name], dev, irq)
        for name, base_name, factory, irq_name in self.config.extra_devices:
            irq = ML[irq_name] if irq_name else None
            self._add_device(name, ML[base_name], factory(name, self._context(irq)), irq)
        self.clint: Clint = self.devices["clint"]  # type: ignore[assignment]
        if self.c_mmio is not None and self.c_mmio.clint is not None:
            self.waker.on_armed = self.c_mmio.arm  # the C CLINT's mtimecmp stores
        self.uart: Uart16550 = self.devices["uart0"]  # type: ignore[assignment]
        self.disk: VirtioBlk = self.devices["virtio0"]  # type: ignore[assignment]

    def _add_device(self, name: str, base: int, dev: Device, irq: int | None) -> None:
        if self.c_mmio is not None:
            self.c_mmio.adopt(dev, irq)
        self.devices[name] = dev
        self._map(base, dev)

    def _map(self, base: int, dev: Device) -> None:
        for c in self.cpus:  # every hart sees every device
            c.bus.map(base, dev)

    def _context(self, irq: int | None) -> DeviceContext:
        line = self.plic.line_for(irq) if irq is not None else (lambda level: None)
        timeline = self.det.timeline if self.det is not None else HostTimeline(self.post)
        post = self._det_post if self.det is not None else self.post
        return DeviceContext(irq=line, post=post, ram=self.ram, clock=self.clock,
                             boot_mtime=lambda: self.boot_mtime, timeline=timeline,
                             det=self.det)

    def _device_options(self, cls: type[Device]) -> dict[str, object]:
        if cls is Power:
            return {"on_power": self._on_power}
        n = self.config.cpus
        if cls is Clint:
            return {"clock": self.clock, "stip": self._set_stip, "on_deadline": self._on_deadline,
                    "nharts": n}
        if cls is Sswi:
            return {"ssip": self._ipi, "nharts": n}
        if cls is HartCtl:
            return {"start": self._start_hart, "started": lambda h: self.cpus[h].started,
                    "nharts": n}
        if cls is Uart16550:
            return {"tx": self._tx}
        if cls is VirtioBlk:
            return {"image": self.config.fs, "persist": self.config.persist,
                    "data": self.config.disk_data, "journal": self.config.disk_journal}
        return {}

    def _load_kernel(self) -> None:
        for seg in self.kernel.segments:
            if not self.ram.contains(seg.paddr, seg.memsz):
                raise ValueError(f"{self.kernel.path}: segment [{seg.paddr:#x}, "
                                 f"+{seg.memsz:#x}) does not fit in RAM "
                                 f"[{self.ram.base:#x}, +{self.ram.size:#x})")
            off = seg.paddr - self.ram.base
            self.ram.view[off : off + len(seg.data)] = seg.data
        icount = isinstance(self.clock, IcountClock)
        flags = self.config.flags | (bootinfo.F_ICOUNT if icount else 0)
        self.boot_mtime = self.clock.mtime()  # the guest's time_us() counts from here
        info = bootinfo.pack(ram_base=self.ram.base, ram_size=self.ram.size,
                             timebase_hz=self.clock.hz, boot_mtime=self.boot_mtime,
                             flags=flags, cmd=self.config.cmd, ncpu=self.config.cpus)
        # user pages all lie above the kernel image: a hart's fence.i drops their
        # translations, or only the logged ones (harness/machine/cpus.py, CodeLog)
        kend = -(-max(s.paddr + s.memsz for s in self.kernel.segments) // 0x1000) * 0x1000
        ram_end = self.ram.base + self.ram.size
        fences = [s.vaddr + off for s in self.kernel.segments if "X" in s.flags
                  for off in scan_words(s.data, FENCE_I)]
        pauses = [s.vaddr + off for s in self.kernel.segments if "X" in s.flags
                  for off in scan_words(s.data, PAUSE)]
        if self.config.clock == "host" and not self._declares(ATOMICS_SURVIVE_REPEAT):
            self._atomics = frozenset(s.vaddr + off for s in self.kernel.segments
                                      if "X" in s.flags for off in scan_atomic_writes(s.data))
        edges = sorted(self._atomics | {a + 4 for a in self._atomics})
        for c in self.cpus:
            c.uc.mem_map(ML["BOOTINFO"], 0x1000, UC_PROT_READ)
            c.uc.mem_write(ML["BOOTINFO"], info)
            for a in fences:
                c.uc.hook_add(UC_HOOK_CODE, self._on_fence_i, c, a, a)
            c.traps.after_trap = self._after_trap
            for a in edges:
                c.uc.hook_add(UC_HOOK_CODE, self._on_atomic_edge, c, a, a)
            if self.config.cpus > 1:
                for a in pauses:
                    c.uc.hook_add(UC_HOOK_CODE, self._on_pause, c, a, a)
            if self.det is not None and self.det.spec.kind != "rr" and self.config.cpus > 1:
                for a in self._switch_points():
                    self.det.counter.add_point(c.id, a)
        if self.det is not None:  # blocks of kernel code, sret, device windows (det/counter.py)
            self.det.counter.setup(self.ram, self.kernel,
                                   [(base, dev.size) for base, dev in self.bus.windows])
        self._user_code = (kend, ram_end - kend)
        try:
            self._codelog: CodeLog | None = CodeLog(self.ram, self.kernel.symbol("codelog"))
        except KeyError:
            self._codelog = None

    def _switch_points(self) -> list[int]:
        """Where a random or PCT schedule may switch harts besides a slice's end: the
        kernel's lock entry points and its AMO/SC instructions (harness/det/schedule.py)."""
        points = [s.vaddr + off for s in self.kernel.segments if "X" in s.flags
                  for off in scan_atomic_writes(s.data)]
        for name in ("acquire", "release"):
            try:
                points.append(self.kernel.symbol(name))
            except KeyError:
                pass
        return sorted(set(points))[:64]

    def _reset_cpu(self, c: Cpu) -> None:
        h = c.hart  # the hart resets in M-mode, so CSRs can be written directly
        h.set(R.UC_RISCV_REG_MIDELEG, S_INTERRUPTS)
        h.set(R.UC_RISCV_REG_MEDELEG, 0xB1FF)  # documentation only: Unicorn never uses it
        h.set(R.UC_RISCV_REG_MSTATUS, 0)       # FS = 0: no floating point
        h.set(R.UC_RISCV_REG_SATP, 0)
        h.set(REG_A0, c.id)
        h.set(REG_A1, ML["BOOTINFO"])

    def _start_hart(self, i: int, pc: int) -> None:
        """Hart i leaves reset (hart 0) or its parking (HART_START): S-mode at pc."""
        c = self.cpus[i]
        c.hart.set(REG_PRIV, PRIV_S)
        c.hart.set(REG_PC, pc)
        c.pc, c.started, c.idle = pc, True, False
        if i != self.cur:
            self._kick()

    def _declares(self, name: str) -> bool:
        try:
            self.kernel.symbol(name)
        except KeyError:
            return False
        return True

    # ---------------------------------------------------------------- any thread
    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the emulation thread between slices (thread-safe; wakes the guest)."""
        self.waker.post(fn)

    def send_input(self, data: bytes) -> None:
        """Console input from any thread (deterministic mode: recorded at the guest time
        it is taken; a replay takes its input from the recording only)."""
        if self.det is None:
            self.post(lambda: self.uart.receive(data))
        elif not self.det.replaying:
            with self._inbox_lock:
                self._inbox.append(data)
            self.post(lambda: None)  # wakes an idle machine; the loop takes the inbox

    def request_quit(self, message: str = "stopped by the user") -> None:
        """End the run (any thread)."""
        self.post(lambda: self._finish(RunResult(Exit.QUIT, message=message)))

    def _tx(self, byte: int) -> None:
        self._out += self.uart.take_tx()  # the C bus's bytes came first
        self._out.append(byte)
        if len(self._out) >= 4096:
            self._flush_output()

    def add_output_hook(self, fn: Callable[[bytes], None]) -> None:
        """Also call fn(chunk) with console output (emulation thread; for benchmarks)."""
        self._output_hooks.append(fn)

    def _flush_output(self) -> None:
        self._out += self.uart.take_tx()
        if not self._out:
            return
        data = bytes(self._out)
        self._out.clear()
        self.console_bytes += len(data)
        self.console_tail += data
        self.console_hash.update(data)
        if len(self.console_tail) > CONSOLE_TAIL:
            del self.console_tail[: len(self.console_tail) - CONSOLE_TAIL]
        new = self.console_bytes - self.console_shown
        if new <= 0:
            return  # time travel runs the past again: its output was shown the first time
        data = data[-new:]
        self.console_shown = self.console_bytes
        self._sink(data)
        for fn in self._output_hooks:
            fn(data)

    def panic_message(self) -> str:
        """The last "panic: ..." line the guest printed, or ""."""
        text = self.console_tail.decode(errors="replace")
        i = text.rfind("panic: ")
        return text[i:].split("\n", 1)[0].strip() if i >= 0 else ""

    # ---------------------------------------------------------------- teardown, info
    def close(self) -> None:
        self.waker.close()
        for dev in self.devices.values():
            dev.close()

    def banner(self) -> str:
        devs = ", ".join(d.describe() for d in self.devices.values())
        clock = "icount" if isinstance(self.clock, IcountClock) else "host"
        return (f"nexai rv64 machine: {self.config.cpus} hart"
                f"{'s' if self.config.cpus > 1 else ''}, {self.ram.size >> 20} MiB RAM; {devs}; "
                f"clock {clock}; kernel {self.config.kernel}")


def _stdout_sink(data: bytes) -> None:
    import sys

    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()

