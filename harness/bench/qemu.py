"""The QEMU bench (`harness bench qemu --xv6 PATH`): our machine against xv6-riscv on QEMU
(TCG, `-smp 1`), in one run, alternating the two machines every repetition.

    micro-benchmarks   user_c/xv6/xv6bench.c, built for both from the same source: getpid,
                       fork + exit + wait, a pipe ping-pong, fork + exec + wait; each loop
                       timed from the host between the console lines "@@ begin MODE N" and
                       "@@ end MODE N" (xv6's clock ticks every 100 ms); `null` pairs, with
                       no work between, measure what the markers themselves cost
    xv6's usertests    the checkout's user/usertests.c, driven test by test by
                       user_c/xv6/xv6ut.c (its own main stops at the first failure), on xv6
                       in QEMU and, compiled against our user library, on our kernel:
                       pass/fail per test per machine, and the time of the tests that pass on
                       both (per test, and in total)
    our usertests      our own full `usertests` (build/fs.img) on our machine, for the
                       issue-19 target beside the others

Our machine runs with 1 hart (and the default, C trap path); QEMU boots the checkout's
kernel/kernel with its Makefile's options (`-machine virt -bios none -m 128M -nographic`,
the virtio disk) but one CPU. A test that crashes or hangs a machine is recorded and the
machine rebooted for the tests after it. Ratios are us / QEMU, taken within each
repetition, then the median (steadier than a ratio of medians on a loaded host).
"""

from __future__ import annotations

import bisect
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import xv6build
from harness.bench.errors import BenchError
from harness.bench.stats import ratio
from harness.bench.system import FORKS, GETPIDS
from harness.machine.config import MachineConfig
from harness.run.launch import launch

QEMU = "qemu-system-riscv64"
# (mode, iterations), the same on both machines: each loop lasts many timer ticks on ours,
# because our console's bytes reach the host at the end of a run slice, up to a timer tick
# (TICK_HZ) after the guest wrote them, while QEMU's arrive at once (the `null` row shows
# it): a stamp late by up to a tick is then a small share of a loop.
ITERS: dict[str, int] = {"getpid": 400_000, "fork": 10_000, "pingpong": 40_000, "exec": 3_000}
# our console reaches the host at run-slice ends (up to a timer tick late): a loop
# shorter than this on ours gives no figure ("-", its target "not measured")
RESOLVE_S = 0.02
NULL_PAIRS = 20
# `harness bench system`'s own figures, timed by the guest (time_us), in the same boot
SYSBENCH = (("getpid", GETPIDS, "per_call_us"), ("fork", FORKS, "per_fork_us"))
XV6_SH_LINE = 99   # xv6's sh reads 100-byte lines (getcmd's buf), newline included
XV6_SH_ARGS = 8    # and fewer than MAXARGS (10) words, the program's name included
MARK = re.compile(rb"@@ (begin|end) (\S+) (\S+)(?: (\S+))?\r?\n")
PROMPT = b"$ "     # xv6's sh; the next one after a typed line ends that line's run
PANIC = re.compile(rb"(?:^|\n)panic: ")  # xv6's kernel panic() line (then it spins)
STOP_MARK = b"@@ stop"  # xv6ut after a failed test: the rest of this boot's lines are skipped
# issue 19's targets: (label, row, limit, kind): "ratio" is us / QEMU, "abs" our own figure
TARGETS = (("getpid round trip <= 0.12x QEMU's xv6", "getpid", 0.12, "ratio"),
           ("xv6-style usertests <= 0.2x QEMU's time", "xv6_usertests", 0.2, "ratio"),
           ("getpid round trip <= 3 us", "getpid", 3.0, "abs"),
           ("fork + exit + wait <= 200 us", "fork", 200.0, "abs"),
           ("our full usertests <= 20 s", "own_usertests", 20.0, "abs"))


# ---------------------------------------------------------------- console stamps
class Stamped:
    """A console sink that keeps every chunk with the host time it arrived."""

    def __init__(self) -> None:
        self.chunks: list[tuple[float, bytes]] = []
        self.buf = bytearray()  # the chunks joined (QEMU's arrive byte by byte)
        self.cond = threading.Condition()

    def __call__(self, data: bytes) -> None:
        with self.cond:
            self.chunks.append((time.perf_counter(), bytes(data)))
            self.buf += data
            self.cond.notify_all()

    def data(self) -> bytes:
        with self.cond:
            return bytes(self.buf)


