"""llama.cpp's own logits for a GGUF file, for comparing engines token for token.

`greedy_logits(path, prompt, n_gen)` runs llama-cpp-python (the reference wheel) in a child
process: greedy generation of n_gen tokens after `prompt`, then the logits of every position
of prompt + generation in one pass. A llama.cpp crash is a ToolError, not a dead caller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pyllm.gguf_tools.convert import ToolError

CHILD = """
import sys
import numpy as np
import llama_cpp
from pyllm.enginebench import plain_buffers
path, out, n_gen, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prompt = [int(x) for x in sys.argv[5].split(",")]
plain_buffers()
m = llama_cpp.Llama(path, n_ctx=max(256, len(prompt) + n_gen + 8), n_batch=512,
                    n_threads=threads, n_threads_batch=threads, logits_all=True, verbose=False)
ids = list(prompt)
m.eval(ids)
for _ in range(n_gen):
    ids.append(int(np.argmax(m.scores[m.n_tokens - 1])))
    m.eval([ids[-1]])
m.reset()
m.eval(ids)
np.savez(out, ids=np.array(ids, np.int32), logits=np.array(m.scores[:len(ids)], np.float32))
"""


def greedy_logits(path: str | os.PathLike[str], prompt: list[int], n_gen: int,
                  threads: int = 2, timeout: float = 600) -> tuple[np.ndarray, np.ndarray]:
    """(ids = prompt + llama.cpp's greedy tokens, logits (len(ids), vocab) of each position)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ref.npz"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
        try:
            p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(out), str(n_gen),
                                str(threads), ",".join(map(str, prompt))],
                               capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise ToolError(f"llama.cpp on {path}: no result within {timeout:.0f} s") from None
        if p.returncode:
            last = (p.stderr.strip().splitlines() or ["no message"])[-1]
            raise ToolError(f"llama.cpp on {path} failed (exit {p.returncode}): {last}")
        with np.load(out) as z:
            return z["ids"], z["logits"]
