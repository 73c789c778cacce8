"""`harness bench system`: how fast the machine runs our kernel, against same-run references.

Measured, interleaved `--reps` times, medians reported:

    boot to prompt      fresh machine (ELF load, disk image) until the shell prints "$ "
    guest MIPS          `sysbench cpu` (a hand-written 8-instruction user loop, timer on)
      reference         the same loop on a bare Unicorn (no machine, no kernel, no hooks)
    syscall round trip  `sysbench getpid` (U -> kernel -> U through our trap delivery)
      reference         an ecall loop on the machine with a 5-instruction S handler and
                        no kernel: the floor set by the harness's Python trap delivery
    idle host CPU       an interactive guest sitting at the prompt for --idle-seconds
                        (target: under 2 % of one core)

The references use stubs assembled with the cross compiler on the fly.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click
from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, UC_PROT_ALL, Uc
from unicorn import riscv_const as R

from harness.cmd_run import DEFAULT_FS, DEFAULT_KERNEL, _file
from harness.elf import ElfImage
from harness.launch import Launch, launch
from harness.machine import Exit, Machine, MachineConfig

LOOPS = 50_000_000       # sysbench cpu iterations (8 instructions each)
GETPIDS = 20_000
FLOOR_ECALLS = 50_000
PROMPT = b"$ "

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
  li t0, 0x100000
  li t1, 0x5555
  sw t1, 0(t0)
2: j 2b
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
        raise click.ClickException(f"cannot assemble the reference stubs with {cc}: {e}") from None
    return ElfImage.load(out)


def raw_mips(spin: ElfImage, loops: int) -> float:
    """The spin loop on a bare Unicorn: the speed ceiling for this host."""
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(0x8000_0000, 1 << 20, UC_PROT_ALL)
    for seg in spin.segments:
        uc.mem_write(seg.paddr, seg.data)
    uc.reg_write(R.UC_RISCV_REG_A0, loops)
    t = time.perf_counter()
    uc.emu_start(spin.entry, spin.symbol("done"))
    return loops * 8 / (time.perf_counter() - t) / 1e6


def floor_trap_us(floor: ElfImage) -> float:
    """µs per ecall round trip on the machine without a kernel."""
    m = Launch(MachineConfig(kernel=floor.path)).machine
    try:
        t = time.perf_counter()
        res = m.run()
        dt = time.perf_counter() - t
    finally:
        m.close()
    if res.exit != Exit.POWEROFF:
        raise click.ClickException(f"the trap floor stub failed: {res.exit.value} {res.message}")
    return dt / FLOOR_ECALLS * 1e6


def guest(kernel: Path, fs: Path, cmd: str, timeout: float = 300) -> str:
    """Run commands in the guest; its console output."""
    res = launch(MachineConfig(kernel=kernel, fs=fs, cmd=cmd, timeout=timeout))
    if not res.ok:
        raise click.ClickException(f"'{cmd}' failed in the guest ({res.exit.value} "
                                   f"{res.status} {res.message}):\n{res.output[-500:]}")
    return res.output


def _field(text: str, key: str) -> float:
    m = re.search(rf"{key}=([0-9.]+)", text)
    if not m:
        raise click.ClickException(f"no {key}= in the guest output:\n{text[-500:]}")
    return float(m.group(1))


def interactive(kernel: Path, fs: Path, at_prompt: Callable[[Machine, float], None]) -> None:
    """Boot to the prompt on a worker thread, call at_prompt(machine, seconds to prompt),
    then quit."""
    seen = bytearray()
    ready = threading.Event()

    def hook(data: bytes) -> None:
        seen.extend(data)
        if not ready.is_set() and PROMPT in seen:
            ready.set()

    t0 = time.perf_counter()
    m = Launch(MachineConfig(kernel=kernel, fs=fs, timeout=600), echo=hook).machine
    worker = threading.Thread(target=m.run, name="bench-guest", daemon=True)
    worker.start()
    try:
        if not ready.wait(60):
            raise click.ClickException("the guest did not reach the shell prompt within 60 s")
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


@click.command()
@click.option("--reps", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Interleaved repetitions of every measurement (medians are reported).")
@click.option("--idle-seconds", type=click.FloatRange(0.5, 600), default=5.0,
              show_default=True, help="How long to watch the idle guest's host CPU use.")
@click.option("--kernel", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_KERNEL, show_default="build/kernel/kernel.elf")
@click.option("--fs", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_FS,
              show_default="build/fs.img")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the figures to this JSON file.")
def system(reps: int, idle_seconds: float, kernel: Path, fs: Path,
           json_path: Path | None) -> None:
    """Boot time, syscall round trip, guest MIPS and idle host CPU of the machine."""
    _file("kernel", kernel, "build it with `make build`")
    _file("disk image", fs, "build it with `make build`")
    with tempfile.TemporaryDirectory(prefix="bench-system-") as tmp:
        spin = _assemble(SPIN_S, "spin", Path(tmp))
        floor = _assemble(FLOOR_S, "floor", Path(tmp))
        r: dict[str, list[float]] = {k: [] for k in (
            "boot_ms", "kernel_boot_ms", "guest_mips", "raw_mips", "syscall_us", "floor_us")}
        with click.progressbar(range(reps), label="measuring", file=sys.stderr) as bar:
            for _ in bar:
                r["raw_mips"].append(raw_mips(spin, LOOPS))
                r["guest_mips"].append(_field(guest(kernel, fs, f"sysbench cpu {LOOPS}"), "mips"))
                r["floor_us"].append(floor_trap_us(floor))
                r["syscall_us"].append(_field(guest(kernel, fs, f"sysbench getpid {GETPIDS}"),
                                              "per_call_us"))

                def booted(m: Machine, seconds: float) -> None:
                    r["boot_ms"].append(seconds * 1e3)
                    k = re.search(rb"boot\s+(\d+) ms", bytes(m.console_tail))
                    if k:
                        r["kernel_boot_ms"].append(float(k.group(1)))

                interactive(kernel, fs, booted)
        idle: list[float] = []
        interactive(kernel, fs, lambda m, s: idle.append(idle_cpu_percent(m, idle_seconds)))

    # ratios are taken within each repetition (the two runs were back to back), then the
    # median: on a busy host that is steadier than a ratio of medians
    r["guest_over_bare"] = [g / b for g, b in zip(r["guest_mips"], r["raw_mips"], strict=True)]
    r["syscall_over_floor"] = [s / f for s, f in zip(r["syscall_us"], r["floor_us"], strict=True)]
    med = {k: statistics.median(v) for k, v in r.items() if v}
    med["idle_cpu_percent"] = idle[0]
    lines = ["{s:{c}^{n}}".format(s=" harness bench system ", n=50, c="="),
             _row("Repetitions (interleaved, medians)", reps, "{:<10d}"),
             "{s:{c}^{n}}".format(s=" Boot ", n=50, c="-"),
             _row("Boot to shell prompt (ms)", med["boot_ms"])]
    if "kernel_boot_ms" in med:
        lines.append(_row("  kernel's own boot to /init (ms)", med["kernel_boot_ms"]))
    lines += ["{s:{c}^{n}}".format(s=" CPU ", n=50, c="-"),
              _row("Guest MIPS (sysbench cpu)", med["guest_mips"]),
              _row("Bare Unicorn MIPS, same loop", med["raw_mips"]),
              _row("Ratio guest / bare (median of reps)", med["guest_over_bare"]),
              "{s:{c}^{n}}".format(s=" System calls ", n=50, c="-"),
              _row("Syscall round trip, getpid (us)", med["syscall_us"]),
              _row("Trap floor, no kernel (us)", med["floor_us"]),
              _row("Ratio syscall / floor (median of reps)", med["syscall_over_floor"]),
              "{s:{c}^{n}}".format(s=" Idle ", n=50, c="-"),
              _row(f"Host CPU at the prompt, {idle_seconds:g} s (%)", med["idle_cpu_percent"]),
              _row("  target (% of one core)", 2.0),
              "=" * 50]
    click.echo("\n".join(lines))
    if json_path:
        data = {"reps": reps, "idle_seconds": idle_seconds, "median": med, "runs": r}
        json_path.write_text(json.dumps(data, indent=2) + "\n")