@dataclass(frozen=True)
class Interval:
    """One marked loop or test: begin/end lines of the same kind and argument."""

    kind: str               # "getpid", "null", "test", ...
    arg: str                # the iteration count, or the test's name
    seconds: float          # nan when the end line never came (a crash or a hang)
    status: str             # the end line's last word ("ok", "fail"), "" if none
    output: str             # the console text between the two lines


def intervals(chunks: list[tuple[float, bytes]]) -> list[Interval]:
    """The marked intervals of a stamped console, in order. A begin line's time is the
    arrival of its newline (the loop starts after printing it), an end line's that of its
    first byte (the loop is over before it prints)."""
    data = b"".join(c for _, c in chunks)
    ends, total = [], 0
    for _, c in chunks:
        total += len(c)
        ends.append(total)

    def at(offset: int) -> float:
        return chunks[bisect.bisect_right(ends, offset)][0]

    out: list[Interval] = []
    open_: tuple[bytes, bytes, float, int] | None = None
    for m in MARK.finditer(data):
        what, kind, arg, status = m.group(1), m.group(2), m.group(3), m.group(4) or b""
        if what == b"begin":
            if open_ is not None:  # a begin without its end: the machine went on without it
                out.append(_unended(open_, data[open_[3]:m.start()]))
            open_ = (kind, arg, at(m.end() - 1), m.end())
        elif open_ is not None and (kind, arg) == open_[:2]:
            out.append(Interval(kind.decode(), arg.decode(), at(m.start()) - open_[2],
                                status.decode(), data[open_[3]:m.start()].decode(
                                    errors="replace")))
            open_ = None
    if open_ is not None:
        out.append(_unended(open_, data[open_[3]:]))
    return out


def _unended(open_: tuple[bytes, bytes, float, int], rest: bytes) -> Interval:
    return Interval(open_[0].decode(), open_[1].decode(), math.nan, "",
                    rest.decode(errors="replace"))


def command_lines(program: str, args: list[str]) -> list[str]:
    """`program` with `args` split into lines xv6's sh can read (XV6_SH_LINE bytes,
    XV6_SH_ARGS arguments)."""
    lines: list[str] = []
    cur: list[str] = []
    for a in args:
        if cur and (len(cur) == XV6_SH_ARGS or len(" ".join([program, *cur, a])) > XV6_SH_LINE):
            lines.append(" ".join([program, *cur]))
            cur = []
        cur.append(a)
    if cur:
        lines.append(" ".join([program, *cur]))
    return lines


# ---------------------------------------------------------------- the two machines
@dataclass(frozen=True)
class Boot:
    """What one boot printed, and how it ended ("ok", or why not)."""

    console: Stamped
    end: str

    @property
    def text(self) -> str:
        return self.console.data().decode(errors="replace")


Session = Callable[[list[str]], Boot]


def qemu_options(makefile: str) -> list[str]:
    """-m as the checkout's Makefile gives it (QEMUOPTS), 128M if it says nothing."""
    m = re.search(r"^QEMUOPTS\s*=.*?-m\s+(\S+)", makefile, re.M)
    return ["-m", m.group(1) if m else "128M"]


