"""The guest shell (user_c/sh.c) and init's `-c` mode, end to end in the booted machine.

Each test boots the guest with `harness run -c` (tests/guest.py) and asserts the exact
console output of its commands.
"""

from __future__ import annotations

import re

import pytest
from guest import ROOT, run_guest, run_raw

WORDS = (ROOT / "user_c" / "files" / "words.txt").read_text()


def wc_line(text: str) -> str:
    """What the guest's wc prints for text read from standard input."""
    return f"{text.count(chr(10))} {len(text.split())} {len(text.encode())}\n"


def test_echo_and_sequence() -> None:
    r = run_guest("echo hello world; echo 'a  b' \"c|d\" e\\;f")
    assert r.output == "hello world\na  b c|d e;f\n"
    assert r.status == 0


def test_pipeline() -> None:
    r = run_guest("echo hi | wc")
    assert r.output == "1 1 3\n"


def test_three_stage_pipeline() -> None:
    r = run_guest("cat words.txt | grep process | wc")
    selected = "".join(line + "\n" for line in WORDS.splitlines() if "process" in line)
    assert r.output == wc_line(selected)


def test_input_redirection() -> None:
    r = run_guest("wc < words.txt")
    assert r.output == wc_line(WORDS)


def test_output_redirection_and_append() -> None:
    r = run_guest("echo x > f; cat f; echo y >> f; echo z >> f; cat < f; echo new > f; cat f")
    assert r.output == "x\nx\ny\nz\nnew\n"


def test_stderr_redirection() -> None:
    r = run_guest("cat missing 2> err; echo status $?; cat err; cat missing > both 2>&1; cat both")
    assert r.output == (
        "status 1\ncat: cannot open missing\ncat: cannot open missing\n"
    )


def test_background_job() -> None:
    # the background writer finishes while the foreground sleeps
    r = run_guest("echo bg > f & sleep 0.5; cat f")
    assert r.output == "bg\n"


def test_and_or_and_status_variable() -> None:
    r = run_guest("cat missing || echo fallback; echo ok && echo both; "
                  "cat missing && echo never; echo $?")
    assert r.output == "cat: cannot open missing\nfallback\nok\nboth\ncat: cannot open missing\n1\n"


def test_subshell_and_cd() -> None:
    r = run_guest("(echo a; echo b) | wc; mkdir d; cd d; echo in > f; cd /; cat d/f; (cd d; cat f)")
    assert r.output == "2 2 4\nin\nin\n"


def test_script_file_and_multiline() -> None:
    r = run_guest("echo 'echo from script' > s.sh; echo 'exit 4' >> s.sh; sh s.sh; echo $?\n"
                  "echo next line")
    assert r.output == "from script\n4\nnext line\n"


def test_exec_failure_message() -> None:
    r = run_guest("nosuchprogram arg; echo $?")
    assert r.output == "exec nosuchprogram failed\n127\n"
    words = " ".join(str(i) for i in range(31))  # echo + 31 = MAXARG (32) arguments: fine
    r = run_guest(f"echo {words}; echo {words} 31; echo $?")
    assert r.output == (f"{words}\nexec echo failed: too many arguments: at most 32\n127\n")


def test_syntax_errors() -> None:
    r = run_guest("sh -c 'echo a |'; echo $?; sh -c 'echo \"open'; echo $?")
    assert r.output == (
        "sh: syntax error near 'end of line'\n2\nsh: missing closing \"\n2\n"
    )


@pytest.mark.parametrize(("cmds", "status"), [("exit 3", 3), ("echo a; cat missing", 1),
                                             ("true_is_not_here", 127), ("poweroff 7", 7),
                                             ("echo done", 0)])
def test_exit_status_propagates(cmds: str, status: int) -> None:
    """`harness run -c` exits with the status of the last command."""
    proc = run_raw(cmds)
    assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_ps_lists_processes() -> None:
    r = run_guest("sleep 10 & sleep 0.3; ps")
    lines = r.output.splitlines()
    assert re.fullmatch(r"\s*PID\s+PPID\s+STATE\s+HART\s+MEM\s+NAME", lines[0])
    rows = [re.fullmatch(r"\s*(\d+)\s+(\d+)\s+(\w+)\s+[\d-]\s+(\d+)K\s+(\S+)", line)
            for line in lines[1:]]
    assert all(rows), lines
    procs = {(m.group(5), m.group(3)) for m in rows if m}
    assert ("init", "sleep") in procs
    assert ("ps", "run") in procs
    assert ("sleep", "sleep") in procs
    pids = [int(m.group(1)) for m in rows if m]
    assert pids == sorted(pids) and pids[0] == 1
    assert all(int(m.group(4)) > 0 for m in rows if m)
