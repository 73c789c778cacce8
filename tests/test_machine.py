"""The machine without our kernel: bare-metal stubs (tests/guest_stubs/) built with the
cross compiler exercise each device, trap path and fault report."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import made
import pytest
from machine_stubs import Run
from made import CC

from harness.devices.base import DeviceContext
from harness.devices.virtio_mmio import Chain, VirtioMmio
from harness.machine.config import Exit
from harness.run.fault_report import format_report

pytestmark = pytest.mark.skipif(CC is None, reason="needs riscv64-unknown-elf-gcc")

STUBS = ["hello", "timer", "uart_rx", "blk", "utraps", "faults", "panic", "dmacode", "async"]


@pytest.fixture(scope="module")
def stub() -> dict[str, Path]:
    return {name: made.stub(name) for name in STUBS}


def test_uart_output_bootinfo_and_exit_status(stub: dict[str, Path]) -> None:
    r = Run(stub["hello"], cmd="echo hi | wc", ram_size=64 << 20)
    res = r.run()
    assert (res.exit, res.status) == (Exit.POWEROFF, 7)
    assert r.text == "hello from the stub\nram 64 MiB, cmd 'echo hi | wc'\n"


@pytest.mark.parametrize("clock", ["host", "icount"])
def test_timer_interrupt_wakes_wfi(stub: dict[str, Path], clock: str) -> None:
    r = Run(stub["timer"], cmd="wfi", clock=clock)
    res = r.run()
    assert (res.exit, r.text) == (Exit.POWEROFF, "ticks 5 ok\n")
    assert r.machine.traps.rdtime >= 6  # rdtime was emulated, not delivered
    if clock == "host":
        # five 10 ms waits in wfi: the host thread slept instead of spinning
        assert r.machine.stats.wfi_sleeps >= 4
        assert r.machine.stats.sleep_s > 0.03


@pytest.mark.parametrize("clock", ["host", "icount"])
def test_timer_interrupt_preempts_a_busy_loop(stub: dict[str, Path], clock: str) -> None:
    r = Run(stub["timer"], cmd="busy", clock=clock)
    res = r.run()
    assert (res.exit, r.text) == (Exit.POWEROFF, "ticks 5 ok\n")
    assert r.machine.stats.wfi_sleeps == 0


def test_icount_clock_is_deterministic(stub: dict[str, Path]) -> None:
    runs = []
    for _ in range(2):
        r = Run(stub["timer"], cmd="busy", clock="icount")
        r.run()
        runs.append((r.text, r.machine.clock.mtime(), r.machine.stats.runs))
    assert runs[0] == runs[1]


def test_uart_input_through_the_plic(stub: dict[str, Path]) -> None:
    def type_text(m):  # from a host thread, like the console reader
        m.send_input(b"hello, ")
        time.sleep(0.02)
        m.send_input(b"world.")

    r = Run(stub["uart_rx"])
    res = r.run(type_text)
    assert res.exit == Exit.POWEROFF
    assert r.text == "ready\nHELLO, WORLD.\nclaims>0 yes\n"
    assert r.machine.plic.claims >= 1


def test_masked_expired_timer_does_not_spin_the_wfi_sleep(stub: dict[str, Path]) -> None:
    def type_late(m):
        time.sleep(0.3)
        m.send_input(b"x.")

    r = Run(stub["uart_rx"], cmd="stip")
    res = r.run(type_late)
    assert (res.exit, r.text) == (Exit.POWEROFF, "ready\nX.\nclaims>0 yes\n")
    assert r.machine.clint.level  # STIP was pending (masked) the whole time
    assert r.machine.stats.wfi_sleeps < 20  # one long sleep, not a busy loop
    assert r.machine.stats.sleep_s > 0.2


def _disk(tmp_path: Path) -> Path:
    img = tmp_path / "disk.img"
    img.write_bytes(b"NEXAI-DISK-TEST\n" + bytes(4 * 512 - 16))
    return img


def test_virtio_blk_read_write_in_memory(stub: dict[str, Path], tmp_path: Path) -> None:
    img = _disk(tmp_path)
    before = img.read_bytes()
    r = Run(stub["blk"], fs=img)
    res = r.run()
    assert res.exit == Exit.POWEROFF, res.message
    assert r.text == ("capacity 4\nsector0 NEXAI-DISK-TEST\nreadback ok\nioerr ok\n"
                      "irqs ok\n")
    assert bytes(r.machine.disk.disk[512:532]) == b"written by the stub "
    assert img.read_bytes() == before  # no --persist: the file is untouched
    assert (r.machine.disk.reads, r.machine.disk.writes) == (2, 1)


def test_virtio_blk_persist_writes_the_image(stub: dict[str, Path], tmp_path: Path) -> None:
    img = _disk(tmp_path)
    r = Run(stub["blk"], fs=img, persist=True)
    assert r.run().exit == Exit.POWEROFF
    assert img.read_bytes()[512:532] == b"written by the stub "


def test_dma_replaces_translated_code(stub: dict[str, Path], tmp_path: Path) -> None:
    img = tmp_path / "code.img"  # sector 0: c.li a0,1; ret   sector 1: c.li a0,2; ret
    img.write_bytes(bytes.fromhex("05458280") + bytes(508) + bytes.fromhex("09458280") + bytes(508))
    r = Run(stub["dmacode"], fs=img)
    assert r.run().exit == Exit.POWEROFF
    assert r.text == "code 1 2\n"


@pytest.mark.parametrize("clock", ["host", "icount"])
def test_user_mode_traps_get_scause_sepc_stval(stub: dict[str, Path], clock: str) -> None:
    r = Run(stub["utraps"], clock=clock)
    res = r.run()
    assert res.exit == Exit.POWEROFF, r.text
    # ecall, load/store page faults (also compressed and AMO), illegal (csr, rdtime
    # without scounteren.TM), ebreak and c.ebreak, instruction page fault, ecall
    assert [line.split()[1] for line in r.text.splitlines()] == \
        ["8", "13", "15", "15", "13", "15", "2", "2", "3", "3", "12", "8"]
    assert r.text.count(" ok\n") == 12


@pytest.mark.parametrize("cmd, words", [
    ("uart-offset", ["uart0", "offset 0x8", "unknown register"]),
    ("uart-width", ["uart0", "1-byte"]),
    ("unmapped", ["unmapped physical memory", "0x30000000"]),
    ("plic-context0", ["plic", "context 0"]),
    ("virtio-notify", ["virtio0", "DRIVER_OK"]),
    ("ecall", ["ecall from S-mode", "no SBI"]),
    ("rom", ["read-only", "0x1000"]),
    ("power", ["power", "0x1234"]),
    ("no-stvec", ["illegal instruction", "stvec is not set"]),
])
def test_guest_mistakes_stop_the_machine_with_a_clear_error(
        stub: dict[str, Path], cmd: str, words: list[str]) -> None:
    r = Run(stub["faults"], cmd=cmd)
    m = r.machine
    res = m.run()
    assert res.exit == Exit.FAULT
    for w in words:
        assert w in res.message
    report = format_report(m, res)
    assert report.startswith("=== machine fault: ")
    assert "main+" in report  # the faulting instruction is symbolised to main


def test_kernel_style_panic_report(stub: dict[str, Path]) -> None:
    r = Run(stub["panic"], cmd="plain")
    m = r.machine
    res = m.run()
    assert (res.exit, res.status, res.message) == (Exit.PANIC, 1, "panic: stub test")
    report = format_report(m, res)
    assert report.startswith("=== kernel panic: panic: stub test ===")
    assert "hart 0 in S-mode" in report and "  ra 0x" in report and "s11 0x" in report
    assert "c.sw a5, 0(a4)" in report  # the store to the power device, disassembled
    trace = report.split("backtrace (frame pointers):")[1]
    names = [line.split()[2].split("+")[0] for line in trace.strip().splitlines()]
    assert names == ["panic", "f2", "f1", "main", "_start"]
    assert "panic.c:" in trace


def test_backtrace_crosses_a_trap_frame_record(stub: dict[str, Path]) -> None:
    r = Run(stub["panic"], cmd="trap")
    m = r.machine
    res = m.run()
    report = format_report(m, res)
    assert "last trap: scause 0x2 (illegal instruction)" in report
    trace = report.split("backtrace (frame pointers):")[1]
    # g2 is a leaf stopped by the trap: its caller g1 comes from the ra kvec saved
    assert [line.split()[2].split("+")[0] for line in trace.strip().splitlines()] == \
        ["panic", "ktrap", "kvec", "g2", "g1", "main", "_start"]
    assert "trapped here (sepc)" in trace


def test_power_reset_ends_the_run_for_a_reboot(stub: dict[str, Path]) -> None:
    r = Run(stub["faults"], cmd="reset")
    assert r.run().exit == Exit.RESET


def test_timeout_stops_a_spinning_guest(stub: dict[str, Path]) -> None:
    r = Run(stub["faults"], cmd="spin", timeout=0.3)
    res = r.run()
    assert res.exit == Exit.TIMEOUT and "0.3" in res.message


def test_quit_from_another_thread(stub: dict[str, Path]) -> None:
    r = Run(stub["faults"], cmd="spin")
    res = r.run(lambda m: (time.sleep(0.05), m.request_quit("bye")))
    assert (res.exit, res.message) == (Exit.QUIT, "bye")


def test_posted_events_run_on_the_emulation_thread(stub: dict[str, Path]) -> None:
    r = Run(stub["faults"], cmd="spin")
    seen: list[threading.Thread] = []

    def poster(m):
        m.post(lambda: seen.append(threading.current_thread()))
        time.sleep(0.05)
        m.request_quit()

    r.run(poster)
    assert seen == [threading.main_thread()]


class EchoDevice(VirtioMmio):
    """Upper-cases each request on a host thread 50 ms later (the AI device's pattern)."""

    device_id = 0xFFFE  # test-only

    def __init__(self, name: str, ctx: DeviceContext) -> None:
        super().__init__(name, ctx)
        self.threads: list[threading.Thread] = []

    def handle(self, queue: int, chain: Chain) -> None:
        text = self.gather(chain.readable).upper()

        def work() -> None:  # a host thread: it must not touch guest memory itself
            time.sleep(0.05)
            self.ctx.post(lambda: self.complete(queue, chain.head,
                                                self.scatter(chain.writable, text)))

        t = threading.Thread(target=work, daemon=True)
        t.start()
        self.threads.append(t)
        return None  # completed later


def test_device_completing_on_a_host_thread_wakes_the_guest(stub: dict[str, Path]) -> None:
    devs: list[EchoDevice] = []

    def factory(name: str, ctx: DeviceContext) -> EchoDevice:
        devs.append(EchoDevice(name, ctx))
        return devs[-1]

    r = Run(stub["async"], extra_devices=[("echo", "VIRTIO1", factory, "VIRTIO1_IRQ")])
    res = r.run()
    assert res.exit == Exit.POWEROFF, res.message
    assert r.text == "HELLO ASYNC (waited)\nSECOND REQUEST (waited)\nirqs ok\n"
    assert r.machine.stats.wfi_sleeps >= 2 and r.machine.stats.sleep_s > 0.05
    assert devs[0].completed == 2
