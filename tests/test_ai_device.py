"""The virtio AI device (harness/devices/virtio_ai.py) without a kernel.

The test thread plays both the driver (it builds rings and chains in guest RAM and writes
the registers, as kernel_c/virtio_ai.c does) and the emulation thread (it runs the closures
the engine thread posts). Real engines serve the requests: the tiny Qwen3.5 checkpoint in
tests/data/qwen35/ (loads in milliseconds) and SmolLM2 when it is installed.
"""

from __future__ import annotations

import ctypes
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, Uc

from harness.cpu.clock import HostClock
from harness.cpu.physmem import PhysMem
from harness.cpu.registers import Hart
from harness.devices import ai_protocol as ai
from harness.devices import virtio_ai
from harness.devices.base import DeviceContext, DeviceError
from harness.devices.virtio_mmio import REG, V
from harness.engines import local as engines_local
from harness.engines.base import guest_name

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "qwen35" / "tiny_text"
RAM_BASE, RAM_SIZE = 0x8000_0000, 16 << 20
QNUM = 64
DESC, AVAIL, USED = RAM_BASE + 0x1000, RAM_BASE + 0x2000, RAM_BASE + 0x3000
ST = ai.ST
GENERATE, CANCEL, LOAD = ai.REQ_TYPE["GENERATE"], ai.REQ_TYPE["CANCEL"], ai.REQ_TYPE["LOAD"]
F_ALL = ai.F_PROGRESS | ai.F_SAMPLING | ai.F_CANCEL | ai.F_PROGRESS_IRQ
W = V["VRING_DESC_F_WRITE"]
NEXT = V["VRING_DESC_F_NEXT"]


# ---------------------------------------------------------------- a driver written in Python