def qemu_session(qemu: str, kernel: Path, fs: Path, timeout: float,
                 work: Path) -> Session:
    """Boots xv6 on QEMU (a fresh copy of fs each time) and types the lines into its
    shell one by one, each after the prompt that follows the last one's output; a line
    that printed STOP_MARK ends the boot."""
    mem = qemu_options((kernel.parent.parent / "Makefile").read_text())

    def session(lines: list[str]) -> Boot:
        fd_, name = tempfile.mkstemp(prefix="qemu-", suffix=".img", dir=work)
        os.close(fd_)
        disk = Path(name)
        shutil.copy(fs, disk)
        cmd = [qemu, "-machine", "virt", "-bios", "none", "-kernel", str(kernel), *mem,
               "-smp", "1", "-nographic", "-global", "virtio-mmio.force-legacy=false",
               "-drive", f"file={disk},if=none,format=raw,id=x0",
               "-device", "virtio-blk-device,drive=x0,bus=virtio-mmio-bus.0"]
        st = Stamped()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        assert p.stdin is not None and p.stdout is not None
        fd = p.stdout.fileno()

        def reader() -> None:
            while chunk := os.read(fd, 65536):
                st(chunk)
            with st.cond:
                st.cond.notify_all()

        t = threading.Thread(target=reader, name="qemu-console", daemon=True)
        t.start()
        try:
            end = _wait(st, p, PROMPT, 0, 60)
            for line in lines:
                if end != "ok":
                    break
                start = len(st.data())
                p.stdin.write(line.encode() + b"\n")
                p.stdin.flush()
                end = _wait(st, p, b"\n" + PROMPT, start, timeout)
                if end == "ok" and STOP_MARK in st.data()[start:]:
                    break
            return Boot(st, end)
        finally:
            p.kill()
            p.wait()
            t.join(5)
            disk.unlink(missing_ok=True)

    return session


def _wait(st: Stamped, p: subprocess.Popen[bytes], mark: bytes, start: int,
          timeout: float) -> str:
    """Wait until the console shows `mark` after byte `start`: "ok", or "panic",
    "timeout", "qemu exited"."""
    deadline = time.monotonic() + timeout
    with st.cond:
        while True:
            if st.buf.find(mark, start) >= 0:
                return "ok"
            if PANIC.search(st.buf, start):
                return "panic"
            if p.poll() is not None:
                return f"qemu exited ({p.returncode})"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            st.cond.wait(min(left, 1.0))


def ours_session(kernel: Path, fs: Path, timeout: float) -> Session:
    """Boots our kernel on `fs` (1 hart; disk writes are not kept) and runs the lines as
    `harness run -c` would, each only if the one before succeeded (&&)."""

    def session(lines: list[str]) -> Boot:
        st = Stamped()
        res = launch(MachineConfig(kernel=kernel, fs=fs, cmd=" && ".join(lines),
                                   timeout=timeout * len(lines), cpus=1), echo=st)
        end = "ok" if res.ok else f"{res.exit.value} {res.status} {res.message}".strip()
        return Boot(st, end)

    return session


# ---------------------------------------------------------------- measurements
@dataclass
class TestResult:
    """One xv6 usertest on one machine in one repetition."""

    ok: bool
    seconds: float   # nan when it never ended
    detail: str      # "" when it passed; else the end of its output and how the run ended


def micro(session: Session, iters: dict[str, int], ours: bool) -> dict[str, float]:
    """µs per iteration of each xv6bench mode (and, on ours, sysbench's own figures on the
    guest's clock); "null" is ms per marker pair (the median)."""
    lines = [f"xv6bench null {NULL_PAIRS}"] + [f"xv6bench {k} {n}" for k, n in iters.items()]
    if ours:
        lines += [f"sysbench {k} {n}" for k, n, _ in SYSBENCH]
    boot = session(lines)
    if boot.end != "ok":
        raise BenchError(f"xv6bench failed ({boot.end}):\n{boot.text[-600:]}")
    ivs = intervals(boot.console.chunks)
    out: dict[str, float] = {}
    nulls = [i.seconds for i in ivs if i.kind == "null"]
    if nulls:
        out["null"] = statistics.median(nulls) * 1e3
    for i in ivs:
        if i.kind in iters:
            out[i.kind] = i.seconds / int(i.arg) * 1e6
    missing = [k for k in ["null", *iters] if k not in out or math.isnan(out[k])]
    if missing:
        raise BenchError(f"xv6bench printed no figure for {', '.join(missing)}:\n"
                         f"{boot.text[-600:]}")
    for k, n in iters.items() if ours else ():
        if out[k] * n / 1e6 < RESOLVE_S:  # both lines in one slice's output: no figure
            out[k] = math.nan
    if ours:
        for k, _, key in SYSBENCH:
            m = re.search(rf"{key}=([0-9.]+)", boot.text)
            if m:
                out[f"sysbench_{k}"] = float(m.group(1))
    return out


