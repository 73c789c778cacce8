"""The system bench (`harness bench system`): how fast the machine runs our kernel, against
same-run references.

Measured for each hart count of `--cpus` (e.g. 1,2,4), interleaved `--reps` times,
medians reported:

    boot to prompt      fresh machine (ELF load, disk image) until the shell prints "$ "
    guest MIPS          `sysbench cpu` (a hand-written 8-instruction user loop, timer on),
                        one copy per hart at once: per hart (mean) and in total
      reference         the same loop on a bare Unicorn (no machine, no kernel, no hooks)
    syscall round trip  `sysbench getpid` (U -> kernel -> U through our trap delivery)
      reference         an ecall loop on the machine with a 5-instruction S handler and
                        no kernel: the floor set by the harness's trap delivery, the C
                        path's (harness/fastpath) and the Python path's beside it
      minimal path      the same loop through the least a kernel must do (a Linux-style
                        entry and exit, paging on, MINPATH_S): what any kernel's getpid
                        costs at best on this emulator, against the floor
      CSR instruction   a loop of `csrr` on a bare Unicorn, in ns and in plain instructions:
                        each ends a translated block, so a kernel's trap path costs about
                        its CSR instructions times this (docs/BENCH.md)
    fork, pipe          `sysbench fork` (fork + exit + wait) and `sysbench pipe` (KiB/s
                        through a pipe to a child)
      Python traps      getpid and fork again with HARNESS_TRAPS=python (first hart
                        count only): what the C trap path gains, in the same run
    MMIO floor          a load loop on a device register with no kernel: the UART's LSR
                        (served by the C bus, harness/fastpath/mmio.c) and its SCR (the
                        Python device behind the C bus), and LSR on the Python bus; a
                        store loop on mtimecmp (a deadline past the slice's end, as a
                        kernel's next tick: harness/fastpath/clint.c) on both buses
    console output      `cat` of a large binary to the console (KiB/s), C and Python bus
    context switch      `sysbench pingpong` (one byte there and back over two pipes): on
                        one hart two switches per round trip; on several, two wake-ups
                        of another hart by IPI
    IPI wake-up         in the same runs: host time from the SSWI store to the woken
                        hart's next run slice (Machine.stats)
    idle host CPU       an interactive guest sitting at the prompt for --idle-seconds
                        (target: under 2 % of one core, whatever the hart count)

The references use stubs assembled with the cross compiler on the fly.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, UC_PROT_ALL, Uc
from unicorn import riscv_const as R

from harness.abi import cheader
from harness.bench.errors import BenchError
from harness.devices.uart import Reg
from harness.guest.elf import ElfImage
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig
from harness.run.launch import Launch, launch

LOOPS = 50_000_000       # sysbench cpu iterations (8 instructions each)
GETPIDS = 20_000
FORKS = 200
PIPE_KIB = 2048
PINGPONGS = 2_000
FLOOR_ECALLS = 50_000
MMIO_LOADS = 50_000
CONSOLE_CMD = "cat usertests"  # a large binary through the UART
PROMPT = b"$ "
_ML = cheader.load("memlayout.h")

# the loop of user_c/sysbench.c's spin(), and an ecall loop with a minimal S-mode handler
SPIN_S = """
.globl _start
_start:
  li a1, 1
  li a2, 2
  li a3, 3
1: add a1, a1, a2
  xor a2, a2, a1
  slli a3, a1, 3
  add a2, a2, a3
  srli a3, a2, 5
  sub a1, a1, a3
  addi a0, a0, -1
  bnez a0, 1b
.globl done
done: j done
"""
# 8 CSR reads a turn: what one costs the emulator (M-mode at reset: any CSR is legal)
CSR_LOOPS = 200_000
CSR_S = """
.globl _start
_start:
1: .rept 8
  csrr t0, sscratch
  .endr
  addi a0, a0, -1
  bnez a0, 1b
.globl done
done: j done
"""
# every stub's end: power the machine off with a pass (memlayout.h)
_POWEROFF = f"""  li t0, {_ML["POWER"]}
  li t1, {_ML["POWER_PASS"]}
  sw t1, 0(t0)
