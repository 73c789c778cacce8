"""The kernel's AI service (kernel_c/ai_service.c, ai_slots.c, sysai.c, virtio_ai.c) from the
guest, on the real AI device (harness/devices/virtio_ai.py) serving the tiny Qwen3.5 test
checkpoint (tests/data/qwen35/tiny_text: loads in a blink, ~10k tokens/s).

Most cases run tests/kernel_progs/aiktest.c, which `make build` compiles with the user
programs' flags (build/tests/_aiktest, tests/made.py), put in scratch file-system images:
one with everything in build/user (init starts /ai_daemon), one without /ai_daemon
(aiktest itself is the worker, so every worker call and worker death can be driven
exactly). Each aiktest mode prints "aiktest NAME: OK ..." only
when every check held: the semantics table, bad arguments and pointers (each -1 with the
right ai_lasterr), back-pressure on full slots, kill during every sleep, clients and workers
dying with requests in every state, and no slot or page leaked afterwards (ai_stats,
freemem). The user programs' aitest adds the course's checks and the daemon restarts.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import guest
import pytest
from machine_stubs import Captured
from made import kernel_prog

from harness.abi import cheader
from harness.disk.fsbuild import build_image

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "build" / "kernel" / "kernel.elf"
UBUILD = ROOT / "build" / "user"
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
AI = cheader.load("ai.h")
TR = {v: k for k, v in cheader.load("virtio_ai.h").prefixed("AI_TR_").items()}


def _require_build() -> None:
    missing = [p for p in [KERNEL, UBUILD / "_init", UBUILD / "_sh", UBUILD / "_ai_daemon",
                           UBUILD / "_aitest"] if not p.exists()]
    if missing:
        pytest.skip(f"{missing[0].relative_to(ROOT)} is not built (run make build)")


def _aliases() -> dict[str, str]:
    """UPROG_ALIASES of user_c/user.mk (ALIAS=PROG: /ALIAS is a copy of PROG)."""
    text = (ROOT / "user_c" / "user.mk").read_text().replace("\\\n", " ")
    m = re.search(r"^UPROG_ALIASES\s*:?=(.*)$", text, re.M)
    return dict(a.split("=", 1) for a in m.group(1).split()) if m else {}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """'daemon': build/user's programs plus aiktest; 'nodaemon': the same without
    /ai_daemon (init then finds nothing to start for the AI device)."""
    _require_build()
    out = tmp_path_factory.mktemp("aiktest")
    files: dict[str, str | Path | bytes] = {
        p.name[1:]: p for p in UBUILD.glob("_*") if p.is_file()}
    for alias, prog in _aliases().items():   # e.g. /ai_worker is a copy of ai_daemon
        if (UBUILD / f"_{prog}").exists():
            files[alias] = UBUILD / f"_{prog}"
    files["aiktest"] = kernel_prog("aiktest")
    imgs = {}
    for kind in ("daemon", "nodaemon"):
        if kind == "nodaemon":
            files.pop("ai_daemon")
            files.pop("ai_worker", None)
        imgs[kind] = out / f"{kind}.img"
        build_image(imgs[kind], files, size_blocks=8192, ninodes=512)
    return imgs


@pytest.fixture(scope="module")
def tiny():  # -> LoadedModel, shared by every boot of this module
    from harness.engines.local import LoadedModel

    lm = LoadedModel.load(str(TINY))
    yield lm
    lm.close()


class Boot(Captured):
    """One machine run (optionally with the AI device) with its console captured."""

    join_timeout = 30.0

    def __init__(self, fs: Path, cmd: str, model: object, *, device: bool = True,
                 timeout: float = 180.0) -> None:
        from harness.machine.config import MachineConfig
        from harness.run.launch import add_ai_device

        self.created: list = []
        config = MachineConfig(kernel=KERNEL, fs=fs, cmd=cmd, timeout=timeout, cpus=guest.CPUS)
        if device:
            add_ai_device(config, model, created=self.created)  # type: ignore[arg-type]
        super().__init__(config)

    @property
    def text(self) -> str:
        return super().text.replace("\r\n", "\n")

    @property
    def device(self):  # -> VirtioAi | None
        return self.created[0] if self.created else None


def run(fs: Path, cmd: str, model: object, *, device: bool = True,
        timeout: float = 180.0) -> tuple[str, Boot]:
    """Boot, run cmd, power off; the console output (the run must end in a power-off)."""
    from harness.machine.config import Exit

    b = Boot(fs, cmd, model, device=device, timeout=timeout)
    r = b.run()
    assert r.exit == Exit.POWEROFF, f"{r.exit}: {r.message}\n{b.text[-4000:]}"
    assert "panic" not in b.text, b.text[-4000:]
    return b.text, b


def _ok(out: str, mode: str) -> None:
    assert re.search(rf"^aiktest {mode}: OK \d+ checks$", out, re.M), out[-4000:]
    assert "FAIL" not in out, out[-4000:]


# ----------------------------------------------------------------- aiktest, with ai_daemon


@pytest.mark.parametrize("mode", ["sem", "args", "full", "killsubmit", "killwait", "exit"])
def test_aiktest_with_daemon(images: dict[str, Path], tiny, mode: str) -> None:
    out, _ = run(images["daemon"], f"aiktest {mode}", tiny)
    assert "[init] ai_daemon ready" in out
    _ok(out, mode)


@pytest.mark.parametrize("seed", [1, 2])
def test_storm(images: dict[str, Path], tiny, seed: int) -> None:
    """24 clients make random AI calls, kill each other and exit mid-request."""
    out, _ = run(images["daemon"], f"aiktest storm {seed} 24", tiny, timeout=300)
    assert f"aiktest storm: OK 24 clients, seed {seed}" in out, out[-4000:]
    assert "FAIL" not in out, out[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_storm_more_seeds(images: dict[str, Path], tiny, seed: int) -> None:
    out, _ = run(images["daemon"], f"aiktest storm {seed} 48", tiny, timeout=600)
    assert f"aiktest storm: OK 48 clients, seed {seed}" in out, out[-4000:]
    assert "FAIL" not in out, out[-4000:]


def test_guest_ids_equal_the_engine(images: dict[str, Path], tiny) -> None:
    """aiktest sem's ai_call ids = the host engine's greedy ids for the same prompt."""
    from pyllm.request import GenParams

    out, _ = run(images["daemon"], "aiktest sem", tiny)
    m = re.search(r"^aiktest sem: ids ([\d ]+)$", out, re.M)
    assert m, out[-3000:]
    want = tiny.engine.submit([1, 2, 3, 4, 5], GenParams(8, stop_ids=())).wait()
    assert [int(x) for x in m.group(1).split()] == list(want)


@pytest.mark.parametrize("path", ["c", "python"])
def test_trace_register_sees_every_step(images: dict[str, Path], tiny, path: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel writes submit, dispatch, complete, waited for a request, in that order,
    and the device's accept/first/done fall between dispatch and complete: on the C bus
    (which stamps the kernel's writes in C) as on the Python one."""
    monkeypatch.setenv("HARNESS_TRAPS", path)
    out, b = run(images["daemon"], "aitest --async --predict 4 3 4 5", tiny)
    assert (b.device._ctrace is not None) == (path == "c")
    assert re.search(r"^\[aitest\] result: \d+ \d+ \d+ \d+$", out, re.M), out
    m = re.search(r"^\[aitest\] reqid: (\d+)$", out, re.M)
    assert m, out
    rid = int(m.group(1))
    ev = [(e.event, e.source) for e in b.device.trace if e.reqid == rid]
    names = [e for e, _ in ev]
    assert [e for e, s in ev if s == "kernel"] == ["submit", "dispatch", "complete", "waited"]
    assert names.index("dispatch") < names.index("accept") < names.index("first") \
        < names.index("done") < names.index("complete"), names
    times = [e.t_us for e in b.device.trace if e.reqid == rid and e.source == "kernel"]
    assert times == sorted(times)