def usertests(session: Session, names: list[str]) -> dict[str, TestResult]:
    """Every named test on one machine: boots until each has run once (a test that
    crashes or hangs the machine is recorded as failed, and the next boot starts after
    it)."""
    results: dict[str, TestResult] = {}
    remaining = list(names)
    while remaining:
        boot = session(command_lines("xv6ut", remaining))
        ran = [i for i in intervals(boot.console.chunks) if i.kind == "test" and i.arg in remaining]
        for i in ran:
            ended = not math.isnan(i.seconds)
            ok = ended and i.status == "ok"
            detail = "" if ok else _tail(i.output) + ("" if ended else f" [machine: {boot.end}]")
            results[i.arg] = TestResult(ok, i.seconds, detail)
        # after a failure the boot stopped (xv6ut's "@@ stop"): the next starts after it;
        # a test before the last one that ran and did not run was skipped by the shell
        last = remaining.index(ran[-1].arg) if ran else -1
        for n in remaining[:last + 1]:
            results.setdefault(n, TestResult(False, math.nan, f"not run: {_tail(boot.text)}"))
        left = remaining[last + 1:]
        stopped = STOP_MARK in boot.console.data()
        if not ran or (boot.end == "ok" and not stopped):  # no progress, or tests skipped
            for n in left:
                results[n] = TestResult(False, math.nan, f"not run [machine: {boot.end}] "
                                        + _tail(boot.text))
            left = []
        remaining = left
    return results


def _tail(text: str, n: int = 240) -> str:
    text = re.sub(r" {4,}", " ", text.replace("\r", "")).strip()  # bigargtest's long args
    return text if len(text) <= n else "..." + text[-n:]


def own_usertests(kernel: Path, fs: Path, timeout: float) -> tuple[float, str]:
    """Seconds of our own full `usertests` on our machine (1 hart), and "ok" or why not."""
    boot = ours_session(kernel, fs, timeout)(
        ["echo @@ begin own usertests; usertests; echo @@ end own usertests"])
    ivs = [i for i in intervals(boot.console.chunks) if i.kind == "own"]
    if not ivs or math.isnan(ivs[0].seconds):
        return math.nan, f"did not finish [machine: {boot.end}] {_tail(boot.text)}"
    m = re.search(r"SOME TESTS FAILED.*", ivs[0].output)
    return ivs[0].seconds, "ok" if "ALL TESTS PASSED" in ivs[0].output else (
        m.group(0) if m else _tail(ivs[0].output))


@dataclass
class Options:
    xv6: Path
    kernel: Path          # ours
    fs: Path              # ours, for our own usertests
    reps: int = 3
    ut_reps: int = 1
    tests: list[str] | None = None   # None: all of quicktests[] and slowtests[]
    quick: bool = False              # leave slowtests[] out
    iters: dict[str, int] = field(default_factory=lambda: dict(ITERS))
    timeout: float = 900.0           # seconds per command line
    own: bool = True                 # run our own usertests too
    qemu: str = QEMU


def find_qemu(name: str = QEMU) -> str:
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"{name} is not installed (apt-get install qemu-system-misc)")
    return path


