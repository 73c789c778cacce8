"""Stops from another thread must never change what the guest computes.

The waker thread ends run slices with `uc.emu_stop()` at arbitrary moments. The stress
stub mixes arithmetic, RAM loads/stores, trap deliveries and polled UART input; its
output under a storm of stops (host clock) must equal a run without any (icount clock).
A lost or repeated instruction, trap or MMIO access changes the hash.
"""

from __future__ import annotations

import threading
import time

import pytest
from machine_stubs import Run
from made import CC, stub

from harness.machine.config import Exit

pytestmark = [pytest.mark.skipif(CC is None, reason="needs riscv64-unknown-elf-gcc"),
              pytest.mark.slow]

DATA = bytes((i * 7 + 3) % 251 for i in range(1000))


def test_output_is_identical_under_a_storm_of_stops() -> None:
    elf = stub("stress")
    ref = Run(elf, cmd=str(len(DATA)), clock="icount", timeout=120)
    assert ref.run(lambda m: m.send_input(DATA)).exit == Exit.POWEROFF
    assert f"input {len(DATA)} " in ref.text

    def feed(m):
        for i in range(0, len(DATA), 10):
            m.send_input(DATA[i : i + 10])
            time.sleep(0.0002)

    replayed = 0
    for gap in (0.0, 0.00005, 0.0005):
        r = Run(elf, cmd=str(len(DATA)), timeout=120)
        stop = threading.Event()

        def storm(m=r.machine, gap=gap, stop=stop):
            while not stop.is_set():
                m.post(lambda: None)
                time.sleep(gap)

        t = threading.Thread(target=storm, daemon=True)
        t.start()
        try:
            res = r.run(feed)
        finally:
            stop.set()
            t.join()
        assert res.exit == Exit.POWEROFF, res.message
        assert r.text == ref.text
        assert r.machine.stats.runs > 100  # the storm really did stop the guest often
        replayed += r.machine.bus.replayed
    assert replayed > 0  # some stops landed between an MMIO access and its exit check