# ----------------------------------------------------------------- aitest (user_c)


@pytest.mark.parametrize("flags", ["--all", "--killworker", "--killdaemon"])
def test_aitest_checks(images: dict[str, Path], tiny, flags: str) -> None:
    out, _ = run(images["daemon"], f"aitest {flags} --predict 4 1 2 3; echo status $?", tiny)
    assert re.search(r"^\[aitest\] \S+: PASS$", out, re.M), out[-3000:]
    assert not re.search(r"^\[aitest\] \S+: FAIL$", out, re.M), out[-3000:]
    assert "status 0" in out, out[-3000:]


def test_no_slot_leaks_after_many_clients(images: dict[str, Path], tiny) -> None:
    """8 concurrent clients (aibench), clients killed mid-request, then the slots: all free."""
    cmd = ("aibench -c 8 -n 3 -g 16; echo bench $?; "
           "aiktest killwait; aiktest exit; aitest --stats 1 2")
    out, _ = run(images["daemon"], cmd, tiny, timeout=300)
    assert "aibench: PASS" in out and "bench 0" in out, out[-3000:]
    assert re.search(r"^total: requests=24 ok=24 failed=0 ", out, re.M), out[-3000:]
    assert "aiktest killwait: OK" in out and "aiktest exit: OK" in out, out[-3000:]
    assert re.search(r"^\[aitest\] stats: PASS$", out, re.M), out[-3000:]


# ----------------------------------------------------------------- aiktest, no ai_daemon


def test_worker_protocol(images: dict[str, Path], tiny) -> None:
    out, _ = run(images["nodaemon"], "aiktest worker", tiny)
    assert "[init] ai_daemon ready" not in out
    _ok(out, "worker")


def test_no_device(images: dict[str, Path]) -> None:
    out, _ = run(images["daemon"], "aiktest nodev", None, device=False)
    _ok(out, "nodev")


def test_submit_sleeps_while_the_model_loads(images: dict[str, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No model at boot; the test starts a load whose end it holds back until the guest's
    submit is asleep; the config interrupt then wakes it."""
    from harness.engines import local as engines_local

    release = threading.Event()
    real_load = engines_local.LoadedModel.load.__func__

    def held_load(cls, spec: str, **opts: object):  # noqa: ANN001, ANN202
        lm = real_load(cls, spec, **opts)
        release.wait(30)
        return lm

    monkeypatch.setattr(engines_local.LoadedModel, "load", classmethod(held_load))

    def drive(b: Boot) -> None:
        b.wait_for("aiktest loading: waiting for the load")
        b.machine.post(lambda: b.device.start_load(str(TINY)))
        b.wait_for("aiktest loading: submitting")
        time.sleep(0.5)       # the guest is asleep in ai_submit by now
        release.set()

    b = Boot(images["nodaemon"], "aiktest loading", None)
    from harness.machine.config import Exit

    r = b.run(drive)
    assert r.exit == Exit.POWEROFF, f"{r.exit}: {r.message}\n{b.text[-3000:]}"
    _ok(b.text, "loading")
    m = re.search(r"^aiktest loading: submit slept (\d+) us$", b.text, re.M)
    assert m and int(m.group(1)) >= 300_000, b.text[-3000:]
