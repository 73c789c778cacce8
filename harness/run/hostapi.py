"""Host-side API for tests and benchmarks: boot the machine with the AI device, run
commands in the guest, read the results.

    with AiSession("smol") as s:              # loads the model once, in this process
        run = s.run("aitest --batch 4")       # one boot: console text, exit status, trace
        res = s.llmrun([504, 3575, 282], 8)   # `llmrun --timing` parsed: ids + timings
        s.tokenizer.decode(res.ids)

Every `run` boots a fresh machine (the kernel powers off when the commands end), but the
model is loaded once: `preload=True` loads it here before the first boot, `preload=False`
lets the first boot's device load it on its host thread (the real cold-start path, with
the Model Loading Time the guest sees) and later boots reuse it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.abi import cheader
from harness.devices.virtio_ai import VirtioAi
from harness.engines.local import LoadedModel
from harness.machine.board import Machine
from harness.machine.config import DEFAULT_FS, DEFAULT_KERNEL, MachineConfig
from harness.run.launch import GuestRun, add_ai_device, ai_device, launch

if TYPE_CHECKING:
    from pyllm.tokenizers.base import Tokenizer

__all__ = ["AiSession", "GuestError", "GuestRun", "LlmResult", "check_model", "parse_llmrun"]
AI_MAX_TOKENS = cheader.load("ai.h")["AI_MAX_TOKENS"]  # prompt tokens per request
LLMRUN_TIMING = re.compile(r"^timing: (.*)$", re.M)
IDS_LINE = re.compile(r"^\d+( \d+)*$")


class GuestError(Exception):
    """A guest command did not produce what was expected; the message has its output."""


@dataclass
class LlmResult:
    """One `llmrun --timing` result: the generated ids and the guest-measured timings."""

    ids: list[int]
    timing: dict[str, Any]  # the `timing:` line: model, synthetic, load_us, ttft_us, tpot_us,
                            # e2e_us, prompt, generated, submit, dispatch, accept, first, done,
                            # waited, cached (prompt tokens from the prefix cache) (ints
                            # except model)

    @property
    def synthetic(self) -> bool:
        return bool(self.timing.get("synthetic"))


def parse_llmrun(output: str) -> list[LlmResult]:
    """The results in `llmrun --timing` output: each `timing:` line with the ids line
    printed before it (user_c/llmrun.c documents the format)."""
    results = []
    lines = output.replace("\r\n", "\n").split("\n")
    last_ids: list[int] | None = None
    for line in lines:
        line = line.strip()
        if IDS_LINE.match(line):
            last_ids = [int(x) for x in line.split()]
            continue
        m = LLMRUN_TIMING.match(line)
        if m is None:
            continue
        timing: dict[str, Any] = {}
        for key, quoted, value in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', m.group(1)):
            timing[key] = int(value) if re.fullmatch(r"-?\d+", value) else quoted or value
        results.append(LlmResult(last_ids or [], timing))
        last_ids = None
    return results


def check_model(spec: str) -> str:
    """Resolve a model name/path without loading it; raises PyllmError (one line) if it
    cannot be used. Returns a display name."""
    from pyllm import registry

    name, path = registry.resolve(spec)
    fmt, arch = registry.detect(path)
    build = registry.builder(fmt, arch, path)  # an unsupported architecture fails here
    if (fmt, arch) == ("gguf", "qwen35"):
        build(path)  # refuses every such file at once, reading nothing (pyllm/models/qwen35.py)
    _check_structure(fmt, path)
    return f"{name} ({path.name})"


def _check_structure(fmt: str, path: Path) -> None:
    """Parse the weights' headers and tensor tables (no data is read): a truncated or
    malformed file fails here with its one-line FormatError, not later on the AI
    device's loading thread after the guest has booted."""
    if fmt == "gguf":
        from pyllm.loaders.gguf import open_gguf

        files = [path] if path.is_file() else sorted(path.glob("*.gguf"))
        for f in files[:1]:
            open_gguf(f)
    elif fmt == "hf":
        from pyllm.loaders.safetensors import open_safetensors

        open_safetensors(path)


