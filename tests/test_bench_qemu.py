"""`harness bench qemu`: the console stamps, the per-test results and the restarts, on console
text captured from real runs (tests/data/bench_qemu.json); the whole bench end to end when
QEMU and an xv6-riscv checkout are here (HARNESS_XV6=/path/to/xv6-riscv). No timing is
asserted: the figures are checked against the stamps they come from."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.bench import qemu as bq
from harness.bench import xv6build
from harness.bench.errors import BenchError

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests" / "data" / "bench_qemu.json").read_text())


def stamped(rec: dict[str, Any]) -> bq.Stamped:
    st = bq.Stamped()
    for t, c in rec["chunks"]:
        st.chunks.append((t, c.encode()))
        st.buf += c.encode()
    return st


def replay(*recs: dict[str, Any]) -> tuple[bq.Session, list[list[str]]]:
    """A session that gives back the captured boots in order, and the lines asked for."""
    asked: list[list[str]] = []
    it = iter(recs)

    def session(lines: list[str]) -> bq.Boot:
        asked.append(lines)
        rec = next(it)
        return bq.Boot(stamped(rec), rec["end"])

    return session, asked


def stamp_of(rec: dict[str, Any], needle: str, last_byte: bool) -> float:
    """The arrival time of the chunk holding `needle`'s first (or last) byte."""
    text = "".join(c for _, c in rec["chunks"])
    at = text.index(needle) + (len(needle) - 1 if last_byte else 0)
    for t, c in rec["chunks"]:
        if at < len(c):
            return t
        at -= len(c)
    raise AssertionError(needle)


@pytest.mark.parametrize("machine", ["ours", "qemu"])
def test_intervals_are_the_stamps_of_their_marker_lines(machine: str) -> None:
    rec = DATA["micro"][machine]
    ivs = bq.intervals(stamped(rec).chunks)
    assert [(i.kind, i.arg) for i in ivs] == [("null", "1"), ("null", "1"), ("getpid", "2000"),
                                             ("fork", "30"), ("pingpong", "200"),
                                             ("exec", "10")]
    g = ivs[2]
    want = (stamp_of(rec, "@@ end getpid 2000\n", False)
            - stamp_of(rec, "@@ begin getpid 2000\n", True))
    assert g.seconds == pytest.approx(want) and g.status == "" and g.output == ""
    assert all(i.seconds >= 0 for i in ivs)


def test_our_console_arrives_in_slices_qemus_byte_by_byte() -> None:
    # why the loops must be long on ours: a marker pair can land in one chunk
    ours, qemu = DATA["micro"]["ours"]["chunks"], DATA["micro"]["qemu"]["chunks"]
    assert len(ours) < 20 < len(qemu)
    assert bq.intervals(stamped(DATA["micro"]["ours"]).chunks)[0].seconds == 0.0


def test_micro_per_iteration_figures_and_the_guest_clock_cross_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bq, "RESOLVE_S", 0.0)  # the capture's loops are short, to keep it small
    rec = DATA["micro"]["ours"]
    session, asked = replay(rec)
    iters = {"getpid": 2000, "fork": 30, "pingpong": 200, "exec": 10}
    out = bq.micro(session, iters, ours=True)
    ivs = {i.kind: i for i in bq.intervals(stamped(rec).chunks)}
    assert out["getpid"] == pytest.approx(ivs["getpid"].seconds / 2000 * 1e6)
    assert out["exec"] == pytest.approx(ivs["exec"].seconds / 10 * 1e6)
    assert out["sysbench_getpid"] == 7.197  # "per_call_us=7.197" in the captured text
    assert asked[0][0] == f"xv6bench null {bq.NULL_PAIRS}"


def test_micro_says_why_a_figure_is_missing() -> None:
    rec = dict(DATA["micro"]["qemu"], end="timeout")
    session, _ = replay(rec)
    with pytest.raises(BenchError, match="xv6bench failed \\(timeout\\)"):
        bq.micro(session, dict(bq.ITERS), ours=False)


