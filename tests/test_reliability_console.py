"""The console never doubles or drops a byte, however often the machine is stopped.

The bug this pins down: `cat` printed "rreqid" / "baatch" now and then. A stop from the
waker thread that landed right after a UART THR write made Unicorn restart the store; the
bus armed a replay for it, but the pending interrupt (the reason for the stop) ran first,
its handler's own MMIO access was stopped and restarted too, and that replaced the armed
one, so the THR store really ran twice. harness/machine/bus.py now completes a restarted MMIO
instruction at the stop itself. Here the real kernel prints a long known text through
`cat` (consolewrite runs with interrupts on, and the timer preempts it) while a host thread
posts events as fast as it can, and the output must equal the text byte for byte.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import guest
import pytest

from harness.disk.fsbuild import build_image
from harness.machine.board import Machine
from harness.machine.config import Exit, MachineConfig

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
UBUILD = ROOT / "build" / "user"


def _text(lines: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz     "
    return "".join(f"line {i:05d} " + "".join(rng.choice(letters) for _ in range(60)) + "\n"
                   for i in range(lines)).encode()


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    if not KERNEL.exists() or not (UBUILD / "_cat").exists():
        pytest.skip("the kernel and user programs are not built (make build)")
    text = _text(3000)  # long enough to be stopped often on the C bus too
    files: dict[str, str | Path | bytes] = {p.name[1:]: p for p in UBUILD.glob("_*")
                                            if p.is_file()}
    files["big.txt"] = text
    img = tmp_path_factory.mktemp("console") / "fs.img"
    build_image(img, files, size_blocks=8192, ninodes=512)
    return img, text


def _cat_under_storm(img: Path, gap_s: float) -> tuple[bytes, Machine]:
    out = bytearray()
    m = Machine(MachineConfig(kernel=KERNEL, fs=img, cmd="cat /big.txt", timeout=120,
                              output=out.extend, cpus=guest.CPUS))
    done = threading.Event()

    def storm() -> None:
        while not done.is_set():
            m.post(lambda: None)
            time.sleep(gap_s)

    t = threading.Thread(target=storm, daemon=True)
    t.start()
    try:
        r = m.run()
    finally:
        done.set()
        t.join()
        m.close()
    assert r.exit == Exit.POWEROFF and r.status == 0, r.message
    return bytes(out).replace(b"\r\n", b"\n"), m


@pytest.mark.parametrize("gap_us", [20, 200])
def test_cat_output_is_exact_under_a_storm_of_stops(image, gap_us: int) -> None:
    img, text = image
    got, m = _cat_under_storm(img, gap_us / 1e6)
    start = got.find(b"line 00000 ")
    assert start >= 0, got[-2000:]
    body = got[start : start + len(text)]
    if body != text:
        k = next(i for i, (a, b) in enumerate(zip(body, text, strict=False)) if a != b)
        raise AssertionError(f"console output differs at byte {k}: got {body[k-20:k+20]!r}, "
                             f"want {text[k-20:k+20]!r}")
    # the storm really stopped the guest often (the 200 us storm posts fewer events when the
    # host is busy: 193 stops once with a second test run beside CI)
    assert m.stats.runs > (200 if gap_us < 100 else 100)
    assert m.bus.replayed > 0          # and some stops landed on an MMIO access