def run(opts: Options, say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Everything, alternating the machines every repetition: the report's data (see
    format_report, write)."""
    qemu = find_qemu(opts.qemu)
    version = subprocess.run([qemu, "--version"], capture_output=True, text=True
                             ).stdout.split("\n")[0]
    xv6build.check_checkout(opts.xv6)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-qemu-") as tmp:
        work = Path(tmp)
        say(f"building xv6 ({opts.xv6}) and our programs in {work}")
        built = xv6build.build(opts.xv6, work)
        names = opts.tests if opts.tests is not None else (
            built.tests.quick if opts.quick else built.tests.all)
        unknown = [n for n in names if n not in built.tests.all]
        if unknown:
            raise BenchError(f"no such usertests: {', '.join(unknown)} (the checkout has "
                             f"{', '.join(built.tests.all)})")
        machines: dict[str, Session] = {
            "ours": ours_session(opts.kernel, built.our_fs, opts.timeout),
            "qemu": qemu_session(qemu, built.xv6_kernel, built.xv6_fs, opts.timeout, work)}
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "qemu": []}
        for r in range(opts.reps):
            for name in _order(r):
                say(f"rep {r + 1}/{opts.reps}: micro-benchmarks on {name}")
                runs[name].append(micro(machines[name], opts.iters, name == "ours"))
        tests: dict[str, list[dict[str, TestResult]]] = {"ours": [], "qemu": []}
        own: list[tuple[float, str]] = []
        for r in range(opts.ut_reps if names else 0):
            for name in _order(r):
                say(f"usertests rep {r + 1}/{opts.ut_reps}: {len(names)} xv6 tests on {name}")
                tests[name].append(usertests(machines[name], names))
            if opts.own:
                say(f"usertests rep {r + 1}/{opts.ut_reps}: our own usertests on ours")
                own.append(own_usertests(opts.kernel, opts.fs, opts.timeout))
    return summarize(opts, runs, tests, own, names, {
        "qemu": version, "xv6": str(opts.xv6), "xv6_commit": _commit(opts.xv6),
        "load_before": list(load0), "load_after": list(os.getloadavg()),
        "host_cpus": os.cpu_count(), "wall_s": time.perf_counter() - t0})


def _order(rep: int) -> tuple[str, str]:
    return ("ours", "qemu") if rep % 2 == 0 else ("qemu", "ours")


def _commit(xv6: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(xv6), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def _med(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def summarize(opts: Options, runs: dict[str, list[dict[str, float]]],
              tests: dict[str, list[dict[str, TestResult]]], own: list[tuple[float, str]],
              names: list[str], env: dict[str, Any]) -> dict[str, Any]:
    """Medians, per-repetition ratios (us / QEMU) and the pass/fail lists."""
    rows: dict[str, dict[str, float]] = {}
    for k in ["null", *opts.iters]:
        o = [d[k] for d in runs["ours"]]
        q = [d[k] for d in runs["qemu"]]
        rows[k] = {"ours": _med(o), "qemu": _med(q),
                   "ratio": _med([ratio(a, b) for a, b in zip(o, q, strict=True)])}
    sysbench = {f"sysbench_{k}": _med([d.get(f"sysbench_{k}", math.nan) for d in runs["ours"]])
                for k, _, _ in SYSBENCH}
    per_test: dict[str, dict[str, Any]] = {}
    for n in names if tests["ours"] and tests["qemu"] else []:  # --ut-reps 0: none
        row: dict[str, Any] = {}
        for m in ("ours", "qemu"):
            rs = [t[n] for t in tests[m]]
            row[m] = {"ok": all(r.ok for r in rs) if rs else False,
                      "seconds": _med([r.seconds for r in rs]),
                      "detail": next((r.detail for r in rs if not r.ok), "")}
        per_test[n] = row
    both = [n for n, t in per_test.items() if t["ours"]["ok"] and t["qemu"]["ok"]]
    if both and tests["ours"]:
        tot = {m: [sum(t[n].seconds for n in both) for t in tests[m]] for m in ("ours", "qemu")}
        rows["xv6_usertests"] = {
            "ours": _med(tot["ours"]), "qemu": _med(tot["qemu"]),
            "ratio": _med([ratio(a, b) for a, b in zip(tot["ours"], tot["qemu"], strict=True)])}
    if own:
        rows["own_usertests"] = {"ours": _med([s for s, _ in own]), "qemu": math.nan,
                                 "ratio": math.nan}
    targets = []
    for label, key, limit, kind in TARGETS:
        value = rows.get(key, {}).get("ratio" if kind == "ratio" else "ours", math.nan)
        targets.append({"target": label, "value": value, "limit": limit,
                        "met": bool(value <= limit) if not math.isnan(value) else None})
    return {"env": env, "reps": opts.reps, "ut_reps": opts.ut_reps, "iters": opts.iters,
            "null_pairs": NULL_PAIRS, "rows": rows, "sysbench": sysbench,
            "tests": per_test, "compared": both,
            "own_usertests": [{"seconds": s, "end": e} for s, e in own],
            "runs": runs, "test_runs": {m: [{n: asdict(r) for n, r in t.items()}
                                            for t in tests[m]] for m in tests},
            "targets": targets}


# ---------------------------------------------------------------- the report
ROWS = (("null", "marker pair, no work (ms)"), ("getpid", "getpid round trip (us)"),
        ("fork", "fork + exit + wait (us)"), ("pingpong", "pipe ping-pong round trip (us)"),
        ("exec", "fork + exec + wait (us)"), ("xv6_usertests", "xv6 usertests passing on both (s)"),
        ("own_usertests", "our own full usertests (s)"))


def _fmt(x: float, digits: int = 2) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def format_report(data: dict[str, Any]) -> str:
    """The table `harness bench qemu` prints (and report.md's body)."""
    env, rows = data["env"], data["rows"]
    w = 78
    lines = ["{:=^{}}".format(" harness bench qemu: ours (1 hart) vs xv6-riscv on QEMU ", w),
             f"{env['qemu']}, -smp 1; xv6 {env['xv6']} ({env['xv6_commit'] or '?'})",
             f"repetitions {data['reps']} (micro), {data['ut_reps']} (usertests), "
             f"alternating; medians; ratio = ours / QEMU per repetition, then the median",
             f"host: {env['host_cpus']} CPUs, load average {env['load_before'][0]:.2f} before,"
             f" {env['load_after'][0]:.2f} after; {env['wall_s']:.0f} s in all",
             f"{'':<38}{'ours':>12}{'QEMU xv6':>12}{'ratio':>10}", "-" * w]
    for key, label in ROWS:
        if key in rows:
            r = rows[key]
            lines.append(f"{label:<38}{_fmt(r['ours']):>12}{_fmt(r['qemu']):>12}"
                         f"{_fmt(r['ratio'], 3):>10}")
    sb = data["sysbench"]
    lines += [f"  cross-check, sysbench on ours (guest clock, same boot): getpid "
              f"{_fmt(sb['sysbench_getpid'])} us, fork {_fmt(sb['sysbench_fork'])} us",
              "-" * w]
    tests = data["tests"]
    for m, name in (("ours", "ours"), ("qemu", "QEMU's xv6")):
        failed = [n for n, t in tests.items() if not t[m]["ok"]]
        lines.append(f"usertests failing on {name}: {len(failed)} of {len(tests)}"
                     + (f": {', '.join(failed)}" if failed else ""))
    lines.append(f"compared (passing on both): {len(data['compared'])} tests")
    lines.append("-" * w)
    for t in data["targets"]:
        met = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        lines.append(f"{t['target']:<46}{_fmt(t['value'], 3):>10}   {met}")
    lines.append("=" * w)
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    """report.md: the table, the targets, and every test's time and result."""
    lines = ["# harness bench qemu", "", "```", format_report(data), "```", "",
             "Per test: our console reaches the host once per run slice (up to 10 ms late), so "
             "times under ~10 ms on ours are not resolved; the total is what compares.", "",
             "| test | ours (s) | QEMU xv6 (s) | ratio | ours | QEMU |",
             "|---|---:|---:|---:|---|---|"]
    for n, t in data["tests"].items():
        o, q = t["ours"], t["qemu"]
        r = ratio(o["seconds"], q["seconds"]) if o["ok"] and q["ok"] else math.nan
        lines.append(f"| {n} | {_fmt(o['seconds'], 3)} | {_fmt(q['seconds'], 3)} | "
                     f"{_fmt(r, 3)} | {'ok' if o['ok'] else 'FAIL'} | "
                     f"{'ok' if q['ok'] else 'FAIL'} |")
    fails = [(m, n, t[m]["detail"]) for n, t in data["tests"].items() for m in ("ours", "qemu")
             if not t[m]["ok"]]
    if fails:
        lines += ["", "## Failures (the end of each failed test's output)", ""]
        lines += [f"- {n} on {m}: `{d.replace('`', chr(39)).replace(chr(10), ' | ')}`"
                  for m, n, d in fails]
    return "\n".join(lines) + "\n"


def write(data: dict[str, Any], out: Path) -> None:
    """qemu.json (every figure and repetition) and qemu.md under `out`."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "qemu.json").write_text(json.dumps(_no_nan(data), indent=1) + "\n")
    (out / "qemu.md").write_text(markdown(data))


def _no_nan(x: Any) -> Any:
    """JSON has no NaN: null instead."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_no_nan(v) for v in x]
    return x
