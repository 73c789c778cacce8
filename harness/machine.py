"""The machine: 1..MAXCPU rv64 harts under Unicorn, RAM, devices, and the run loop.

The memory map is the table MEMORY_MAP below; base addresses and interrupt numbers are
names from kernel_c/memlayout.h. The harness is the firmware: it loads the kernel ELF,
writes struct bootinfo, and starts hart 0 in S-mode at the ELF entry with a0 = 0
(hartid), a1 = BOOTINFO, satp = 0, mideleg = 0x222 (S software/timer/external
interrupts go natively to the guest's stvec) and mstatus.FS = 0. There is no M-mode code.
The other harts are parked until the kernel starts them (HART_START, devices/hartctl.py).
Each hart is its own Unicorn instance over the one RAM mapping (harness/harts.py).

The run loop (`Machine.run`):

    process posted events (console input, device completions) on this thread
    re-evaluate the timers (STIP) and the wall-clock timeout
    pick the next hart that can run, round-robin (not in wfi, or an interrupt pending)
    if there is none: sleep until the next timer deadline or event (no host CPU is used)
    else: emu_start(pc, count=0) on that hart until the waker thread stops it at the
        next deadline, event or the end of its slice (QUANTUM_S, only while another hart
        could run), or it executes wfi, or a device/trap ends the run

`--clock icount` uses counted slices instead (deterministic time, see harness/clock.py).

A debugger (harness/debug/) drives the same loop: its hooks call `pause()`, which stops
the guest before the hooked instruction and makes `run()` return Exit.PAUSE; `run()` and
`step()` (one instruction) then go on from wherever the PC is.

Synchronous traps are delivered inside Unicorn's hooks (harness/traps.py), interrupts are
native: the devices raise STIP/SEIP in mip and the guest takes them through stvec.
"""

from __future__ import annotations

import enum
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicorn import (
    UC_ARCH_RISCV,
    UC_ERR_EXCEPTION,
    UC_HOOK_CODE,
    UC_MODE_RISCV64,
    UC_PROT_EXEC,
    UC_PROT_READ,
    Uc,
    UcError,
)
from unicorn import riscv_const as R

from harness import bootinfo, cheader
from harness.clock import INSNS_PER_TICK, NEVER, DetClock, HostClock, IcountClock
from harness.detmachine import Deterministic
from harness.devices.base import Device, DeviceContext, MachineFault
from harness.devices.clint import Clint
from harness.devices.hartctl import HartCtl
from harness.devices.plic import Plic
from harness.devices.power import Power, PowerCmd
from harness.devices.sswi import Sswi
from harness.devices.uart import Uart16550
from harness.devices.virtio_blk import DiskHistory, VirtioBlk
from harness.elf import ElfImage
from harness.hang import HangWatch
from harness.hart import (
    PRIV_S,
    PRIV_U,
    REG_A0,
    REG_A1,
    REG_PC,
    REG_PRIV,
    S_INTERRUPTS,
    SEIP,
    SSIP,
    STIP,
    Hart,
    emu_stop_holding_gil,
)
from harness.harts import (
    FENCE_I,
    PAUSE,
    CodeLog,
    Cpu,
    complete_store,
    scan_atomic_writes,
    scan_words,
)
from harness.journal import Journal
from harness.mmio import MmioBus
from harness.mmio_native import NativeBus, NativeMmio
from harness.physmem import PhysMem
from harness.sched_native import LIMIT, POINT, SAMPLE
from harness.schedule import ScheduleSpec
from harness.timeline import HostTimeline
from harness.timetravel import TimeTravel
from harness.traps import Traps
from harness.traps_native import make_traps, new_counts, trap_path
from harness.waker import Waker

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
    HANG = "hang"            # no guest progress for --hang-timeout seconds (harness/hang.py)
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
    # deterministic mode (harness/detmachine.py): a seeded schedule, and the journal it
    # records into or replays from (a new one if None)
    schedule: ScheduleSpec | None = None
    journal: Journal | None = None
    time_travel: bool = False      # checkpoints for going back (harness/timetravel.py)
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