def test_a_failed_test_stops_the_boot_and_the_next_starts_after_it() -> None:
    first, second = DATA["ours_ut"]
    names = first["lines"][0].split()[1:] + [w for line in first["lines"][1:]
                                             for w in line.split()[1:]]
    session, asked = replay(first, second)
    res = bq.usertests(session, names)
    after = names[names.index("stacktest") + 1:]  # the second boot starts after stacktest
    assert asked == [bq.command_lines("xv6ut", names), bq.command_lines("xv6ut", after)]
    assert res["argptest"].ok and not res["stacktest"].ok
    assert "read below stack" in res["stacktest"].detail
    assert all(r.ok for n, r in res.items() if n not in ("stacktest",)), res
    assert set(res) == set(names)


def test_a_boot_cut_short_records_the_test_it_was_in() -> None:
    cut, rest = DATA["qemu_cut"], DATA["qemu_ut"]
    names = cut["lines"][0].split()[1:]
    # the boot after the crash was asked for the tests after copyinstr2; the captured one
    # ran other tests (so those are "not run"): what matters is what was asked and recorded
    session, asked = replay(cut, rest)
    res = bq.usertests(session, names)
    assert [r.ok for r in (res["copyin"], res["copyout"], res["copyinstr1"])] == [True] * 3
    c = res["copyinstr2"]
    assert not c.ok and math.isnan(c.seconds) and "[machine: panic]" in c.detail
    assert asked[1] == bq.command_lines("xv6ut", names[names.index("copyinstr2") + 1:])
    assert all(not res[n].ok and "not run" in res[n].detail for n in names[4:])


def test_command_lines_fit_xv6s_shell() -> None:
    names = [f"test{i:02d}name" for i in range(30)]
    lines = bq.command_lines("xv6ut", names)
    assert [w for line in lines for w in line.split()[1:]] == names
    for line in lines:
        words = line.split()
        assert words[0] == "xv6ut" and len(words) - 1 <= bq.XV6_SH_ARGS
        assert len(line) <= bq.XV6_SH_LINE


def test_parse_tests_reads_both_tables() -> None:
    src = ('struct test {\n  void (*f)(char *);\n  char *s;\n} quicktests[] = {\n'
           '  {alpha, "alpha"},\n  {beta, "beta" },\n  { 0, 0},\n};\n'
           'struct test slowtests[] = {\n  {gamma, "gamma"},\n  { 0, 0},\n};\n')
    t = xv6build.parse_tests(src)
    assert (t.quick, t.slow, t.all) == (["alpha", "beta"], ["gamma"], ["alpha", "beta", "gamma"])
    with pytest.raises(BenchError, match="no quicktests"):
        xv6build.parse_tests("int main() {}")


def summary() -> dict[str, Any]:
    opts = bq.Options(xv6=Path("/x"), kernel=Path("k"), fs=Path("f"), reps=2,
                      iters={"getpid": 1, "fork": 1})
    runs = {"ours": [{"null": 1.0, "getpid": 2.0, "fork": 100.0},
                     {"null": 1.0, "getpid": 4.0, "fork": 300.0}],
            "qemu": [{"null": 0.1, "getpid": 25.0, "fork": 600.0},
                     {"null": 0.0, "getpid": 25.0, "fork": 600.0}]}  # a pair in one chunk
    ok, bad = bq.TestResult(True, 1.0, ""), bq.TestResult(False, 0.5, "boom")
    tests = {"ours": [{"a": ok, "b": bad}], "qemu": [{"a": bq.TestResult(True, 4.0, ""),
                                                      "b": ok}]}
    env = {"qemu": "QEMU emulator version 7.2", "xv6": "/x", "xv6_commit": "f5b93ef",
           "load_before": [1.0, 1, 1], "load_after": [2.0, 1, 1], "host_cpus": 2, "wall_s": 3}
    return bq.summarize(opts, runs, tests, [(30.0, "ok")], ["a", "b"], env)


