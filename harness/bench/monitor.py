"""`harness bench monitor`: what watching costs: TPOT and guest MIPS with and without
`harness top` attached (harness/monitor/).

Each round boots the same guest twice, once plain and once with a Monitor serving its
socket to a connected reader (the order alternates between rounds, so a load change on
the host hits both alike); the figures are medians over rounds, the ratio of the
medians and the median of the per-round ratios. TPOT is `llmrun --timing`'s (one
request, SmolLM2, greedy), MIPS is `sysbench cpu`'s; the machine is shared, so only the
ratios mean anything.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

from harness.bench.errors import BenchError
from harness.bench.system import _field
from harness.machine.board import Machine
from harness.monitor.feed import Monitor
from harness.monitor.view import stream
from harness.run.hostapi import AiSession, parse_llmrun
from harness.run.launch import Launch

PROMPT = [504, 3575, 282, 4649, 314, 3543, 282, 1342]


def _reader(path: Path, got: list[int]) -> None:
    """A viewer: takes every snapshot off the socket (what `harness top` receives)."""
    try:
        for _ in stream(path):
            got[0] += 1
    except OSError:
        pass


def one_run(session: AiSession, cmd: str, watched: bool,
            period: float) -> tuple[str, int, float, float]:
    """Boot, run cmd, power off; (console output, snapshots the reader received,
    emulation-thread seconds spent in snapshots, wall seconds of the run)."""
    config = session.config(cmd, timeout=600, output=None, created=[])
    boot = Launch(config)
    got = [0]
    mon: Monitor | None = None
    if watched:
        mon = Monitor(boot.machine, period=period)
        assert mon.path is not None
        threading.Thread(target=_reader, args=(mon.path, got), daemon=True).start()

    def stop(_m: Machine) -> None:
        if mon is not None:
            mon.close()

    run = boot.run(before_close=stop)
    if not run.ok:
        raise BenchError(f"'{cmd}' failed in the guest ({run.exit.value}):\n"
                                   f"{run.output[-800:]}")
    if mon is not None and mon.error:
        raise BenchError(f"the monitor failed: {mon.error}")
    return run.output, got[0], mon.snap_s if mon else 0.0, run.wall_s


def cost_report(rounds: int, predict: int, loops: int, period: float) -> list[str]:
    """TPOT and guest MIPS with and without the monitor attached: the report's lines."""
    out: list[str] = []
    tpot: dict[bool, list[float]] = {False: [], True: []}
    mips: dict[bool, list[float]] = {False: [], True: []}
    snaps = 0
    snap_s = wall_s = 0.0
    llm = f"llmrun --timing --predict {predict} " + " ".join(map(str, PROMPT))
    with AiSession("smol") as s:
        for r in range(rounds):
            for watched in ((False, True) if r % 2 == 0 else (True, False)):
                out, n, sn, w = one_run(s, llm, watched, period)
                tpot[watched].append(parse_llmrun(out)[0].timing["tpot_us"] / 1e3)
                out2, n2, sn2, w2 = one_run(s, f"sysbench cpu {loops}", watched, period)
                mips[watched].append(_field(out2, "mips"))
                snaps += n + n2
                if watched:
                    snap_s, wall_s = snap_s + sn + sn2, wall_s + w + w2
    t0, t1 = statistics.median(tpot[False]), statistics.median(tpot[True])
    m0, m1 = statistics.median(mips[False]), statistics.median(mips[True])
    rt = statistics.median(b / a for a, b in zip(tpot[False], tpot[True], strict=True))
    rm = statistics.median(b / a for a, b in zip(mips[False], mips[True], strict=True))
    out.append(f"monitor cost, {rounds} interleaved rounds, snapshot every {period:g} s "
               f"({snaps} snapshots read by the attached viewer); medians:")
    out.append(f"  TPOT (ms)        plain {t0:8.2f}   watched {t1:8.2f}   watched/plain "
               f"{t1 / t0:.3f}   per-round median {rt:.3f}")
    out.append(f"  guest MIPS       plain {m0:8.1f}   watched {m1:8.1f}   watched/plain "
               f"{m1 / m0:.3f}   per-round median {rm:.3f}")
    out.append(f"  the emulation thread spent {snap_s * 1e3:.1f} ms of {wall_s:.1f} s in "
               f"snapshots ({100 * snap_s / wall_s:.2f} %), "
               f"{1e3 * snap_s / max(1, snaps):.2f} ms each")
    out.append("  (host shared with other work: only the ratios mean anything)")
    return out