2: j 2b"""
FLOOR_S = f"""
.globl _start
_start:
  la t0, svec
  csrw stvec, t0
  la t0, ucode
  csrw sepc, t0
  li t0, 0x100
  csrc sstatus, t0
  li a0, {FLOOR_ECALLS}
  li a7, 0
  sret
ucode:
1: ecall
  addi a0, a0, -1
  bnez a0, 1b
  li a7, 1
  ecall
.align 4
svec:
  csrr t0, sepc
  addi t0, t0, 4
  csrw sepc, t0
  bnez a7, off
  sret
off:
{_POWEROFF}
"""
# The least any kernel's system call can cost here: FLOOR_S's ecall loop (the user side
# through a call, as ulib's stubs are) with a Linux-style minimal path behind stvec: no
# satp or stvec switch, sscratch holding the kernel stack, all 31 registers saved and
# restored, sepc and scause read, a dispatch through a table of C-like functions. Paging
# is on, with our kernel's permissions (text R+X, data R+W): a store to a page mapped
# executable (as all memory is with paging off) costs the emulator many times an ordinary
# store, as it checks the page for translated code every time. Page 0 is the kernel's code, 1 the
# user's, 2 the kernel stack, 3.. the page tables (Sv39, identity: L2, L1, L0, and an L1
# megapage over the power register).
_PG = 0x1000
_V, _R, _W, _X, _U, _A, _D = 1, 2, 4, 8, 16, 64, 128
_KTEXT, _UTEXT, _KSTACK, _L2, _L1, _L0, _L1LOW = (0x8000_0000 + i * _PG for i in range(7))


def _pte(pa: int, flags: int) -> int:
    return (pa >> 12) << 10 | flags


def _table(entries: dict[int, int]) -> str:
    return "\n".join(f"  .dword {entries.get(i, 0):#x}" for i in range(512))


_SAVE = "\n".join(f"  sd x{i}, {8 * i}(sp)" for i in range(1, 32) if i != 2)
_RESTORE = "\n".join(f"  ld x{i}, {8 * i}(sp)" for i in range(1, 32) if i != 2)
MINPATH_S = f"""
.option norelax
.globl _start
_start:
  la t0, svec
  csrw stvec, t0
  li t0, {_KSTACK + _PG:#x}
  csrw sscratch, t0
  li t0, {8 << 60 | _L2 >> 12:#x}
  csrw satp, t0
  sfence.vma
  li t0, {_UTEXT:#x}
  csrw sepc, t0
  li t0, 0x100
  csrc sstatus, t0
  li s1, {FLOOR_ECALLS}
  sret
.align 4
svec:
  csrrw sp, sscratch, sp
  addi sp, sp, -272
{_SAVE}
  csrr t0, sscratch
  sd t0, 16(sp)
  csrr t0, sepc
  sd t0, 256(sp)
  csrr t0, scause
  sd t0, 264(sp)
  mv a0, sp
  call handle
  ld t0, 256(sp)
  addi t0, t0, 4
  csrw sepc, t0
  addi t0, sp, 272
  csrw sscratch, t0
{_RESTORE}
  ld sp, 16(sp)
  sret
handle:
  addi sp, sp, -16
  sd ra, 8(sp)
  sd s0, 0(sp)
  mv s0, a0
  ld t1, 136(a0)
  bnez t1, off
  la t0, table
  slli t1, t1, 3
  add t0, t0, t1
  ld t0, 0(t0)
  jalr t0
  sd a0, 80(s0)
  ld s0, 0(sp)
  ld ra, 8(sp)
  addi sp, sp, 16
  ret
sys_getpid:
  li a0, 42
  ret
off:
{_POWEROFF}
.align 3
table: .dword sys_getpid
.org {_UTEXT - _KTEXT:#x}
ucode:
1: call getpid
  addi s1, s1, -1
  bnez s1, 1b
  li a7, 1
  ecall
getpid:
  li a7, 0
  ecall
  ret
.org {_L2 - _KTEXT:#x}
{_table({0: _pte(_L1LOW, _V), 2: _pte(_L1, _V)})}
{_table({0: _pte(_L0, _V)})}
{_table({0: _pte(_KTEXT, _V | _R | _X | _A), 1: _pte(_UTEXT, _V | _R | _X | _U | _A),
         2: _pte(_KSTACK, _V | _R | _W | _A | _D)})}
{_table({0: _pte(0, _V | _R | _W | _A | _D)})}
"""
# MMIO_LOADS accesses (`{insn}` on t0 = `{base}`; t2 = mtime + 1 hour), then power off
MMIO_S = f"""
.globl _start
_start:
  li a0, {MMIO_LOADS}
  li t0, {_ML["CLINT_MTIME"]}
  ld t2, 0(t0)
  li t1, {3600 * _ML["TIMEBASE_HZ"]}
  add t2, t2, t1
  li t0, {{base}}
1: {{insn}}
  addi a0, a0, -1
  bnez a0, 1b
{_POWEROFF}
"""
LINK = "SECTIONS { . = 0x80000000; .text : { *(.text*) } }"


def _assemble(src: str, name: str, work: Path) -> ElfImage:
    s, ld, out = work / f"{name}.S", work / "link.ld", work / f"{name}.elf"
    s.write_text(src)
    ld.write_text(LINK)
    cc = "riscv64-unknown-elf-gcc"
    try:
        subprocess.run([cc, "-nostdlib", "-march=rv64imac_zicsr", "-mabi=lp64",
                        "-mcmodel=medany", "-T", str(ld), "-o", str(out), str(s)],
                       check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BenchError(f"cannot assemble the reference stubs with {cc}: {e}") from None
    return ElfImage.load(out)


def _bare_seconds(stub: ElfImage, loops: int) -> float:
    """Host seconds a loop stub (`loops` turns in a0, ending at `done`) takes on a bare
    Unicorn: no machine, no kernel, no hooks."""
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(0x8000_0000, 1 << 20, UC_PROT_ALL)
    for seg in stub.segments:
        uc.mem_write(seg.paddr, seg.data)
    uc.reg_write(R.UC_RISCV_REG_A0, loops)
    t = time.perf_counter()
    uc.emu_start(stub.entry, stub.symbol("done"))
    return time.perf_counter() - t


def raw_mips(spin: ElfImage, loops: int) -> float:
    """The spin loop on a bare Unicorn: the speed ceiling for this host."""
    return loops * 8 / _bare_seconds(spin, loops) / 1e6


def raw_csr_ns(csr: ElfImage, loops: int) -> float:
    """ns per CSR instruction of the csrr loop on a bare Unicorn (the loop's own two
    instructions, at the spin loop's speed, are negligible)."""
    return _bare_seconds(csr, loops) / (loops * 8) * 1e9


def _stub_seconds(stub: ElfImage, traps: str, what: str, timeout: float = 0.0) -> float:
    """Host seconds a bare-metal stub runs until it powers off (`traps`: the trap path,
    which also picks the MMIO bus; "" = the default; a `timeout` is the slice's deadline)."""
    m = Launch(MachineConfig(kernel=stub.path, traps=traps, timeout=timeout)).machine
    try:
        t = time.perf_counter()
        res = m.run()
        dt = time.perf_counter() - t
    finally:
        m.close()
    if res.exit != Exit.POWEROFF:
        raise BenchError(f"the {what} stub failed: {res.exit.value} {res.message}")
    return dt


def floor_trap_us(floor: ElfImage, traps: str = "") -> float:
    """µs per ecall round trip on the machine without a kernel."""
    return _stub_seconds(floor, traps, "trap floor") / FLOOR_ECALLS * 1e6


def minpath_us(minpath: ElfImage) -> float:
    """µs per getpid through MINPATH_S's minimal kernel path on the C trap path."""
    return _stub_seconds(minpath, "c", "minimal trap path") / FLOOR_ECALLS * 1e6


def mmio_floor_us(stub: ElfImage, traps: str) -> float:
    """µs per MMIO access of the stub's register on the machine without a kernel (with a
    timeout, so a slice has a deadline for the mtimecmp stores to fall after)."""
    return _stub_seconds(stub, traps, "MMIO floor", timeout=600.0) / MMIO_LOADS * 1e6


def console_kib_s(kernel: Path, fs: Path, cpus: int, traps: str) -> float:
    """KiB/s of console output (CONSOLE_CMD), timed from its first 4 KiB (past the boot
    banner) to its last byte."""
    chunks: list[tuple[float, int]] = []
    res = launch(MachineConfig(kernel=kernel, fs=fs, cmd=CONSOLE_CMD, timeout=300, cpus=cpus,
                               traps=traps),
                 echo=lambda data: chunks.append((time.perf_counter(), len(data))))
    total, start = 0, None
    for i, (_, n) in enumerate(chunks):
        total += n
        if total > 4096:
            start = i
            break
    if not res.ok or start is None or start + 1 >= len(chunks):
        raise BenchError(f"'{CONSOLE_CMD}' failed in the guest ({res.exit.value})")
    sent = sum(n for _, n in chunks[start + 1 :])
    return sent / 1024 / (chunks[-1][0] - chunks[start][0])


def guest(kernel: Path, fs: Path, cmd: str, timeout: float = 300, cpus: int = 1,
          stats: list[Machine] | None = None, traps: str = "") -> str:
    """Run commands in the guest; its console output (the machine goes to `stats`)."""
    res = launch(MachineConfig(kernel=kernel, fs=fs, cmd=cmd, timeout=timeout, cpus=cpus,
                               traps=traps))
    if stats is not None and res.machine is not None:
        stats.append(res.machine)
    if not res.ok:
        raise BenchError(f"'{cmd}' failed in the guest ({res.exit.value} "
                                   f"{res.status} {res.message}):\n{res.output[-500:]}")
    return res.output


def busy_mips(kernel: Path, fs: Path, cpus: int) -> list[float]:
    """MIPS of each of `cpus` concurrent `sysbench cpu` copies (a pipeline of them, each
    but the last writing to a file, so the shell waits for all)."""
    loops = LOOPS // cpus
    stages = [f"sysbench cpu {loops} > /b{i}" for i in range(cpus - 1)]
    cmd = " | ".join([*stages, f"sysbench cpu {loops}"])
    if cpus > 1:
        cmd += "; cat " + " ".join(f"/b{i}" for i in range(cpus - 1))
    text = guest(kernel, fs, cmd, cpus=cpus)
    vals = [float(v) for v in re.findall(r"mips=([0-9.]+)", text)]
    if len(vals) != cpus:
        raise BenchError(f"expected {cpus} sysbench lines:\n{text[-800:]}")
    return vals


def _field(text: str, key: str) -> float:
    m = re.search(rf"{key}=([0-9.]+)", text)
    if not m:
        raise BenchError(f"no {key}= in the guest output:\n{text[-500:]}")
    return float(m.group(1))


def interactive(kernel: Path, fs: Path, at_prompt: Callable[[Machine, float], None],
                cpus: int = 1) -> None:
    """Boot to the prompt on a worker thread, call at_prompt(machine, seconds to prompt),
    then quit."""
    seen = bytearray()
    ready = threading.Event()

    def hook(data: bytes) -> None:
        seen.extend(data)
        if not ready.is_set() and PROMPT in seen:
            ready.set()

    t0 = time.perf_counter()
    m = Launch(MachineConfig(kernel=kernel, fs=fs, timeout=600, cpus=cpus), echo=hook).machine
    worker = threading.Thread(target=m.run, name="bench-guest", daemon=True)
    worker.start()
    try:
        if not ready.wait(60):
            raise BenchError("the guest did not reach the shell prompt within 60 s")
        at_prompt(m, time.perf_counter() - t0)
    finally:
        m.request_quit("bench done")
        worker.join(30)
        m.close()


def idle_cpu_percent(m: Machine, seconds: float) -> float:
    time.sleep(0.5)  # let the shell settle into its read()
    c, w = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return 100 * (time.process_time() - c) / (time.perf_counter() - w)


def _row(label: str, value: float, fmt: str = "{:<10.2f}") -> str:
    return f"{label:<40}" + fmt.format(value)


def measure(kernel: Path, fs: Path, cpus: list[int], reps: int, idle_seconds: float,
            spin: ElfImage, floor: ElfImage, minpath: ElfImage, csr: ElfImage,
            mmio: dict[str, ElfImage],
            progress: Callable[[Iterable[int]], Any] = nullcontext) -> dict[str, list[float]]:
    """Every figure, `reps` interleaved rounds; keys end in _<harts> where they depend
    on the hart count."""
    r: dict[str, list[float]] = {"raw_mips": [], "csr_ns": [], "floor_us": [], "floor_py_us": [],
                                 "minpath_us": [], "syscall_py_us": [], "fork_py_us": []}
    with progress(range(reps)) as bar:
        for _ in bar:
            _reference_round(r, kernel, fs, cpus[0], spin, floor, minpath, csr, mmio)
            for n in cpus:
                _harts_round(r, kernel, fs, n)
    for n in cpus:
        idle = r[f"idle_cpu_percent_{n}"] = []
        interactive(kernel, fs, lambda m, s, idle=idle: idle.append(  # type: ignore[misc]
            idle_cpu_percent(m, idle_seconds)), cpus=n)
    _ratios(r, cpus[0])
    return r


def _reference_round(r: dict[str, list[float]], kernel: Path, fs: Path, cpus: int,
                     spin: ElfImage, floor: ElfImage, minpath: ElfImage, csr: ElfImage,
                     mmio: dict[str, ElfImage]) -> None:
    """One round of the figures that do not depend on the hart count: the bare-Unicorn and
    no-kernel references, the MMIO floors and console output on both buses, and the
    Python trap path's getpid and fork (on `cpus` harts)."""
    r["raw_mips"].append(raw_mips(spin, LOOPS))
    r["csr_ns"].append(raw_csr_ns(csr, CSR_LOOPS))
    r["floor_us"].append(floor_trap_us(floor, "c"))
    r["floor_py_us"].append(floor_trap_us(floor, "python"))
    r["minpath_us"].append(minpath_us(minpath))
    for path in ("c", "python"):
        for reg, stub in mmio.items():
            r.setdefault(f"mmio_{reg}_{path}_us", []).append(mmio_floor_us(stub, path))
        r.setdefault(f"console_{path}_kib_s", []).append(console_kib_s(kernel, fs, cpus, path))
    r["syscall_py_us"].append(_field(guest(
        kernel, fs, f"sysbench getpid {GETPIDS}", cpus=cpus, traps="python"), "per_call_us"))
    r["fork_py_us"].append(_field(guest(
        kernel, fs, f"sysbench fork {FORKS}", cpus=cpus, traps="python"), "per_fork_us"))


def _harts_round(r: dict[str, list[float]], kernel: Path, fs: Path, n: int) -> None:
    """One round of the figures on n harts: guest MIPS, getpid, fork, pipe, ping-pong (and
    the IPI wake-ups it caused), boot to the prompt."""
    vals = busy_mips(kernel, fs, n)
    r.setdefault(f"guest_mips_total_{n}", []).append(sum(vals))
    r.setdefault(f"guest_mips_per_hart_{n}", []).append(sum(vals) / n)
    r.setdefault(f"syscall_us_{n}", []).append(_field(guest(
        kernel, fs, f"sysbench getpid {GETPIDS}", cpus=n), "per_call_us"))
    r.setdefault(f"fork_us_{n}", []).append(_field(guest(
        kernel, fs, f"sysbench fork {FORKS}", cpus=n), "per_fork_us"))
    r.setdefault(f"pipe_kib_s_{n}", []).append(_field(guest(
        kernel, fs, f"sysbench pipe {PIPE_KIB}", cpus=n), "kib_per_s"))
    ms: list[Machine] = []
    r.setdefault(f"pingpong_us_{n}", []).append(_field(guest(
        kernel, fs, f"sysbench pingpong {PINGPONGS}", cpus=n, stats=ms), "per_round_trip_us"))
    st = ms[0].stats
    if st.ipi_wakes:
        r.setdefault(f"ipi_wake_us_{n}", []).append(st.ipi_wake_s / st.ipi_wakes * 1e6)

    def booted(m: Machine, seconds: float) -> None:
        r.setdefault(f"boot_ms_{n}", []).append(seconds * 1e3)
        k = re.search(rb"boot\s+(\d+) ms", bytes(m.console_tail))
        if k:
            r.setdefault(f"kernel_boot_ms_{n}", []).append(float(k.group(1)))

    interactive(kernel, fs, booted, cpus=n)


def _ratios(r: dict[str, list[float]], base: int) -> None:
    """The ratios, each taken within a repetition (the runs were back to back) before the
    median: on a busy host that is steadier than a ratio of medians. `base`: the first hart
    count, the one the references ran beside."""
    r["guest_over_bare"] = [g / b for g, b in zip(r[f"guest_mips_total_{base}"],
                                                 r["raw_mips"], strict=True)]
    r["csr_in_insns"] = [c * m / 1e3 for c, m in zip(r["csr_ns"], r["raw_mips"], strict=True)]
    r["syscall_over_floor"] = [s / f for s, f in zip(r[f"syscall_us_{base}"], r["floor_us"],
                                                    strict=True)]
    r["minpath_over_floor"] = [m / f for m, f in zip(r["minpath_us"], r["floor_us"], strict=True)]
    r["floor_py_over_c"] = [p / c for p, c in zip(r["floor_py_us"], r["floor_us"], strict=True)]
    r["syscall_py_over_c"] = [p / c for p, c in zip(r["syscall_py_us"], r[f"syscall_us_{base}"],
                                                   strict=True)]
    r["fork_py_over_c"] = [p / c for p, c in zip(r["fork_py_us"], r[f"fork_us_{base}"],
                                                strict=True)]


def run(cpus: list[int], reps: int, idle_seconds: float, kernel: Path, fs: Path,
        progress: Callable[[Iterable[int]], Any] = nullcontext) -> dict[str, Any]:
    """Every figure for each hart count of `cpus`, interleaved `reps` times: {"median":
    {figure: median}, "runs": {figure: [one value per repetition]}}; figures that depend on
    the hart count end in _<harts>. `progress` wraps the repetitions (a progress bar)."""
    with tempfile.TemporaryDirectory(prefix="bench-system-") as tmp:
        spin = _assemble(SPIN_S, "spin", Path(tmp))
        floor = _assemble(FLOOR_S, "floor", Path(tmp))
        minpath = _assemble(MINPATH_S, "minpath", Path(tmp))
        csr = _assemble(CSR_S, "csr", Path(tmp))
        uart, cmp = _ML["UART0"], _ML["CLINT_MTIMECMP"]
        mmio = {name: _assemble(MMIO_S.format(base=base, insn=insn), f"mmio_{name}", Path(tmp))
                for name, base, insn in (("lsr", uart, f"lbu t1, {Reg.LSR}(t0)"),
                                         ("scr", uart, f"lbu t1, {Reg.SCR}(t0)"),
                                         ("mtimecmp", cmp, "sd t2, 0(t0)"))}
        r = measure(kernel, fs, cpus, reps, idle_seconds, spin, floor, minpath, csr, mmio,
                    progress)
    med = {k: statistics.median(v) for k, v in r.items() if v}
    return {"reps": reps, "idle_seconds": idle_seconds, "cpus": cpus, "median": med, "runs": r}


def format_report(data: dict[str, Any]) -> str:
    """The table `harness bench system` prints: one column per hart count."""
    reps, idle_seconds, med, cpus = data["reps"], data["idle_seconds"], data["median"], data["cpus"]
    bar = "{s:{c}^{n}}".format
    cols = "".join(f"{f'{n} hart' + ('s' if n > 1 else ''):>10}" for n in cpus)

    def row(label: str, key: str, fmt: str = "{:>10.2f}") -> str:
        return f"{label:<36}" + "".join(fmt.format(med[f"{key}_{n}"]) if f"{key}_{n}" in med
                                        else f"{'-':>10}" for n in cpus)

    w = 36 + 10 * len(cpus)
    base_label = f"{cpus[0]} hart{'s' if cpus[0] > 1 else ''}"
    lines = [bar(s=" harness bench system ", n=w, c="="),
             _row("Repetitions (interleaved, medians)", reps, "{:<10d}"),
             f"{'':<36}{cols}",
             bar(s=" Boot ", n=w, c="-"),
             row("Boot to shell prompt (ms)", "boot_ms"),
             row("  kernel's own boot to /init (ms)", "kernel_boot_ms"),
             bar(s=" CPU (one sysbench cpu per hart) ", n=w, c="-"),
             row("Guest MIPS per hart", "guest_mips_per_hart"),
             row("Guest MIPS in total", "guest_mips_total"),
             _row("Bare Unicorn MIPS, same loop", med["raw_mips"]),
             _row(f"Ratio guest / bare ({cpus[0]} hart{'s' if cpus[0] > 1 else ''})",
                  med["guest_over_bare"]),
             bar(s=" System calls, switches, IPIs ", n=w, c="-"),
             row("Syscall round trip, getpid (us)", "syscall_us"),
             _row("Trap floor, no kernel, C (us)", med["floor_us"]),
             _row("Trap floor, no kernel, Python (us)", med["floor_py_us"]),
             _row("Ratio getpid / C trap floor", med["syscall_over_floor"]),
             _row("Minimal kernel path, stub (us)", med["minpath_us"]),
             _row("Ratio minimal path / C trap floor", med["minpath_over_floor"]),
             _row("CSR instruction, bare Unicorn (ns)", med["csr_ns"]),
             _row("  in plain instructions of the loop", med["csr_in_insns"], "{:<10.0f}"),
             row("fork + exit + wait (us)", "fork_us"),
             row("pipe to a child (KiB/s)", "pipe_kib_s", "{:>10.0f}"),
             row("pingpong round trip (us)", "pingpong_us"),
             row("IPI wake-up, store to run (us)", "ipi_wake_us"),
             bar(s=f" Python traps, {base_label} (HARNESS_TRAPS=python) ", n=w, c="-"),
             _row("Syscall round trip, getpid (us)", med["syscall_py_us"]),
             _row("fork + exit + wait (us)", med["fork_py_us"]),
             _row("Ratio Python / C: trap floor", med["floor_py_over_c"]),
             _row("Ratio Python / C: getpid", med["syscall_py_over_c"]),
             _row("Ratio Python / C: fork", med["fork_py_over_c"]),
             bar(s=f" MMIO, {base_label} (C bus / Python bus, HARNESS_TRAPS=python) ", n=w,
                 c="-"),
             _row("UART LSR load, C register (us)", med["mmio_lsr_c_us"]),
             _row("UART SCR load, Python device (us)", med["mmio_scr_c_us"]),
             _row("UART LSR load, Python bus (us)", med["mmio_lsr_python_us"]),
             _row("UART SCR load, Python bus (us)", med["mmio_scr_python_us"]),
             _row("CLINT mtimecmp store, C register (us)", med["mmio_mtimecmp_c_us"]),
             _row("CLINT mtimecmp store, Python bus (us)", med["mmio_mtimecmp_python_us"]),
             _row("Console output, C bus (KiB/s)", med["console_c_kib_s"], "{:<10.0f}"),
             _row("Console output, Python bus (KiB/s)", med["console_python_kib_s"],
                  "{:<10.0f}"),
             bar(s=" Idle ", n=w, c="-"),
             row(f"Host CPU at the prompt, {idle_seconds:g} s (%)", "idle_cpu_percent"),
             _row("  target (% of one core)", 2.0),
             "=" * w]
    return "\n".join(lines)