def test_a_loop_inside_one_of_our_slices_gives_no_figure() -> None:
    # our console comes in slice-sized chunks: a loop whose two lines came in one chunk
    # took less than the stamps resolve, so it is "-" and its target "not measured"
    rec = {"end": "ok", "chunks": [
        [1.0, "@@ begin null 1\n@@ end null 1\n@@ begin getpid 10\n@@ end getpid 10\n"],
        [1.0, "@@ begin fork 2\n"], [1.5, "@@ end fork 2\n@@ exit\n"]]}
    session, _ = replay(rec)
    out = bq.micro(session, {"getpid": 10, "fork": 2}, ours=True)
    assert math.isnan(out["getpid"]) and out["fork"] == pytest.approx(0.25e6)
    session, _ = replay(rec)
    out = bq.micro(session, {"getpid": 10, "fork": 2}, ours=False)  # QEMU's: byte by byte
    assert out["getpid"] == 0.0


def test_summary_ratios_targets_and_report() -> None:
    data = summary()
    assert data["rows"]["getpid"]["ratio"] == pytest.approx(0.12)  # median of 0.08, 0.16
    assert data["rows"]["xv6_usertests"] == {"ours": 1.0, "qemu": 4.0, "ratio": 0.25}
    assert data["compared"] == ["a"]
    assert data["rows"]["null"]["ratio"] == pytest.approx(10.0)  # the 0.0 rep has no ratio
    met = {t["target"]: t["met"] for t in data["targets"]}
    assert met["getpid round trip <= 0.12x QEMU's xv6"] is True
    assert met["xv6-style usertests <= 0.2x QEMU's time"] is False
    assert met["our full usertests <= 20 s"] is False
    text = bq.format_report(data)
    assert "usertests failing on ours: 1 of 2: b" in text and "NOT met" in text
    md = bq.markdown(data)
    assert "| a | 1.000 | 4.000 | 0.250 | ok | ok |" in md and "- b on ours: `boom`" in md


def test_no_usertests_run_is_no_failure() -> None:
    opts = bq.Options(xv6=Path("/x"), kernel=Path("k"), fs=Path("f"), reps=1, ut_reps=0,
                      iters={"getpid": 1})
    runs = {m: [{"null": 1.0, "getpid": 2.0}] for m in ("ours", "qemu")}
    data = bq.summarize(opts, runs, {"ours": [], "qemu": []}, [], ["a"], summary()["env"])
    assert data["tests"] == {} and "xv6_usertests" not in data["rows"]
    assert "usertests failing on ours: 0 of 0" in bq.format_report(data)


def test_written_json_has_null_for_what_was_not_measured(tmp_path: Path) -> None:
    bq.write(summary(), tmp_path)
    data = json.loads((tmp_path / "qemu.json").read_text())
    assert data["rows"]["own_usertests"] == {"ours": 30.0, "qemu": None, "ratio": None}
    assert (tmp_path / "qemu.md").read_text().startswith("# harness bench qemu")


def test_missing_qemu_and_bad_checkout_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="apt-get install qemu-system-misc"):
        bq.find_qemu("qemu-system-no-such-arch")
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "qemu", "--xv6",
                        str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "not an xv6-riscv checkout" in r.stderr or "not installed" in r.stderr


XV6 = os.environ.get("HARNESS_XV6")


@pytest.mark.slow
@pytest.mark.skipif(not XV6 or shutil.which(bq.QEMU) is None,
                    reason="needs qemu-system-riscv64 and HARNESS_XV6=an xv6-riscv checkout")
@pytest.mark.skipif(not (ROOT / "build" / "kernel" / "kernel.elf").is_file(),
                    reason="needs `make build`")
def test_end_to_end_small(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "harness", "bench", "qemu", "--xv6", str(XV6),
                        "--reps", "1", "--tests", "copyin,sbrkbasic", "--no-own", "--iters",
                        "getpid=2000,fork=20,pingpong=200,exec=10", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "getpid round trip (us)" in r.stdout and "usertests failing on ours: 0 of 2" in r.stdout
    data = json.loads((tmp_path / "qemu.json").read_text())
    assert data["compared"] == ["copyin", "sbrkbasic"]
    for row in ("getpid", "fork", "pingpong", "exec"):  # small counts: ours may be null
        ours = data["rows"][row]["ours"]                 # (within one slice: RESOLVE_S)
        assert (ours is None or ours > 0) and data["rows"][row]["qemu"] > 0
    assert (tmp_path / "qemu.md").is_file()