class AiSession:
    """Boots machines with the AI device serving one model (see the module docstring)."""

    def __init__(self, model: str | LoadedModel | None = "smol", *,
                 kernel: Path = DEFAULT_KERNEL, fs: Path = DEFAULT_FS, ram_size: int = 128 << 20,
                 clock: str = "host", preload: bool = True,
                 log: Callable[[str], None] | None = None, cpus: int = 1) -> None:
        self.kernel, self.fs, self.ram_size, self.clock = kernel, fs, ram_size, clock
        self.cpus = cpus
        self.log = log
        self.spec = model if isinstance(model, str) else None
        self.lm: LoadedModel | None = model if isinstance(model, LoadedModel) else None
        self._own_lm = False
        if self.spec is not None and preload:
            self.lm = LoadedModel.load(self.spec)
            self._own_lm = True
        self.runs = 0

    # ---------------------------------------------------------------- model
    @property
    def tokenizer(self) -> Tokenizer:
        if self.lm is not None:
            return self.lm.model.tokenizer
        from pyllm.registry import load_tokenizer

        assert self.spec is not None, "a session without a model has no tokenizer"
        return load_tokenizer(self.spec)

    # ---------------------------------------------------------------- boots
    def config(self, cmd: str, *, timeout: float | None,
               output: Callable[[bytes], None] | None,
               created: list[VirtioAi], files: Mapping[str, bytes] | None = None,
               ) -> MachineConfig:
        """The MachineConfig of one boot (with the AI device unless the session has none);
        `files` ({path: contents}) are added to a copy of the disk image, in memory."""
        config = MachineConfig(kernel=self.kernel, fs=self.fs, ram_size=self.ram_size,
                               clock=self.clock, cmd=cmd, timeout=timeout, output=output,
                               cpus=self.cpus)
        if files:
            from harness.disk.fsbuild import with_files

            config.disk_data = bytearray(with_files(Path(self.fs).read_bytes(), files))
        model = self.lm if self.lm is not None else self.spec
        if model is not None:
            add_ai_device(config, model, log=self.log,
                          allow_load=(self.spec,) if self.spec else (), created=created)
        return config

    def run(self, cmd: str, *, timeout: float | None = 300.0,
            echo: Callable[[bytes], None] | None = None,
            during: Callable[[Machine], None] | None = None,
            files: Mapping[str, bytes] | None = None) -> GuestRun:
        """Boot, run `cmd` through init's `sh -c`, power off; the console is captured (and
        also passed to `echo`). `during(machine)` runs on a host thread meanwhile; `files`
        are added to the disk (see config)."""

        def keep_model(machine: Machine) -> None:
            dev = ai_device(machine)
            if dev is not None and self.lm is None:
                self.lm = dev.release_model()  # the next boot reuses what this one loaded
                self._own_lm = self.lm is not None

        config = self.config(cmd, timeout=timeout, output=None, created=[], files=files)
        run = launch(config, echo=echo, during=during, before_close=keep_model)
        self.runs += 1
        return run

    def llmrun(self, ids: list[int], predict: int, *, timeout: float | None = 300.0,
               prog: str = "llmrun", extra: str = "") -> LlmResult:
        """`llmrun --timing --predict N ids` in the guest; its ids and timings."""
        run = self.run(f"{prog} --timing --predict {predict} {extra} "
                       + " ".join(map(str, ids)), timeout=timeout)
        results = parse_llmrun(run.output)
        if not run.ok or len(results) != 1:
            raise GuestError(f"llmrun failed ({run.exit.value}, status {run.status}"
                             f"{', ' + run.message if run.message else ''}):\n{run.output[-3000:]}")
        return results[0]

    def close(self) -> None:
        if self.lm is not None and self._own_lm:
            self.lm.close()
        self.lm = None

    def __enter__(self) -> AiSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