class Rig:
    """One AI device on real guest RAM, with a Python virtio driver and a post queue."""

    def __init__(self, model: str | engines_local.LoadedModel | None, native: bool = False,
                 **kw: object) -> None:
        self.uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
        self.ram = PhysMem(self.uc, Hart(self.uc), RAM_BASE, RAM_SIZE)
        self.posted: deque[Callable[[], None]] = deque()
        self.wake = threading.Event()
        self.irq_levels: list[bool] = []
        self.logs: list[str] = []
        ctx = DeviceContext(irq=self.irq_levels.append, post=self._post, ram=self.ram,
                            clock=HostClock())
        self.dev = virtio_ai.VirtioAi("ai", ctx, model=model, log=self.logs.append, **kw)  # type: ignore[arg-type]
        self.c: tuple[object, ...] | None = self._native() if native else None
        self.heap = RAM_BASE + 0x10000
        self.free_desc = list(range(QNUM))
        self.avail_idx = 0
        self.used_seen = 0

    def _native(self) -> tuple[object, ...]:
        """The C bus's view of the device, as CMmio.adopt gives it: QUEUE_NOTIFY of
        queue 0 goes to harness/fastpath/virtq.c first (`notify`)."""
        from harness import fastpath
        from harness.machine import bus_c as mmio_native

        if fastpath.load() is None:
            pytest.skip(fastpath.ERROR)
        ffi, lib = fastpath.load()  # type: ignore[misc]
        st, vq = ffi.new("struct fp_virtio *"), ffi.new("struct fp_virtq *")
        vq.ram = ffi.cast("uint8_t *", ctypes.addressof(self.ram._anchor))
        vq.ram_base, vq.ram_size = RAM_BASE, RAM_SIZE
        st.vq = vq
        self.dev.use_c_path(st)
        bus = SimpleNamespace(windows=[(0, self.dev)])  # what fp_py_chain looks the device up in
        handle = ffi.new_handle(bus)
        cbus = ffi.new("struct fp_bus *", {"handle": handle})
        win = ffi.new("struct fp_window *", {"bus": cbus, "index": 0})
        assert mmio_native._ffi is ffi  # its fp_py_chain is registered
        return lib, st, vq, handle, cbus, win, bus

    def notify(self) -> None:
        """QUEUE_NOTIFY 0, through the C walker first when the rig is native (as mmio.c)."""
        if self.c is not None:
            lib, _, vq, _, _, win, _ = self.c
            if lib.fp_virtq_notify(win, vq):  # type: ignore[attr-defined]
                return
        self.w("QUEUE_NOTIFY", 0)

    def _post(self, fn: Callable[[], None]) -> None:  # any thread
        self.posted.append(fn)
        self.wake.set()

    def pump(self, until: Callable[[], bool], timeout: float = 30.0) -> None:
        """Be the emulation thread: run posted closures until `until()` holds."""
        end = time.monotonic() + timeout
        while not until():
            if time.monotonic() > end:
                raise AssertionError("timed out waiting for the device")
            self.wake.wait(0.05)
            self.wake.clear()
            while self.posted:
                self.posted.popleft()()

    # registers
    def r(self, name: str) -> int:
        return self.dev.read(REG[name], 4)

    def w(self, name: str, value: int) -> None:
        self.dev.write(REG[name], 4, value)

    def cfg(self) -> dict[str, int | bytes]:
        raw = b"".join(self.dev.read(REG["CONFIG"] + 4 * i, 4).to_bytes(4, "little")
                       for i in range(ai.CFG.size // 4))
        return ai.CFG.unpack(raw)

    def handshake(self, features: int = F_ALL, version_1: bool = True) -> int:
        S = V.prefixed("VIRTIO_STATUS_")
        self.w("STATUS", 0)
        st = S["ACKNOWLEDGE"] | S["DRIVER"]
        self.w("STATUS", st)
        self.w("DEVICE_FEATURES_SEL", 0)
        offered = self.r("DEVICE_FEATURES")
        self.w("DRIVER_FEATURES_SEL", 0)
        self.w("DRIVER_FEATURES", features & offered)
        self.w("DRIVER_FEATURES_SEL", 1)
        self.w("DRIVER_FEATURES", 1 if version_1 else 0)
        self.w("STATUS", st | S["FEATURES_OK"])
        if not self.r("STATUS") & S["FEATURES_OK"]:
            return self.r("STATUS")
        st |= S["FEATURES_OK"]
        self.w("QUEUE_SEL", 0)
        assert self.r("QUEUE_NUM_MAX") == QNUM
        self.w("QUEUE_NUM", QNUM)
        for reg, addr in (("QUEUE_DESC", DESC), ("DRIVER_DESC", AVAIL), ("DEVICE_DESC", USED)):
            self.w(reg + "_LOW", addr & 0xFFFF_FFFF)
            self.w(reg + "_HIGH", addr >> 32)
        self.w("QUEUE_READY", 1)
        self.w("STATUS", st | S["DRIVER_OK"])
        return self.r("STATUS")

    # memory
    def alloc(self, data: bytes | int) -> int:
        n = data if isinstance(data, int) else len(data)
        addr = self.heap
        self.heap += (n + 63) & ~63
        if not isinstance(data, int):
            self.ram.write(addr, data)
        return addr

    def submit(self, descs: list[tuple[int, int, int]]) -> int:
        """Put a chain (addr, len, flags-without-NEXT) on the avail ring and notify."""
        head = self.offer(descs)
        self.notify()
        return head

    def offer(self, descs: list[tuple[int, int, int]]) -> int:
        """Put a chain on the avail ring (no notify); its head."""
        idx = [self.free_desc.pop(0) for _ in descs]
        for i, (d, (addr, n, flags)) in enumerate(zip(idx, descs, strict=True)):
            last = i == len(descs) - 1
            self.ram.write(DESC + 16 * d, struct.pack(
                "<QIHH", addr, n, flags | (0 if last else NEXT), 0 if last else idx[i + 1]))
        self.ram.set_u16(AVAIL + 4 + 2 * (self.avail_idx % QNUM), idx[0])
        self.avail_idx = (self.avail_idx + 1) & 0xFFFF
        self.ram.set_u16(AVAIL + 2, self.avail_idx)
        for d in idx:
            self.free_desc.append(d)  # the tests never reuse a chain's descriptors early
        return idx[0]

    def used(self) -> list[tuple[int, int]]:
        """New used-ring entries (head, len)."""
        out = []
        while self.used_seen != self.ram.u16(USED + 2):
            e = USED + 4 + 8 * (self.used_seen % QNUM)
            out.append((self.ram.u32(e), self.ram.u32(e + 4)))
            self.used_seen = (self.used_seen + 1) & 0xFFFF
        return out

    def close(self) -> None:
        self.dev.close()


class Gen:
    """One GENERATE request's buffers."""

    def __init__(self, rig: Rig, prompt: list[int], npredict: int, *, flags: int = 0,
                 reqid: int = 1, temp_milli: int = 0, top_k: int = 0, seed: int = 0) -> None:
        self.rig, self.npredict, self.reqid = rig, npredict, reqid
        hdr = ai.REQ.pack(type=GENERATE, id=reqid, ntokens=len(prompt), npredict=npredict,
                          flags=flags, seed=seed, temp_milli=temp_milli, top_k=top_k)
        self.hdr = rig.alloc(hdr)
        self.toks = rig.alloc(struct.pack(f"<{len(prompt)}I", *prompt))
        self.out = rig.alloc(4 * npredict)
        self.resp = rig.alloc(ai.RESP.size)
        self.ntok = len(prompt)
        self.head = -1

    def chain(self) -> list[tuple[int, int, int]]:
        return [(self.hdr, ai.REQ.size, 0), (self.toks, 4 * self.ntok, 0),
                (self.out, 4 * self.npredict, W), (self.resp, ai.RESP.size, W)]

    def submit(self) -> Gen:
        self.head = self.rig.submit(self.chain())
        return self

    @property
    def resp_fields(self) -> dict[str, int]:
        return ai.RESP.unpack(self.rig.ram.read(self.resp, ai.RESP.size))  # type: ignore[return-value]

    @property
    def tokens(self) -> list[int]:
        n = self.resp_fields["ngenerated"]
        return list(struct.unpack(f"<{n}I", self.rig.ram.read(self.out, 4 * n)))


def wait_done(rig: Rig, *reqs: Gen, timeout: float = 60.0) -> dict[int, int]:
    """Pump until every request's head is on the used ring; head -> used.len."""
    done: dict[int, int] = {}
    want = {g.head for g in reqs}
    rig.pump(lambda: (done.update(rig.used()) or want <= set(done)), timeout)
    return done


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def tiny() -> engines_local.LoadedModel:
    lm = engines_local.LoadedModel.load(str(TINY))
    yield lm
    lm.close()


@pytest.fixture(params=["python", "c"])
def rig(tiny: engines_local.LoadedModel, request: pytest.FixtureRequest) -> Rig:
    """The device with its Python notify path, and with the C bus's chain walker."""
    r = Rig(tiny, native=request.param == "c")
    assert r.handshake() & V["VIRTIO_STATUS_DRIVER_OK"]
    yield r
    r.close()


def engine_ids(lm: engines_local.LoadedModel, prompt: list[int], n: int) -> list[int]:
    from pyllm.request import GenParams

    return lm.engine.run(prompt, GenParams(max_new_tokens=n, stop_ids=())).tokens


# ---------------------------------------------------------------- transport and config

def test_identity_features_and_handshake(tiny: engines_local.LoadedModel) -> None:
    r = Rig(tiny)
    assert r.r("MAGIC_VALUE") == V["VIRTIO_MAGIC"] and r.r("VERSION") == 2
    assert r.r("DEVICE_ID") == ai.A["VIRTIO_ID_AI"]
    assert r.r("VENDOR_ID") == ai.A["VIRTIO_AI_VENDOR"]
    r.w("DEVICE_FEATURES_SEL", 0)
    assert r.r("DEVICE_FEATURES") == F_ALL
    r.w("DEVICE_FEATURES_SEL", 1)
    assert r.r("DEVICE_FEATURES") == 1  # VIRTIO_F_VERSION_1
    st = r.handshake(features=ai.F_PROGRESS)
    assert st == 15 and r.dev.driver_features == (1 << 32) | ai.F_PROGRESS


def test_features_ok_refused_without_version_1(tiny: engines_local.LoadedModel) -> None:
    r = Rig(tiny)
    st = r.handshake(version_1=False)
    assert not st & V["VIRTIO_STATUS_FEATURES_OK"]


def test_config_describes_the_model(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    c = rig.cfg()
    info = tiny.model.info
    assert c["state"] == ai.DEV_STATE["READY"] and c["flags"] == 0
    assert (c["vocab_size"], c["max_context"], c["eos_token"]) == (512, 4096, 1)
    assert (c["n_layers"], c["dim"]) == (4, 64)
    assert c["n_params"] == info.n_params and c["weight_bytes"] == info.weight_bytes
    assert c["load_us"] == tiny.load_us > 0
    assert c["name"].rstrip(b"\0") == b"tiny_text" and c["arch"].rstrip(b"\0") == b"qwen3_5"
    assert c["max_inflight"] == tiny.engine.max_batch
    with pytest.raises(DeviceError, match="outside"):
        rig.dev.read(REG["CONFIG"] + ai.CFG.size, 4)


def test_config_name_is_the_models_own_name(tmp_path: Path) -> None:
    """The name the guest prints comes from the checkpoint's config.json; without one there,
    from the folder's whole name (not Path.stem, which cut "qwen3.5-0.8b-synthetic" at the
    dot)."""
    import json
    import shutil

    folder = tmp_path / "qwen3.5-0.8b-synthetic"
    shutil.copytree(TINY, folder)
    lm = engines_local.LoadedModel.load(str(folder))
    assert lm.config_fields()["name"] == b"qwen3.5-0.8b-synthetic"
    lm.close()
    conf = json.loads((folder / "config.json").read_text())
    conf["_name_or_path"] = "Qwen/Qwen3.5-0.8B"
    (folder / "config.json").write_text(json.dumps(conf))
    lm = engines_local.LoadedModel.load(str(folder))
    assert lm.model.info.title == "Qwen3.5-0.8B" and lm.config_fields()["name"] == b"Qwen3.5-0.8B"
    lm.close()


def test_config_name_fits_and_can_be_quoted() -> None:
    assert guest_name('a "quoted"\tname') == b"a _quoted__name"
    long = guest_name("\u00e9" * 20)  # 2 bytes each: cut at a character, not inside one
    assert len(long) == 30 and long.decode() == "\u00e9" * 15


def test_boot_load_goes_loading_ready_with_a_config_interrupt() -> None:
    r = Rig(str(TINY))
    assert r.cfg()["state"] == ai.DEV_STATE["LOADING"]
    gen0 = r.r("CONFIG_GENERATION")
    r.handshake()
    r.pump(lambda: r.dev.state != ai.DEV_STATE["LOADING"])
    c = r.cfg()
    assert c["state"] == ai.DEV_STATE["READY"] and c["vocab_size"] == 512
    assert 0 < c["load_us"] < 30e6
    assert r.r("CONFIG_GENERATION") != gen0
    assert r.r("INTERRUPT_STATUS") & V["VIRTIO_INT_CONFIG"] and r.irq_levels[-1] is True
    r.w("INTERRUPT_ACK", V["VIRTIO_INT_CONFIG"])
    assert r.r("INTERRUPT_STATUS") == 0 and r.irq_levels[-1] is False
    assert any("ready" in m for m in r.logs)
    r.close()


def test_failed_load_reports_and_requests_get_enomodel() -> None:
    r = Rig(str(ROOT / "tests" / "data" / "no-such-model.gguf"))
    r.handshake()
    r.pump(lambda: r.dev.state != ai.DEV_STATE["LOADING"])
    assert r.cfg()["state"] == ai.DEV_STATE["FAILED"]
    assert any("model load failed" in m and "no-such-model" in m for m in r.logs)
    g = Gen(r, [1, 2, 3], 4).submit()
    done = wait_done(r, g)
    assert g.resp_fields["status"] == ST["ENOMODEL"] and done[g.head] == ai.RESP.size
    r.close()


def test_no_model_then_load_request(tiny: engines_local.LoadedModel) -> None:
    r = Rig(None, allow_load=(str(TINY),))
    r.handshake()
    assert r.cfg()["state"] == ai.DEV_STATE["NOMODEL"]
    g = Gen(r, [5], 2).submit()
    wait_done(r, g)
    assert g.resp_fields["status"] == ST["ENOMODEL"]
    # refused: not a registry name and not allowed by the host
    bad = load_chain(r, "/etc/passwd")
    wait_done(r, bad)
    assert bad.resp_fields["status"] == ST["ENOMODEL"]
    ld = load_chain(r, str(TINY))
    assert r.cfg()["state"] == ai.DEV_STATE["LOADING"]
    wait_done(r, ld)
    assert ld.resp_fields["status"] == ST["OK"] and r.cfg()["state"] == ai.DEV_STATE["READY"]
    g = Gen(r, [5, 6, 7], 5).submit()
    wait_done(r, g)
    assert g.resp_fields["status"] == ST["OK"] and g.tokens == engine_ids(tiny, [5, 6, 7], 5)
    r.close()


def load_chain(r: Rig, name: str) -> Gen:
    g = Gen(r, [0], 1)
    r.ram.write(g.hdr, ai.REQ.pack(type=LOAD, id=99, ntokens=len(name) + 1))
    buf = r.alloc(name.encode() + b"\0")
    g.head = r.submit([(g.hdr, ai.REQ.size, 0), (buf, len(name) + 1, 0),
                       (g.resp, ai.RESP.size, W)])
    return g


# ---------------------------------------------------------------- requests

def test_tokens_equal_the_engine_greedy_output(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    prompt = [17, 300, 42, 7, 99, 250]
    g = Gen(rig, prompt, 12).submit()
    assert g.resp_fields["status"] == ST["RUNNING"]  # accepted at once, not finished
    done = wait_done(rig, g)
    f = g.resp_fields
    assert f["status"] == ST["OK"] and f["ngenerated"] == 12
    assert done[g.head] == 4 * 12 + ai.RESP.size
    assert g.tokens == engine_ids(tiny, prompt, 12)
    assert 0 < f["t_accept"] <= f["t_first"] <= f["t_done"]
    assert rig.r("INTERRUPT_STATUS") & V["VIRTIO_INT_USED_RING"] and rig.irq_levels[-1]


def test_stop_at_eos_only_when_asked(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    from pyllm.request import GenParams

    prompt = [1]  # the tiny model answers its EOS (id 1) with EOS, greedily
    ref = tiny.engine.run(prompt, GenParams(max_new_tokens=12)).tokens  # stops at EOS
    assert ref[-1] == 1 and len(ref) < 12
    g = Gen(rig, prompt, 12, flags=ai.STOP_EOS).submit()
    g2 = Gen(rig, prompt, 12).submit()
    wait_done(rig, g, g2)
    assert g.tokens == ref and g.resp_fields["status"] == ST["OK"]
    assert len(g2.tokens) == 12 and g2.tokens[: len(ref)] == ref


def test_several_requests_in_flight(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    prompts = [[3, 4, 5], [100, 200, 300, 400, 500], [7], list(range(10, 60))]
    gens = [Gen(rig, p, 10 + 3 * i, reqid=10 + i).submit() for i, p in enumerate(prompts)]
    assert len(rig.dev.jobs) == 4  # all accepted before any completes
    wait_done(rig, *gens)
    for g, p in zip(gens, prompts, strict=True):
        assert g.resp_fields["status"] == ST["OK"]
        assert g.tokens == engine_ids(tiny, p, g.npredict)
    assert rig.dev.jobs == {}


def test_sampling_is_reproducible_by_seed(rig: Rig) -> None:
    a = Gen(rig, [9, 8, 7], 16, temp_milli=1500, top_k=50, seed=7).submit()
    b = Gen(rig, [9, 8, 7], 16, temp_milli=1500, top_k=50, seed=7).submit()
    c = Gen(rig, [9, 8, 7], 16, temp_milli=1500, top_k=50, seed=8).submit()
    wait_done(rig, a, b, c)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_progress_is_visible_while_generating(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    rig.dev.write(ai.PROGRESS_WANT, 4, 1)  # updates at the reader's rate
    g = Gen(rig, [11, 12, 13], 400).submit()
    seen: list[int] = []
    done: dict[int, int] = {}

    def progressed() -> bool:
        f = g.resp_fields
        seen.append(f["ngenerated"])
        if 0 < f["ngenerated"] < 400:
            assert f["status"] == ST["RUNNING"] and f["t_first"] > 0
            assert g.tokens == engine_ids_cached(tiny)[: f["ngenerated"]]
        done.update(rig.used())
        return g.head in done

    rig.pump(progressed, 60)
    assert seen == sorted(seen) and any(0 < n < 400 for n in seen)
    assert g.tokens == engine_ids_cached(tiny)
    # one posted closure per engine step at most, not one per token and register
    assert rig.dev.progress_posts <= 401


def test_progress_interrupt_is_rate_limited_and_coalesced(rig: Rig) -> None:
    """VIRTIO_AI_INT_PROGRESS: raised with new ids while running, never again while the driver
    has not acknowledged it, and at most once per VIRTIO_AI_PROGRESS_US of guest time."""
    rig.dev.write(ai.PROGRESS_WANT, 4, 1)  # a reader waits (kernel: ai_read)
    g = Gen(rig, [11, 12, 13], 400).submit()
    raised: list[int] = []  # guest µs of each progress interrupt seen (then acknowledged)
    unacked = {"n": 0}

    def step() -> bool:
        isr = rig.r("INTERRUPT_STATUS")
        if isr & ai.INT_PROGRESS:
            if unacked["n"] < 3:  # leave a few pending: no new ones may come meanwhile
                unacked["n"] += 1
                before = rig.dev.progress_irqs
                time.sleep(0.03)
                while rig.posted:
                    rig.posted.popleft()()
                assert rig.dev.progress_irqs == before
            raised.append(rig.dev.last_irq_us)  # when the device raised it
            rig.w("INTERRUPT_ACK", ai.INT_PROGRESS)
        return g.head in dict(rig.used())

    rig.pump(step, 60)
    assert rig.dev.progress_irqs >= 1 and len(raised) == rig.dev.progress_irqs
    assert all(b - a >= ai.PROGRESS_US for a, b in zip(raised, raised[1:], strict=False))
    elapsed = max(1, g.resp_fields["t_done"] - g.resp_fields["t_accept"])
    assert rig.dev.progress_irqs <= elapsed // ai.PROGRESS_US + 1


def test_progress_interrupts_only_while_wanted(rig: Rig) -> None:
    """VIRTIO_AI_PROGRESS_WANT: none while it is 0 (at reset too), the next progress update
    interrupts once it is set (setting it brings ngenerated up to date at once), none again
    once cleared; ngenerated and out[] still grow."""
    g = Gen(rig, [11, 12, 13], 2000).submit()
    rig.pump(lambda: g.resp_fields["ngenerated"] > 0, 60)
    assert rig.dev.progress_irqs == 0 and not rig.r("INTERRUPT_STATUS") & ai.INT_PROGRESS
    time.sleep(0.05)  # more ids arrive; nobody waits, so they may stay in the device a while
    rig.dev.write(ai.PROGRESS_WANT, 4, 1)
    with rig.dev._lock:
        assert not rig.dev._dirty  # all of them are in RAM now
    assert rig.dev.progress_irqs == 1 and rig.r("INTERRUPT_STATUS") & ai.INT_PROGRESS
    rig.dev.write(ai.PROGRESS_WANT, 4, 0)
    rig.w("INTERRUPT_ACK", ai.INT_PROGRESS)
    rig.pump(lambda: g.head in dict(rig.used()), 60)
    assert rig.dev.progress_irqs == 1 and not rig.r("INTERRUPT_STATUS") & ai.INT_PROGRESS
    assert g.resp_fields["ngenerated"] == 2000
    with pytest.raises(DeviceError):
        rig.dev.read(ai.PROGRESS_WANT, 4)  # write-only


def test_no_progress_interrupt_without_the_feature(tiny: engines_local.LoadedModel) -> None:
    r = Rig(tiny)
    r.handshake(features=ai.F_PROGRESS)
    r.dev.write(ai.PROGRESS_WANT, 4, 1)
    g = Gen(r, [11, 12, 13], 100).submit()
    r.pump(lambda: g.head in dict(r.used()), 60)
    assert r.dev.progress_irqs == 0 and not r.r("INTERRUPT_STATUS") & ai.INT_PROGRESS
    assert g.resp_fields["ngenerated"] == 100
    r.close()


_CACHE: dict[str, list[int]] = {}


def engine_ids_cached(tiny: engines_local.LoadedModel) -> list[int]:
    if "p" not in _CACHE:
        _CACHE["p"] = engine_ids(tiny, [11, 12, 13], 400)
    return _CACHE["p"]


def test_without_progress_the_result_appears_at_the_end(tiny: engines_local.LoadedModel) -> None:
    r = Rig(tiny)
    r.handshake(features=0)
    g = Gen(r, [11, 12, 13], 200).submit()
    seen = []
    r.pump(lambda: (seen.append(g.resp_fields["ngenerated"]), bool(r.used()))[1], 60)
    assert set(seen[:-1]) <= {0} and g.resp_fields["ngenerated"] == 200
    assert g.tokens == engine_ids(tiny, [11, 12, 13], 200)
    r.close()


def test_cancel_stops_a_request(rig: Rig, tiny: engines_local.LoadedModel) -> None:
    g = Gen(rig, [21, 22], 3000, reqid=77).submit()
    rig.pump(lambda: g.resp_fields["ngenerated"] > 5)
    c = cancel_chain(rig, 77)
    assert c.resp_fields["status"] == ST["OK"]  # completes at once
    wait_done(rig, g)
    f = g.resp_fields
    assert f["status"] == ST["ECANCELED"] and 5 < f["ngenerated"] < 3000
    assert g.tokens == engine_ids(tiny, [21, 22], f["ngenerated"])
    assert cancel_chain(rig, 12345).resp_fields["status"] == ST["EINVAL"]  # nothing to cancel


def cancel_chain(r: Rig, target: int) -> Gen:
    g = Gen(r, [0], 1)
    r.ram.write(g.hdr, ai.REQ.pack(type=CANCEL, id=500, target=target))
    g.head = r.submit([(g.hdr, ai.REQ.size, 0), (g.resp, ai.RESP.size, W)])
    done = r.used()
    assert done and done[-1][0] == g.head
    return g


def test_cancel_needs_the_feature(tiny: engines_local.LoadedModel) -> None:
    r = Rig(tiny)
    r.handshake(features=ai.F_PROGRESS)
    assert cancel_chain(r, 1).resp_fields["status"] == ST["EINVAL"]
    r.close()


# ---------------------------------------------------------------- bad chains and arguments

def _bad(rig: Rig, mutate: Callable[[Gen, list[tuple[int, int, int]]], list[tuple[int, int, int]]],
         prompt: list[int] | None = None, npredict: int = 4) -> tuple[Gen, int]:
    g = Gen(rig, prompt or [1, 2, 3], npredict)
    g.head = rig.submit(mutate(g, g.chain()))
    done = dict(rig.used())
    assert g.head in done, "a bad chain must complete at once"
    return g, done[g.head]


@pytest.mark.parametrize("case, status", [
    ("three descriptors", "EINVAL"),
    ("five descriptors", "EINVAL"),
    ("short header", "EINVAL"),
    ("short token buffer", "EINVAL"),
    ("short out buffer", "EINVAL"),
    ("readable after writable", "EINVAL"),
    ("indirect flag", "EINVAL"),
    ("tokens outside RAM", "EFAULT"),
    ("out outside RAM", "EFAULT"),
    ("header address wraps", "EFAULT"),
])
def test_malformed_chains_complete_with_an_error(rig: Rig, case: str, status: str) -> None:
    def mutate(g: Gen, c: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        hdr, tok, out, resp = c
        return {
            "three descriptors": [hdr, out, resp],
            "five descriptors": [hdr, tok, tok, out, resp],
            "short header": [(hdr[0], 8, 0), tok, out, resp],
            "short token buffer": [hdr, (tok[0], 8, 0), out, resp],
            "short out buffer": [hdr, tok, (out[0], 4, W), resp],
            "readable after writable": [hdr, out, tok, resp],
            "indirect flag": [hdr, (tok[0], tok[1], 4), out, resp],
            "tokens outside RAM": [hdr, (0x1000, tok[1], 0), out, resp],
            "out outside RAM": [hdr, tok, (RAM_BASE + RAM_SIZE - 4, 16, W), resp],
            "header address wraps": [(2**64 - 8, 40, 0), tok, out, resp],
        }[case]

    g, used_len = _bad(rig, mutate)
    assert g.resp_fields["status"] == ST[status] and used_len == ai.RESP.size
    assert rig.dev.jobs == {}


@pytest.mark.parametrize("field, value, status", [
    ("ntokens", 0, "EINVAL"),
    ("npredict", 0, "EINVAL"),
    ("type", 9, "EINVAL"),
    ("npredict", 4095, "ETOOLONG"),
])
def test_bad_header_fields(rig: Rig, field: str, value: int, status: str) -> None:
    g = Gen(rig, [1, 2], 2)
    fields = {"type": GENERATE, "id": 1, "ntokens": 2, "npredict": 2, field: value}
    rig.ram.write(g.hdr, ai.REQ.pack(**fields))
    big = rig.alloc(4 * 4096)
    chain = g.chain()
    chain[2] = (big, 4 * 4096, W)
    g.head = rig.submit(chain)
    assert dict(rig.used())[g.head] == ai.RESP.size
    assert g.resp_fields["status"] == ST[status]


def test_token_id_outside_the_vocabulary(rig: Rig) -> None:
    for bad in (512, 2**31, 2**32 - 1):
        g, _ = _bad(rig, lambda g, c: c, prompt=[1, bad, 3])
        assert g.resp_fields["status"] == ST["ERANGE"]


def test_unusable_response_descriptor_gives_used_len_0(rig: Rig) -> None:
    for mutate in (lambda g, c: c[:3],                                   # no resp: out is too short
                   lambda g, c: [*c[:3], (c[3][0], 8, W)],               # resp too short
                   lambda g, c: [*c[:3], (RAM_BASE - 64, 32, W)],        # resp outside RAM
                   lambda g, c: c[:2]):                                  # nothing writable
        _, used_len = _bad(rig, mutate)
        assert used_len == 0


def test_descriptor_loop_and_bad_index(rig: Rig) -> None:
    g = Gen(rig, [1, 2], 2)
    d = rig.free_desc[0]
    # a chain whose descriptor points back to itself
    rig.ram.write(DESC + 16 * d, struct.pack("<QIHH", g.hdr, ai.REQ.size, NEXT, d))
    rig.ram.set_u16(AVAIL + 4 + 2 * (rig.avail_idx % QNUM), d)
    rig.avail_idx += 1
    rig.ram.set_u16(AVAIL + 2, rig.avail_idx)
    rig.notify()
    assert rig.used() == [(d, 0)]  # no writable descriptor reached: nothing to report in
    # a next index past the queue, after a good resp descriptor is impossible (resp is
    # last), so check the head itself past the queue
    rig.ram.set_u16(AVAIL + 4 + 2 * (rig.avail_idx % QNUM), QNUM + 5)
    rig.avail_idx += 1
    rig.ram.set_u16(AVAIL + 2, rig.avail_idx)
    rig.notify()
    assert rig.used() == [(QNUM + 5, 0)]


def test_c_walker_takes_good_chains_and_leaves_the_rest_to_python(tiny: engines_local.LoadedModel,
                                                                  ) -> None:
    """harness/fastpath/virtq.c walks each chain _walk would take as it is and hands it to
    the device; at one with a problem it stops, and Python's _notify goes on from that
    chain (the avail index is shared), wording the error as without the C bus."""
    rig = Rig(tiny, native=True)
    try:
        assert rig.handshake() & V["VIRTIO_STATUS_DRIVER_OK"]
        vq = rig.c[2]  # type: ignore[index]
        good, bad, after = (Gen(rig, [5, 6, 7], 4, reqid=i) for i in (1, 2, 3))
        hdr, tok, out, resp = bad.chain()
        good.head = rig.offer(good.chain())
        bad.head = rig.offer([hdr, out, tok, resp])  # readable after writable
        after.head = rig.offer(after.chain())
        rig.notify()
        assert (vq.chains, vq.notifies, rig.dev.notifies) == (1, 0, 1)
        wait_done(rig, good, bad, after)
        assert [g.resp_fields["status"] for g in (good, bad, after)] == [
            ST["OK"], ST["EINVAL"], ST["OK"]]
        assert good.tokens == after.tokens == engine_ids(tiny, [5, 6, 7], 4)
        assert rig.dev.queues[0].last_avail == vq.last_avail == 3
        again = Gen(rig, [5, 6, 7], 4, reqid=4).submit()  # all in C now
        wait_done(rig, again)
        assert (vq.chains, vq.notifies, rig.dev.notifies) == (2, 1, 2)
        assert again.tokens == good.tokens
        rig.w("STATUS", 0)  # a reset: the C walker stops, the queue starts over
        assert not vq.enabled and rig.dev.queues[0].last_avail == 0
    finally:
        rig.close()


def test_reset_drops_requests_in_flight(rig: Rig) -> None:
    g = Gen(rig, [31, 32], 2000).submit()
    rig.pump(lambda: g.resp_fields["ngenerated"] > 2)
    rig.w("STATUS", 0)
    before = rig.ram.read(g.out, 4 * 2000) + rig.ram.read(g.resp, ai.RESP.size)
    time.sleep(0.2)
    while rig.posted:
        rig.posted.popleft()()
    assert rig.ram.read(g.out, 4 * 2000) + rig.ram.read(g.resp, ai.RESP.size) == before
    assert rig.dev.jobs == {} and rig.r("INTERRUPT_STATUS") == 0


def test_trace_register(rig: Rig) -> None:
    tr = ai.A["VIRTIO_AI_TRACE"]
    rig.dev.write(tr, 4, (ai.A["AI_TR_SUBMIT"] << 24) | 42)
    g = Gen(rig, [1, 2, 3], 3, reqid=42).submit()
    wait_done(rig, g)
    rig.dev.write(tr, 4, (ai.A["AI_TR_WAITED"] << 24) | 42)
    ev = [(e.event, e.source) for e in rig.dev.trace if e.reqid == 42]
    assert ev == [("submit", "kernel"), ("accept", "device"), ("engine", "device"),
                  ("first", "device"), ("done", "device"), ("used", "device"),
                  ("waited", "kernel")]
    ts = [e.t_us for e in rig.dev.trace if e.reqid == 42]
    assert ts == sorted(ts)
    with pytest.raises(DeviceError, match="write-only"):
        rig.dev.read(tr, 4)
    with pytest.raises(DeviceError):
        rig.dev.write(tr, 2, 0)


# ---------------------------------------------------------------- SmolLM2

@pytest.fixture(scope="module")
def smol() -> engines_local.LoadedModel:
    from pyllm.registry import resolve

    try:
        resolve("smol")
    except Exception as exc:
        pytest.skip(f"SmolLM2 not installed ({exc})")
    lm = engines_local.LoadedModel.load("smol")
    yield lm
    lm.close()


def test_smol_requests_equal_the_engine(smol: engines_local.LoadedModel) -> None:
    r = Rig(smol)
    r.handshake()
    c = r.cfg()
    assert c["name"].rstrip(b"\0") == b"SmolLM2-135M-Instruct" and c["vocab_size"] == 49152
    assert (c["n_layers"], c["dim"], c["eos_token"]) == (30, 576, 2)
    tok = smol.model.tokenizer
    prompts = [tok.encode(t) for t in ("The capital of France is", "Once upon a time",
                                       "def fibonacci(n):")]
    gens = [Gen(r, p, 16, reqid=i + 1).submit() for i, p in enumerate(prompts)]
    wait_done(r, *gens)
    for g, p in zip(gens, prompts, strict=True):
        assert g.resp_fields["status"] == ST["OK"]
        assert g.tokens == engine_ids(smol, p, 16)
    assert "Paris" in tok.decode(gens[0].tokens)
    r.close()


def test_emulator_style_load_does_not_starve_the_engine(smol: engines_local.LoadedModel) -> None:
    """Sanity (not a timing assertion): requests finish while another Python thread spins."""
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        r = Rig(smol)
        r.handshake()
        g = Gen(r, [504, 3575, 282, 4649, 314], 8).submit()
        wait_done(r, g)
        assert g.tokens == engine_ids(smol, [504, 3575, 282, 4649, 314], 8)
        r.close()
    finally:
        stop.set()
        t.join()


# ---------------------------------------------------------------- real guest code

def _stub_run(model: engines_local.LoadedModel | str, prompt: list[int],
              npredict: int) -> tuple[str, list[virtio_ai.VirtioAi]]:
    from machine_stubs import Run
    from made import stub

    from harness.abi import bootinfo

    elf = stub("aidev")
    devs: list[virtio_ai.VirtioAi] = []
    r = Run(elf, cmd=" ".join(map(str, [npredict, *prompt])), flags=bootinfo.F_AIDEV,
            extra_devices=[virtio_ai.device_entry(model, created=devs)], timeout=60.0)
    res = r.run()
    assert res.exit.value == "poweroff" and res.status == 0, (res, r.text)
    return r.text, devs


def test_bare_metal_guest_drives_the_device(tiny: engines_local.LoadedModel) -> None:
    prompt = [17, 300, 42, 7]
    text, devs = _stub_run(str(TINY), prompt, 200)  # loads at boot, on a host thread
    ids = " ".join(map(str, engine_ids(tiny, prompt, 200)))
    lines = text.splitlines()
    assert lines[0] in ("ready tiny_text load_us>0 config irq",
                        "ready tiny_text load_us>0 at once")
    assert lines[1:] == [
        f"poll status 0 n 200 ids {ids} times ok",
        "progress seen",
        f"wfi status 0 n 200 ids {ids} times ok",
        "irq wake",
        "efault ok",
    ]
    kinds = [(e.event, e.source) for e in devs[0].trace if e.reqid == 7]
    assert kinds[:7] == [("submit", "kernel"), ("accept", "device"), ("engine", "device"),
                         ("first", "device"), ("done", "device"), ("used", "device"),
                         ("submit", "kernel")]


def test_bare_metal_guest_with_smol(smol: engines_local.LoadedModel) -> None:
    prompt = smol.model.tokenizer.encode("The capital of France is")
    text, _ = _stub_run(smol, prompt, 12)  # a model loaded before boot: READY at once
    ids = " ".join(map(str, engine_ids(smol, prompt, 12)))
    lines = text.splitlines()
    assert lines[0].startswith(f"ready {smol.model.info.title} load_us>0"), lines[0]
    assert lines[1] == lines[3].replace("wfi", "poll") == f"poll status 0 n 12 ids {ids} times ok"
    assert lines[4:] == ["irq wake", "efault ok"]


def test_trace_counts_requests_in_flight() -> None:
    """harness/run/trace.py's counter track: requests in the kernel's queue (submit ->
    dispatch or freed) and in the engine (engine -> done) at every change; a request that
    leaves as another enters at the same µs is never counted twice."""
    from harness.run import trace as ai_trace

    E = ai.TraceEvent  # noqa: N806
    evs = [E(0, "submit", 1, "kernel"), E(5, "submit", 2, "kernel"), E(10, "dispatch", 1, "kernel"),
           E(12, "engine", 1, "device"), E(20, "dispatch", 2, "kernel"),
           E(22, "engine", 2, "device"), E(30, "done", 1, "device", 0),
           E(30, "submit", 3, "kernel"), E(31, "freed", 3, "kernel"),
           E(40, "done", 2, "device", 0)]
    assert ai_trace.in_flight(evs) == [(0, 1, 0), (5, 2, 0), (10, 1, 0), (12, 1, 1), (20, 0, 1),
                                       (22, 0, 2), (30, 1, 1), (31, 0, 1), (40, 0, 0)]
    assert ai_trace.engine_share(evs) == pytest.approx({1: 20 / 28, 2: 8 / 28})
    counters = [e for e in ai_trace.chrome_trace([("b", evs)])["traceEvents"] if e["ph"] == "C"]
    assert [(e["ts"], e["args"]["engine"]) for e in counters][-2:] == [(31, 1), (40, 0)]
