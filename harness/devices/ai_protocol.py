"""The AI device's side of kernel_c/virtio_ai.h and ai.h: registers, features, request
and response layouts, status codes, trace events; and the records the device keeps per chain
and per request (harness/devices/virtio_ai.py says how they are used)."""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.abi import cheader
from harness.devices.virtio_mmio import REG, Chain, V
from harness.engines.base import AiBackend, Handle

if TYPE_CHECKING:
    pass

A = cheader.load("virtio_ai.h")
AI_H = cheader.load("ai.h")
CFG = A.struct("virtio_ai_config")
REQ = A.struct("ai_dev_req")
RESP = A.struct("ai_dev_resp")
REQ_FIELDS = ("type", "id", "ntokens", "npredict", "flags", "seed", "temp_milli", "top_k",
              "top_p_milli", "target", "speculate")
REQ_FMT = REQ.scalar_struct(*REQ_FIELDS)
RESP_FMT = RESP.scalar_struct("status", "ngenerated", "t_accept", "t_first", "t_done",
                              "ncached", "nsteps")
NGEN_OFF, TFIRST_OFF = RESP.offset("ngenerated"), RESP.offset("t_first")
TRACE = A["VIRTIO_AI_TRACE"]
PROGRESS_WANT = A["VIRTIO_AI_PROGRESS_WANT"]  # write-only: progress interrupts wanted
CACHE_REG = A["VIRTIO_AI_CACHE"]  # read-only: struct ai_cache, one register per field
CACHE = AI_H.struct("ai_cache")
CACHE_FIELDS = {CACHE_REG + CACHE.offset(f): f for f in CACHE.fields}
INT_CONFIG = V["VIRTIO_INT_CONFIG"]
F_PROGRESS = 1 << A["VIRTIO_AI_F_PROGRESS"]
F_SAMPLING = 1 << A["VIRTIO_AI_F_SAMPLING"]
F_CANCEL = 1 << A["VIRTIO_AI_F_CANCEL"]
F_PROGRESS_IRQ = 1 << A["VIRTIO_AI_F_PROGRESS_IRQ"]
INT_PROGRESS = A["VIRTIO_AI_INT_PROGRESS"]
PROGRESS_US = A["VIRTIO_AI_PROGRESS_US"]  # progress interrupts at most this often
STOP_EOS = AI_H["AI_STOP_EOS"]
NO_SPEC = AI_H["AI_NO_SPEC"]
MAX_SPECULATE = AI_H["AI_MAX_SPECULATE"]

ST = A.prefixed("AI_ST_")            # "OK" -> 0, "EINVAL" -> 1, ...
DEV_STATE = A.prefixed("AI_DEV_")    # "NOMODEL" .. "FAILED"
STATE_NAMES = {v: k.lower() for k, v in DEV_STATE.items()}
REQ_TYPE = A.prefixed("AI_REQ_")     # "GENERATE", "CANCEL", "LOAD"
TRACE_EVENTS = {v: k.lower() for k, v in A.prefixed("AI_TR_").items()}  # 1 -> "submit", ...
PROGRESS_INTERVAL_S = PROGRESS_US / 1e6  # progress updates at most this often (one guest tick)
IDLE_INTERVAL_S = A["VIRTIO_AI_PROGRESS_IDLE_US"] / 1e6  # ... while no reader waits for them
TRACE_CAP = 200_000                  # the latest events kept (a long session must not grow)
_U64 = struct.Struct("<Q")


@dataclass
class TraceEvent:
    """One point in a request's life, guest microseconds since boot."""

    t_us: int
    event: str   # kernel: submit, dispatch, complete, waited, failed, freed;
                 # device: accept, engine (handed to the engine), first, done, used (on the
                 # used ring, interrupt raised),
                 # cancel, load, loaded
    reqid: int   # the kernel's request id (0 for device-wide events)
    source: str  # "kernel" or "device"
    arg: int = 0  # done: the AI_ST_* status; accept: prompt tokens; first: cached ones


class AiChain(Chain):
    """A chain as the device found it: descriptors, and why it is malformed (if it is)."""

    def __init__(self, head: int) -> None:
        super().__init__(head)
        self.error: str | None = None


@dataclass(eq=False, slots=True)
class Job:
    """A request the device accepted and has not completed yet."""

    head: int
    queue: int
    epoch: int        # device reset generation: a completion of an older epoch is dropped
    kind: int         # AI_REQ_*
    reqid: int        # the kernel's id
    resp: int         # guest address of struct ai_dev_resp
    out: int = 0      # guest address of out[]
    npredict: int = 0
    t_accept: int = 0
    t_first: int = 0
    t_done: int = 0
    written: int = 0   # ids copied into out[] so far
    delivered: int = 0  # ids the backend delivered (past npredict only for a broken one)
    pending: list[int] = field(default_factory=list)  # ids produced, not yet copied
    status: int | None = None  # final AI_ST_* once the engine finished it
    handle: Handle | None = None
    lm: AiBackend | None = None  # the backend serving it
    t_first_perf: float = 0.0  # backend perf_counter times of the first and latest token
    t_last_perf: float = 0.0


def _u32s(buf: memoryview) -> list[int]:
    """Little-endian u32s as a list of ints (a cast view on a little-endian host: one C
    call on the hand-off path)."""
    if _LITTLE:
        return buf.cast("I").tolist()
    return list(struct.unpack(f"<{len(buf) // 4}I", buf))


_LITTLE = sys.byteorder == "little" and struct.calcsize("I") == 4
VENDOR_ID_REG = REG["VENDOR_ID"]
CONFIG_GENERATION_REG = REG["CONFIG_GENERATION"]