class Machine:
    """One rv64 machine; build it, `run()` it once, then `close()` it."""

    def __init__(self, config: MachineConfig) -> None:
        self.config = config
        if config.clock not in ("host", "icount"):
            raise ValueError(f"unknown clock '{config.clock}' (host or icount)")
        if not 1 <= config.cpus <= bootinfo.MAXCPU:
            raise ValueError(f"--cpus must be 1..{bootinfo.MAXCPU}, not {config.cpus}")
        self.kernel = ElfImage.load(config.kernel)
        self.det: Deterministic | None = None
        if config.schedule is not None:
            self.det = Deterministic(config.schedule, config.cpus, config.journal or Journal())
            counter = self.det.counter
            self.clock: HostClock | IcountClock = DetClock(lambda: counter.total)
            self.det.timeline.now = lambda: self.clock.insns
        else:
            self.clock = HostClock() if config.clock == "host" else IcountClock()
        self.cpus: list[Cpu] = []
        self.cur = 0  # the hart that runs now, or last ran (the debugger's selection)
        self.trap_path = trap_path(config.traps)  # harness/traps_native.py
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
        self.native_mmio: NativeMmio | None = None  # the C bus (harness/mmio_native.py)
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
        try:
            self._build_devices()
            self._load_kernel()
        except BaseException:
            self.close()  # no waker thread or open disk file left behind
            raise
        for c in self.cpus:
            self._reset_cpu(c)
        self._start_hart(0, self.kernel.entry)
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
            nm = self.native_mmio = NativeMmio([c.uc for c in self.cpus], self.plic)
            for c in self.cpus:
                c.bus = NativeBus(c.uc, c.hart, nm)
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
        if self.native_mmio is not None and self.native_mmio.clint is not None:
            self.waker.on_armed = self.native_mmio.arm  # the C CLINT's mtimecmp stores
        self.uart: Uart16550 = self.devices["uart0"]  # type: ignore[assignment]
        self.disk: VirtioBlk = self.devices["virtio0"]  # type: ignore[assignment]

    def _add_device(self, name: str, base: int, dev: Device, irq: int | None) -> None:
        if self.native_mmio is not None:
            self.native_mmio.adopt(dev, irq)
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
        # translations, or only the logged ones (harness/harts.py, CodeLog)
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
        if self.det is not None:  # blocks of kernel code, sret, device windows (sched_native)
            self.det.counter.setup(self.ram, self.kernel,
                                   [(base, dev.size) for base, dev in self.bus.windows])
        self._user_code = (kend, ram_end - kend)
        try:
            self._codelog: CodeLog | None = CodeLog(self.ram, self.kernel.symbol("codelog"))
        except KeyError:
            self._codelog = None

    def _switch_points(self) -> list[int]:
        """Where a random or PCT schedule may switch harts besides a slice's end: the
        kernel's lock entry points and its AMO/SC instructions (harness/schedule.py)."""
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

    def _on_fence_i(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """A hart executes the kernel's fence.i: drop its translations of the user pages
        that may hold other code since its last one (harness/harts.py)."""
        c.fence_i += 1
        pages = None
        if self._codelog is not None:
            c.codeseq, pages = self._codelog.since(c.codeseq)
        if pages is None:
            self.ram.forget_code(*self._user_code, hart=c.id)
        elif pages:
            self.ram.forget_pages([(pa, 0x1000) for pa in pages], hart=c.id)

    def _declares(self, name: str) -> bool:
        try:
            self.kernel.symbol(name)
        except KeyError:
            return False
        return True

    def _on_atomic_edge(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """Before an AMO/SC of the image, and before the instruction after it.

        A stop from the waker thread lands after any load or store, and one that lands
        after an AMO's or SC's store leaves the PC on it: Unicorn runs it again, which
        adds twice (amoadd) or reports a stored SC as failed (a CAS loop then applies its
        change twice). Nothing visible tells the two apart afterwards (docs/ARCHITECTURE.md,
        "Harts"), so such stops must not land there: the waker calls emu_stop holding
        the GIL (`_outside_stop`), this hook runs holding it too, and between this hook
        before the AMO and the one after it the waker only leaves a request, which the
        second hook carries out. The instruction clock never stops from outside."""
        if self._atomic_since:
            self._atomic_since = 0
            if self._stop_wanted:
                self._stop_wanted = False
                uc.emu_stop()  # before the instruction at addr: nothing to repeat
                return
        if addr in self._atomics:
            self._atomic_since = time.monotonic_ns()
            c.traps.watch(True)  # a faulting AMO ends the window in _after_trap

    def _outside_stop(self) -> None:
        """End the running slice (the waker thread). The GIL is held from the test to the
        stop, so no atomic-edge hook runs in between."""
        since = self._atomic_since
        if since and time.monotonic_ns() - since < ATOMIC_WINDOW_MAX_NS:
            self._stop_wanted = True  # _on_atomic_edge or _after_trap stops it
            return
        emu_stop_holding_gil(self._run_uc)

    def _on_pause(self, uc: Uc, addr: int, size: int, c: Cpu) -> None:
        """A hart spins (pause in the kernel's lock loops): give the slice to another."""
        if self.det is not None:
            self._det_on_pause(uc, addr, c)
            return
        if addr == c.start_pc and not c.paused_once:
            c.paused_once = True  # resumed right here: spin at least once more
            return
        if self.only is None and (self._others
                                  or any(o.can_run() for o in self.cpus if o is not c)):
            c.yields += 1
            self._stopped_before = True
            self._yielded = True
            uc.emu_stop()

    def _det_on_pause(self, uc: Uc, addr: int, c: Cpu) -> None:
        """_on_pause in deterministic mode: a hart that yielded here spins once more when
        it comes back (by its own count, so a breakpoint's stop here changes nothing)."""
        assert self.det is not None
        here = (addr, self.det.counter.count(c.id))
        if c.yield_at == here:
            return
        if any(o.can_run() for o in self.cpus if o is not c):
            c.yields += 1
            c.yield_at = here
            self._stopped_before = True
            self._yielded = True
            uc.emu_stop()

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

    def _det_post(self, fn: Callable[[], None]) -> None:
        """A device's post in deterministic mode (emulation thread: ticket effects, MMIO
        callbacks): run at the next slice boundary, never in the middle of the timeline's
        events or while waiting for a host thread, where its place would depend on the
        host's speed."""
        self._det_posted.append(fn)

    def _det_run_posted(self) -> None:
        while self._det_posted:
            posted, self._det_posted = self._det_posted, []
            for fn in posted:
                fn()

    def _det_take_input(self) -> None:
        """Deterministic mode: the console input that came since the last slice, taken
        now (at a slice boundary: the schedule never bends to it) and recorded."""
        assert self.det is not None
        j = self.det.journal
        if j.cursor < len(j.inputs):
            return  # time travel re-runs the past: new input waits for the present
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, []
        for data in inbox:
            j.add_input(self.clock.insns, self.det.timeline.ran, data)
            j.cursor += 1
            self.uart.receive(data)

    def _det_replay_inputs(self) -> None:
        """A replay: the recorded console input due now, at the same point among the
        timeline's events as when it was recorded."""
        assert self.det is not None
        j, tl = self.det.journal, self.det.timeline
        now = self.clock.insns
        while j.cursor < len(j.inputs):
            at, ran, data = j.inputs[j.cursor]
            if at > now or (at == now and ran > tl.ran):
                return
            if at < now or ran < tl.ran:
                self._finish(RunResult(Exit.FAULT, message="the replay has diverged from the "
                                       f"recording: console input recorded at instruction "
                                       f"time {at} (after {ran} host results), the replay is "
                                       f"at {now} ({tl.ran})"))
                return
            j.cursor += 1
            self.uart.receive(data)

    def _det_next_input(self) -> int | None:
        """Guest time of the next recorded console input of a replay, or None."""
        assert self.det is not None
        j = self.det.journal
        if j.cursor >= len(j.inputs):
            return None
        return j.inputs[j.cursor][0]

    def request_quit(self, message: str = "stopped by the user") -> None:
        """End the run (any thread)."""
        self.post(lambda: self._finish(RunResult(Exit.QUIT, message=message)))

    # ---------------------------------------------------------------- debugger control
    def pause(self, message: str = "", before: bool = True) -> None:
        """Stop the guest before its next instruction; run()/step() return Exit.PAUSE and
        the next call goes on from there. Emulation thread only (e.g. a Unicorn hook).
        `before`: called from a code hook, before the instruction runs (False from a
        memory hook: the instruction has run), which the instruction counter needs."""
        if self._pause is None:
            self._pause = RunResult(Exit.PAUSE, message=message)
        if before and self._in_run:
            self._stopped_before = True
        self.uc.emu_stop()

    @property
    def idle(self) -> bool:
        """Every running hart executed wfi and waits for an interrupt."""
        return all(c.idle or not c.started for c in self.cpus)

    def request_pause(self, message: str = "interrupted") -> None:
        """pause() from any thread (a debugger's Ctrl-C, a GDB interrupt)."""
        self.post(lambda: self.pause(message))

    def step(self) -> RunResult | None:
        """Execute exactly one instruction (a debugger's stepi), or take one pending
        interrupt. Returns the end of the run if it ended (power-off, fault), a PAUSE if a
        hook asked for one, else None. In deterministic mode the schedule goes on until
        the current hart has executed one instruction (other harts may run meanwhile, as
        the schedule has them: the run stays the same run)."""
        if self.det is not None:
            h = self.cur
            res = self.run_to(hart=h, count=self.det.counter.count(h) + 1)
            self.cur = h
            return None if res.exit == Exit.PAUSE and res.message == REACHED else res
        self._pc = self.hart.get(REG_PC)  # a debugger may have moved it
        self.cpu.idle = False
        while self.result is None:
            for fn in self.waker.take_posted():
                fn()
            self._flush_output()
            if self.result is not None or self._pause is not None:
                break
            self.clint.tick()
            runs = self.stats.runs
            self._run_slice(self.cpu, count=1)
            if self.stats.runs != runs:
                break
        self._flush_output()
        return self._take_stop()

    @staticmethod
    def paused(res: RunResult) -> bool:
        """Did a run stop for a debugger (not end)?"""
        return res.exit == Exit.PAUSE

    @staticmethod
    def reached(res: RunResult) -> bool:
        """Did run_to stop at the position it was asked for?"""
        return res.exit == Exit.PAUSE and res.message == REACHED

    def run_to(self, total: int | None = None, hart: int | None = None,
               count: int | None = None) -> RunResult:
        """Deterministic mode: run() until the machine has executed `total` instructions,
        or hart `hart` has executed `count` (then Exit.PAUSE with message REACHED), or
        anything else stops it first."""
        assert self.det is not None
        self._det_goal = (total, hart, count)
        try:
            return self.run()
        finally:
            self._det_goal = (None, None, None)
            self.det.counter.unlimit()
            for c in self.cpus:
                self.det.counter.limit_hart(c.id, None)

    def _take_stop(self) -> RunResult | None:
        if self.result is not None:
            self._pause = None
            return self.result
        stop, self._pause = self._pause, None
        if stop is not None:
            stop.pc = self._pc
        return stop

    # ---------------------------------------------------------------- device hooks
    def _set_stip(self, h: int, level: bool) -> None:
        self.cpus[h].hart.set_mip(STIP, level)

    def _set_seip(self, h: int, level: bool) -> None:
        self.cpus[h].hart.set_mip(SEIP, level)

    def _ipi(self, h: int) -> None:
        """SSWI: raise hart h's SSIP; a hart asleep in wfi can run now."""
        c = self.cpus[h]
        self.stats.ipis += 1
        c.hart.set_mip(SSIP, True)
        if c.idle and h != self.cur:
            if not c.ipi_at:
                c.ipi_at = time.perf_counter()
            self._hurry()

    def _hurry(self) -> None:
        """An IPI made an idle hart runnable (called from the running hart's SSWI store):
        with the host clock, end this slice at its first trap from U-mode after
        IPI_GRACE_NS, or when it goes idle, whichever comes first. A sender that blocks
        right after (a pipe write or an AI submit, then a read or a wait: the common case)
        goes idle, and its own hart's scheduler runs the woken process at once, as one
        hart would, with no hart switch; one that keeps running is cut short at its next
        system call or fault from U-mode (`Traps.hurry`: the C trap path checks that in C,
        so the slice's traps stay off the Python path; the Python path in `_after_trap`),
        or at its slice's deadline
        (our kernel's running harts always have one within a timer tick). Only a slice
        with no deadline within HURRY_MAX_NS (bare-metal code without a timer) gets one
        then: telling the waker thread costs a host thread switch and a GIL hand-over, more
        than the hart switch it would save, so it is not done for every IPI.
        With the instruction clock the slice ends on its own count."""
        if isinstance(self.clock, IcountClock) or not self._in_run or self._hurry_at:
            return
        now = time.monotonic_ns()
        self._hurry_at = now + IPI_GRACE_NS
        self.traps.hurry(self._hurry_at)  # the C trap path checks it without Python
        deadline = self.waker.deadline  # the slice's (cheaper than _deadline_ns on an IPI)
        if deadline is None or deadline > now + HURRY_MAX_NS:
            self._slice_end = now + HURRY_MAX_NS
            self.waker.set_deadline(self._slice_end)

    def _after_trap(self, uc: Uc, priv: int) -> None:
        """Traps: the running hart took a trap. It ends an AMO/SC window (a faulting
        AMO), and a hurried slice ends at a trap from U-mode: the hart holds no kernel
        lock there, so a hart run next will not spin on one of its locks (_hurry)."""
        if self._atomic_since:
            self._atomic_since = 0
            if self._stop_wanted:
                self._stop_wanted = False
                self._kicked = True
                uc.emu_stop()
        if priv == PRIV_U and self._hurry_at and time.monotonic_ns() >= self._hurry_at:
            self._kicked = True
            uc.emu_stop()

    def _kick(self) -> None:
        """Another hart can run now (called from the running hart's MMIO store): with the
        host clock, end the slice right after this store. The stop makes Unicorn leave
        the PC on the store, so it is marked like a waker stop and the bus completes the
        store instead of repeating it (harness/mmio.py). With the instruction clock the
        slice ends on its own count, which keeps runs reproducible."""
        if not isinstance(self.clock, IcountClock) and self._in_run:
            self._kicked = True
            self._run_uc.emu_stop()

    def _on_deadline(self) -> None:
        self.waker.set_deadline(self._deadline_ns())

    def _on_power(self, cmd: PowerCmd, status: int) -> None:
        # the PC is not exact inside an MMIO callback; _run_slice fills it in after the stop
        self._flush_output()
        if cmd == PowerCmd.PASS:
            self._finish(RunResult(Exit.POWEROFF, status=status))
        elif cmd == PowerCmd.FAIL:
            self._finish(RunResult(Exit.PANIC, status=status,
                                   message=self.panic_message() or f"POWER_FAIL code {status}"))
        else:
            self._finish(RunResult(Exit.RESET))
        self.uc.emu_stop()

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

    # ---------------------------------------------------------------- the run loop
    def _finish(self, result: RunResult) -> None:
        if self.result is None:
            self.result = result

    def _deadline_ns(self) -> int | None:
        """Host time at which the running slice must end (timer deadline, timeout)."""
        cands = []
        cmp = self.clint.armed_ahead()
        if cmp < NEVER and self.clock.mtime() < cmp:
            t = self.clock.host_ns(cmp)
            if t is not None:
                cands.append(t)
        if self._timeout_at is not None:
            cands.append(self._timeout_at)
        if self.hang is not None:
            cands.append(self.hang.next_check)
        if self._slice_end is not None:
            cands.append(self._slice_end)
        return min(cands) if cands else None

    def run(self) -> RunResult:
        """Run until the guest powers off, fails, faults, times out or is stopped, or
        until a debugger pauses it (Exit.PAUSE: call run() again to go on)."""
        t = self.config.timeout
        self._timeout_at = time.monotonic_ns() + int(t * 1e9) if t else None
        for c in self.cpus:
            if c.started:
                c.pc = c.hart.get(REG_PC)  # a debugger may have moved it
        if self.hang is not None:
            self.hang.restart()
        try:
            while self.result is None and self._pause is None:
                for fn in self.waker.take_posted():
                    fn()
                self._flush_output()
                if self.result is not None or self._pause is not None:
                    break
                self.clint.tick()
                if self._timeout_at is not None and time.monotonic_ns() >= self._timeout_at:
                    self._finish(RunResult(Exit.TIMEOUT, pc=self.hart.get(REG_PC),
                                           message=f"timed out after {t:g} s"))
                    break
                if self.hang is not None and time.monotonic_ns() >= self.hang.next_check:
                    why = self.hang.check(time.monotonic_ns())
                    if why:
                        self._finish(RunResult(Exit.HANG, pc=self.hart.get(REG_PC),
                                               message=why))
                        break
                if self.det is not None:
                    self._det_replay_inputs()  # recorded input (a replay, time travel)
                    if not self.det.replaying:
                        self._det_take_input()
                    self._det_run_posted()
                    self.det.timeline.run_due(self._det_poll)
                    self._det_run_posted()
                    self._flush_output()
                    if self.result is not None or self._pause is not None:
                        break
                    self.clint.tick()
                c = self._det_next() if self.det is not None else self._next_cpu()
                if c is None:
                    self._wait_for_interrupt()
                    continue
                self.cur = c.id
                c.idle = False
                self._run_slice(c)
        except KeyboardInterrupt:
            self._finish(RunResult(Exit.QUIT, pc=self.hart.get(REG_PC), message="interrupted"))
        finally:
            self._flush_output()
        stop = self._take_stop()
        assert stop is not None
        return stop

    def _next_cpu(self) -> Cpu | None:
        """The next hart after the current one, round-robin, that can run, or None."""
        if self.only is not None:
            c = self.cpus[self.only]
            return c if c.can_run() else None
        n = len(self.cpus)
        for i in range(1, n + 1):
            c = self.cpus[(self.cur + i) % n]
            if c.can_run():
                return c
        return None

    def _det_next(self) -> Cpu | None:
        """Deterministic mode: the hart the schedule picks among those that can run (the
        debugger's `only` one if set), and its slice (`_det_budget`), or None."""
        assert self.det is not None
        if self._det_resume is not None:  # the rest of a slice a debugger stopped
            h, self._det_budget = self._det_resume
            self._det_resume = None
            if self.cpus[h].can_run():
                return self.cpus[h]
        runnable = [c.id for c in self.cpus if c.can_run()]
        if self.race_watch is not None:
            runnable = self.race_watch.runnable(runnable)
        if not runnable:
            return None
        h, self._det_budget = self.det.policy.pick(runnable, False)
        return self.cpus[h]

    def _det_poll(self) -> bool:
        """While the guest waits for a host thread's result (deterministic mode): take
        quit and pause requests; True if the run is to end or pause."""
        for fn in self.waker.take_posted():
            fn()
        return self.result is not None or self._pause is not None

    def _others_can_run(self, c: Cpu) -> bool:
        """Could another hart run beside c (so c's slice needs an end)? A hart idle in
        wfi only for an external interrupt that c will take too does not count: the PLIC
        raises SEIP in every hart's context, the first claim takes the source and the
        others' SEIP falls, so each device interrupt would otherwise give c's slice an
        end, and the waker thread a wake-up, for nothing (a few per token while the AI
        device streams). c takes every pending source in turn, one claim per trap."""
        if self.only is not None:
            return False
        mine: int | None = None
        for o in self.cpus:
            if o is c or not o.started:
                continue
            if not o.idle:
                return True
            wake = o.hart.pending_enabled()
            if wake & ~SEIP:
                return True
            if wake:
                if mine is None:
                    mine = c.hart.pending_enabled()
                if not mine & SEIP:
                    return True
        return False

    def _wait_for_interrupt(self) -> None:
        """Every hart is in wfi with nothing pending: let the host thread sleep."""
        # a deadline whose STIP is already raised and still not pending-enabled: the
        # guest masked the timer (sie.STIE), so it cannot wake it; only an event, the
        # timeout or another hart's deadline can
        cmp = self.clint.armed_ahead()
        armed = cmp < NEVER
        if armed and self.clock.mtime() >= cmp:
            return  # the deadline passed since the loop's tick(): tick again, never sleep
        timer_ahead = armed
        if self.det is not None:
            assert isinstance(self.clock, DetClock)
            ticket, inp = self.det.timeline.next_at(), self._det_next_input()
            if inp is not None and inp <= self.clock.insns and (ticket is None
                                                                or ticket > inp):
                # its turn among the host results has passed, and nothing runs to reach it
                self._finish(RunResult(Exit.FAULT, message="the replay has diverged from the "
                                       "recording: every hart waits, but console input was "
                                       f"recorded at instruction time {inp} after other host "
                                       "results"))
                return
            nxt = min((x for x in (ticket, inp) if x is not None), default=None)
            timer_v = (cmp - self.clock.reads) * INSNS_PER_TICK if armed else None
            if nxt is not None and (timer_v is None or nxt < timer_v):
                self.clock.advance_insns(nxt)  # the next host result is due then
                return
        if isinstance(self.clock, IcountClock):
            if timer_ahead:
                self.clock.advance_to(cmp)  # idle time costs nothing in icount mode
                return
            until = self._timeout_at
        else:
            # sleep until the deadline's host time even if it has just passed (the sleep is
            # then empty): testing "still ahead?" again here would race with the clock
            until = self._timeout_at
            t = self.clock.host_ns(cmp) if armed else None
            if t is not None:
                until = t if until is None else min(until, t)
        if self.hang is not None:
            until = self.hang.next_check if until is None else min(until, self.hang.next_check)
        t0 = time.perf_counter()
        self.waker.sleep(until)
        self.stats.wfi_sleeps += 1
        self.stats.sleep_s += time.perf_counter() - t0

    def _run_slice(self, c: Cpu, count: int | None = None) -> None:
        """One emu_start of hart c: uncounted until stopped (host clock), or counted
        (icount clock, or `count` instructions for a debugger's step)."""
        if self.det is not None:
            self._run_det_slice(c, count)
            return
        icount = isinstance(self.clock, IcountClock)
        self._others = others = self._others_can_run(c)
        if count is not None:
            if not c.counted:
                # blocks translated without the count hook would ignore the count
                # (reference gotcha 11); Unicorn itself flushes on the way back
                c.uc.ctl_flush_tb()
            deadline = None
        elif icount:
            assert isinstance(self.clock, IcountClock)
            now = self.clock.mtime()
            cmp = min((x for x in self.clint.cmp if x > now), default=NEVER)
            limit = ICOUNT_SLICE_SMP if others else ICOUNT_SLICE
            ahead = (cmp - now) * INSNS_PER_TICK if cmp < NEVER else limit
            count = min(limit, ahead)
            deadline = self._timeout_at
        else:
            count = 0
            # the slice's end stays a deadline when the guest moves a timer meanwhile
            self._slice_end = time.monotonic_ns() + QUANTUM_NS if others else None
            deadline = self._deadline_ns()
        self._run_uc = c.uc
        if not self.waker.begin_run(deadline):
            return
        c.bus.new_run()
        c.start_pc, c.paused_once = c.pc, False
        err: BaseException | None = None
        t0 = time.perf_counter()
        if c.ipi_at:
            self.stats.ipi_wakes += 1
            self.stats.ipi_wake_s += t0 - c.ipi_at
            c.ipi_at = 0.0
        self._in_run, self._kicked, self._hurry_at = True, False, 0
        self._atomic_since, self._stop_wanted = 0, False
        c.traps.watch(False)
        c.traps.hurry(0)
        try:
            c.uc.emu_start(c.pc, UNTIL, 0, count)
        except UcError as e:
            err = e
        except MachineFault as e:
            err = e
        finally:
            self._in_run = False
            self._slice_end = None
            stopped = self.waker.end_run() or self._kicked or c.traps.hurried()
            self.stats.run_s += time.perf_counter() - t0
            self.stats.runs += 1
            if icount:
                self.clock.insns += count  # type: ignore[union-attr]
            c.counted = count > 0
            if self.hang is not None:
                self.hang.after_run()
        c.pc = c.hart.get(REG_PC)
        if err is None and c.bus.fault is not None:
            err, c.bus.fault = c.bus.fault, None
        if self.result is not None and self.result.pc is None:
            self.result.pc = c.pc
        if err is not None:
            if (isinstance(err, UcError) and err.errno == UC_ERR_EXCEPTION
                    and c.traps.ebreak_delivered):
                c.traps.ebreak_delivered = False  # Unicorn's spurious error after ebreak
                return
            self._finish(self._fault(err))
            return
        if self.result is not None or self._pause is not None:
            return  # a pause stops before an instruction: no MMIO access to replay
        if stopped:
            pc = c.pc
            c.pc = c.bus.after_stop(pc)
            if c.pc == pc and len(self.cpus) > 1:
                c.pc = complete_store(c, self.ram)
        elif c.hart.vread(c.pc - 4, 4, UC_PROT_EXEC) == WFI:
            c.idle = True

    def _det_slice_len(self, count: int | None) -> int:
        """Instructions the next deterministic slice may run: the policy's budget (or a
        debugger's `count`), cut at the next timer deadline and the next host result."""
        assert self.det is not None and isinstance(self.clock, DetClock)
        n = count if count is not None else self._det_budget
        now = self.clock.mtime()
        cmp = min((x for x in self.clint.cmp if x > now), default=NEVER)
        if cmp < NEVER:
            n = min(n, (cmp - now) * INSNS_PER_TICK)
        nxt = self.det.timeline.next_at()  # (not a replay's input: see _det_take_input)
        if nxt is not None:
            n = min(n, nxt - self.clock.insns)
        return max(n, 1)

    def _run_det_slice(self, c: Cpu, count: int | None) -> None:
        """One exactly counted slice of hart c (deterministic mode): the C counter ends it
        (harness/native/sched.c); no other thread ever stops it."""
        det = self.det
        assert det is not None
        counter = det.counter
        n = self._det_slice_len(count)
        goal_total, goal_hart, goal_count = self._det_goal
        cut = n
        if goal_total is not None:
            cut = min(cut, max(goal_total - counter.total, 0))
        counter.limit_hart(c.id, goal_count if goal_hart == c.id else None)
        if cut == 0 or (goal_hart == c.id and goal_count is not None
                        and counter.count(c.id) >= goal_count):
            self._pause = RunResult(Exit.PAUSE, message=REACHED)
            self._det_resume = (c.id, n)
            return
        self._run_uc = c.uc
        c.bus.new_run()
        c.start_pc, c.paused_once = c.pc, False
        start = counter.total
        rng0 = int(counter.s.rng[0]) if det.trace is not None else 0
        counter.limit(cut)
        self._stopped_before = self._yielded = False
        self._in_run = True
        err: BaseException | None = None
        t0 = time.perf_counter()
        counter.begin(c.id)
        try:
            c.uc.emu_start(c.pc, UNTIL, 0, 0)
        except (UcError, MachineFault) as e:
            err = e
        finally:
            self._in_run = False
            counter.end(c.id)
            counter.unlimit()
            why = {LIMIT: "limit", POINT: "point", SAMPLE: "sample"}.get(counter.stopped)
            if why is None and self._stopped_before:
                counter.uncount(c.id)  # a later hook stopped it before an instruction
            self.stats.run_s += time.perf_counter() - t0
            self.stats.runs += 1
            if self.hang is not None:
                self.hang.after_run()
        c.pc = c.hart.get(REG_PC)
        executed = counter.total - start
        if err is None and c.bus.fault is not None:
            err, c.bus.fault = c.bus.fault, None
        if self.result is not None and self.result.pc is None:
            self.result.pc = c.pc
        if err is not None:
            det.policy.ended(c.id, executed, "stop")
            if (isinstance(err, UcError) and err.errno == UC_ERR_EXCEPTION
                    and c.traps.ebreak_delivered):
                c.traps.ebreak_delivered = False  # Unicorn's spurious error after ebreak
                return
            self._finish(self._fault(err))
            return
        if why == "limit" and executed < n:  # the debugger's goal, not the slice's end
            self._pause = RunResult(Exit.PAUSE, message=REACHED)
            why = "stop"
        if why is None:
            if self._yielded:
                why = "yield"
            elif (self.result is None and self._pause is None
                  and c.hart.vread(c.pc - 4, 4, UC_PROT_EXEC) == WFI):
                c.idle, why = True, "idle"
            else:
                why = "stop"
        if why == "stop" and self._pause is not None and self.result is None:
            self._det_resume = (c.id, n - executed)  # go on with this slice, not a new pick
        if why == "yield" and self.race_watch is not None:
            self.race_watch.yielded()
        if why == "sample" and (self.race_watch is None or not self.race_watch.on_sample(c)):
            self._det_resume = (c.id, n - executed)  # not watched: the slice goes on
        det.policy.ended(c.id, executed, why)
        if self.travel is not None:
            self.travel.tick()
        if det.trace is not None:
            det.trace.append((c.id, start, executed, why, c.pc, self.clock.insns,
                              det.timeline.ran, rng0, n, int(counter.s.point_at[c.id])))

    def _fault(self, err: BaseException) -> RunResult:
        pc = getattr(err, "pc", None) or self._pc
        if isinstance(err, UcError):
            msg = describe_uc_error(self, err, pc)
        else:
            msg = str(err)
        return RunResult(Exit.FAULT, pc=pc, message=msg, error=err)

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


def describe_uc_error(m: Machine, err: UcError, pc: int) -> str:
    """A sentence for a Unicorn error that ended the run (unmapped memory and the like)."""
    from unicorn import (
        UC_ERR_FETCH_UNMAPPED,
        UC_ERR_INSN_INVALID,
        UC_ERR_READ_UNMAPPED,
        UC_ERR_WRITE_PROT,
        UC_ERR_WRITE_UNMAPPED,
    )

    from harness.traps import mem_operand

    where = ""
    got = m.hart.fetch(pc)
    op = mem_operand(*got) if got else None
    if op is not None:
        va = (m.hart.x(op[0]) + op[1]) & 0xFFFF_FFFF_FFFF_FFFF
        pa = m.hart.translate(va)
        where = f" {va:#x}" + (f" (physical {pa:#x})" if pa is not None and pa != va else "")
    if err.errno == UC_ERR_READ_UNMAPPED:
        return f"load from unmapped physical memory at{where or ' an unknown address'}"
    if err.errno == UC_ERR_WRITE_UNMAPPED:
        return f"store to unmapped physical memory at{where or ' an unknown address'}"
    if err.errno == UC_ERR_FETCH_UNMAPPED:
        return f"instruction fetch from unmapped physical memory at {pc:#x}"
    if err.errno == UC_ERR_WRITE_PROT:
        return f"store to read-only memory at{where or ' an unknown address'} (the boot info page?)"
    if err.errno == UC_ERR_INSN_INVALID:
        return f"invalid instruction at {pc:#x}"
    return f"Unicorn stopped: {err} at pc {pc:#x}"


def _stdout_sink(data: bytes) -> None:
    import sys

    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()

