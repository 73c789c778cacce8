"""User programs in the booted guest: the kernel self-test (usertests) and the coreutils.

usertests' quick tier is part of the default suite; the full run (quick and slow tiers)
is marked slow. Outputs are asserted exactly where they are deterministic.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from guest import ROOT, run_guest

WORDS = (ROOT / "user_c" / "files" / "words.txt").read_text()
PROGRAMS = ["init", "sh", "cat", "echo", "grep", "wc", "ls", "mkdir", "rm", "ln", "kill",
            "sleep", "uptime", "ps", "halt", "poweroff", "sysbench", "usertests"]


def assert_all_passed(output: str) -> None:
    failed = [line for line in output.splitlines() if "FAILED" in line]
    assert not failed, "\n".join(failed) + "\n--- output ---\n" + output[-6000:]
    assert re.search(r"^ALL TESTS PASSED \(\d+ tests\)$", output, re.M), output[-3000:]


def test_usertests_quick() -> None:
    r = run_guest("usertests -q", timeout=900)
    assert_all_passed(r.output)
    assert r.status == 0


@pytest.mark.slow
def test_usertests_full() -> None:
    r = run_guest("usertests", timeout=1800)
    assert_all_passed(r.output)
    assert r.status == 0


def test_usertests_one_by_name_and_unknown_name() -> None:
    r = run_guest("usertests exitwait pipedata; echo $?; usertests no-such-test; echo $?")
    assert r.output == (
        "usertests starting\ntest exitwait: OK\ntest pipedata: OK\nALL TESTS PASSED (2 tests)\n0\n"
        "usertests starting\nusertests: no such test (usertests -l lists them)\n2\n"
    )


def test_stack_growth_out_of_memory_kills_with_a_clear_message() -> None:
    # the child uses up memory, then its stack reaches a page exec only reserved
    r = run_guest("usertests lazystackoom")
    assert_all_passed(r.output)
    assert re.search(r"usertrap\(\): out of memory for a stack page pid=\d+ usertests\n"
                     r" +sepc=0x[0-9a-f]+ stval=0x[0-9a-f]+\n", r.output), r.output
    assert "unexpected scause" not in r.output


def test_ls_root_lists_programs_and_files() -> None:
    r = run_guest("ls /")
    entries = {}
    for line in r.output.splitlines():
        name, kind, inum, size = line.split()
        entries[name] = (kind, int(inum), int(size))
    assert entries["."][0] == "dir" and entries[".."][0] == "dir"
    for prog in PROGRAMS:
        assert entries[prog][0] == "file" and entries[prog][2] > 1000, prog
    assert entries["words.txt"] == ("file", entries["words.txt"][1], len(WORDS.encode()))
    assert entries["console"][0] == "dev"


def test_grep_and_wc_exact() -> None:
    r = run_guest("grep -n 'the.*process' words.txt; grep -c ^a words.txt; grep -v the words.txt; "
                  "grep zzz words.txt; echo $?; wc words.txt prompt.txt")
    lines = WORDS.splitlines()
    prompt = (ROOT / "user_c" / "files" / "prompt.txt").read_text()

    def wc(text: str, name: str) -> str:
        return f"{text.count(chr(10))} {len(text.split())} {len(text.encode())} {name}"

    expect = [f"{i + 1}:{line}" for i, line in enumerate(lines) if re.search("the.*process", line)]
    expect.append(str(sum(line.startswith("a") for line in lines)))
    expect += [line for line in lines if "the" not in line]
    expect.append("1")  # grep selected nothing
    expect += [wc(WORDS, "words.txt"), wc(prompt, "prompt.txt"), wc(WORDS + prompt, "total")]
    assert r.output.splitlines() == expect


def test_file_commands() -> None:
    r = run_guest("mkdir dir; echo data > dir/a; ln dir/a dir/b; rm dir/a; cat dir/b; "
                  "rm dir; echo $?; rm dir/b; rm dir; echo $?; ls dir")
    assert r.output == "data\nrm: cannot remove dir\n1\n0\nls: cannot open dir\n"


def test_kill_and_sleep() -> None:
    r = run_guest("sleep 30 & sleep 0.2; kill 999; echo $?; kill x; echo $?")
    assert r.output == "kill: no process 999\n1\nkill: bad pid x\n1\n"


def test_uptime_and_sysbench_formats() -> None:
    r = run_guest("uptime; sysbench getpid 200; sysbench cpu 100000; sysbench fork 5; "
                  "sysbench pipe 64; sysbench fs 3; sysbench pingpong 20; sysbench bogus; "
                  "echo $?")
    lines = r.output.splitlines()
    assert re.fullmatch(r"up \d+\.\d\d s \(\d+ ticks at 100 Hz\)", lines[0])
    assert re.fullmatch(r"getpid: n=200 us=\d+ per_call_us=\d+\.\d{3}", lines[1])
    assert re.fullmatch(r"cpu: loops=100000 insns_per_loop=8 insns=800000 us=\d+ mips=\d+\.\d\d",
                        lines[2])
    assert re.fullmatch(r"fork: n=5 us=\d+ per_fork_us=\d+\.\d", lines[3])
    assert re.fullmatch(r"pipe: kib=64 us=\d+ kib_per_s=\d+", lines[4])
    assert re.fullmatch(r"fs: n=3 us=\d+ files_per_s=\d+\.\d", lines[5])
    assert re.fullmatch(r"pingpong: n=20 us=\d+ per_round_trip_us=\d+\.\d", lines[6])
    assert lines[7:] == ["usage: sysbench [getpid|cpu|fork|pipe|fs|pingpong [N]]", "2"]


def test_usys_stub_per_syscall_without_retyped_numbers(tmp_path: Path) -> None:
    """scripts/gen_usys.py makes one stub per SYS_ line and uses the macro, not the number."""
    out = tmp_path / "usys.S"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_usys.py"),
                    str(ROOT / "kernel_c" / "syscall.h"), str(out)], check=True)
    names = re.findall(r"^#define SYS_(\w+)\s", (ROOT / "kernel_c" / "syscall.h").read_text(), re.M)
    text = out.read_text()
    assert len(names) >= 25
    for name in names:
        assert f"{name}:\n  li a7, SYS_{name}\n  ecall\n  ret\n" in text, name
    assert not re.search(r"li a7, \d", text)
    assert text.count("ecall") == len(names)
