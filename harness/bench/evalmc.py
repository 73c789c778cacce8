"""`harness bench eval`: a multiple-choice set scored by lm-evaluation-harness against
`harness serve`, on the int8 path and on the exact float32 path of the same model, in one run.

What an evaluation user does: `harness serve --backend B` (harness/serve/), then lm-eval's
`local-completions` model pointed at it, with the server's own tokenizer (`/tokenize`,
`/tokenizer_info`: tokenizer_backend=remote) and its loglikelihood requests (echo, logprobs=1,
max_tokens=1), eight prompts per request (batch_size 8). The task is ours
(harness/bench/evaldata/mc_basics.jsonl: 40 questions of general knowledge with four answers,
written for this bench, no download): "Question: ...\\nAnswer:" and each choice as the
continuation; acc is the share of questions whose right answer has the highest loglikelihood,
acc_norm the same per byte of the answer (lm-eval's definitions). Beside the accuracies: how
often the two paths pick the same answer, and how far apart their loglikelihoods are.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.errors import BenchError

DATA = Path(__file__).parent / "evaldata" / "mc_basics.jsonl"
TASK = "mc_basics"
LABELS = {"c": "int8 (C kernels)", "numpy-q8": "int8 (numpy)", "numpy-f32": "exact f32 (numpy)"}
TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


@dataclass
class PathResult:
    """One backend's scores."""

    backend: str
    acc: float
    acc_stderr: float
    acc_norm: float
    acc_norm_stderr: float
    seconds: float  # lm-eval's whole run against the server
    loglik: list[list[float]] = field(default_factory=list)  # per question, per choice

    @property
    def picks(self) -> list[int]:
        return [max(range(len(ll)), key=ll.__getitem__) for ll in self.loglik]


@dataclass
class EvalReport:
    model: str
    label: str
    n: int  # questions scored
    paths: list[PathResult]


def _lm_eval_available() -> str | None:
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        return ("lm-evaluation-harness is not installed: pip install -e '.[eval]' "
                "(`make test` installs it)")
    return None


def score(url: str, model_name: str, work: Path, limit: int | None,
          log: Path) -> tuple[dict[str, float], list[list[float]], float]:
    """lm-eval against the server at `url` (…/v1): its metrics, each question's choice
    loglikelihoods and its wall time. Raises BenchError with the log's end."""
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{TASK}.yaml").write_text(TASK_YAML.format(task=TASK, data=DATA))
    out = work / "out"
    args = [sys.executable, "-m", "lm_eval", "run", "--model", "local-completions",
            "--model_args", f"base_url={url}/completions,model={model_name},"
            "tokenizer_backend=remote,max_retries=1,timeout=600",
            "--tasks", TASK, "--include_path", str(work), "--batch_size", "8",
            "--output_path", str(out), "--log_samples"]
    if limit:
        args += ["--limit", str(limit)]
    # the data set is a local file: nothing may be fetched from a hub
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_HOME=str(work / "hf"), TOKENIZERS_PARALLELISM="false")
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work,
                            timeout=3600).returncode
    seconds = time.perf_counter() - t0
    results = glob.glob(str(out / "**" / "results_*.json"), recursive=True)
    samples = glob.glob(str(out / "**" / f"samples_{TASK}_*.jsonl"), recursive=True)
    if rc != 0 or not results or not samples:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise BenchError(f"lm_eval failed (exit {rc}): {tail[0][:300]} (log: {log})")
    metrics = json.loads(Path(results[0]).read_text())["results"][TASK]
    docs = [json.loads(line) for line in Path(samples[0]).read_text().splitlines() if line]
    docs.sort(key=lambda d: d["doc_id"])
    loglik = [[float(r[0]) for r in d["filtered_resps"]] for d in docs]
    return ({k.split(",")[0]: float(v) for k, v in metrics.items()
             if isinstance(v, (int, float))}, loglik, seconds)


def run(model: str, backends: list[str], limit: int | None, work: Path,
        say: Callable[[str], None]) -> EvalReport:
    """Serve `model` on each backend in turn and score the set through lm-eval."""
    from harness.serve.process import ServerError, ServerProcess
    from pyllm import registry

    why = _lm_eval_available()
    if why:
        raise BenchError(why)
    from pyllm.errors import PyllmError

    try:
        name, path = registry.resolve(model)
    except PyllmError as exc:  # a model that cannot be found: one line
        raise BenchError(str(exc)) from None
    label = f"{name} ({path.name})"
    paths = []
    for b in backends:
        say(f"bench eval: serving {model} on the {LABELS.get(b, b)} path, lm-eval {TASK}")
        try:
            with ServerProcess(model, args=("--backend", b)) as srv:
                m, ll, secs = score(srv.url, srv.model, work / b, limit, work / f"{b}.log")
        except ServerError as exc:
            raise BenchError(str(exc).splitlines()[0]) from None
        paths.append(PathResult(b, m.get("acc", float("nan")), m.get("acc_stderr", 0.0),
                                m.get("acc_norm", float("nan")),
                                m.get("acc_norm_stderr", 0.0), secs, ll))
        say(f"  acc {paths[-1].acc:.3f}, acc_norm {paths[-1].acc_norm:.3f} ({secs:.0f} s)")
    return EvalReport(model, label, len(paths[0].loglik) if paths else 0, paths)


def markdown(rep: EvalReport) -> list[str]:
    """The table (and its comparison with the first path) as markdown lines."""
    ref = rep.paths[-1] if rep.paths else None
    lines = [f"**{rep.label}**: {rep.n} questions of {DATA.name} through lm-evaluation-"
             "harness (local-completions, the server's tokenizer) against `harness serve`", "",
             "| path | acc | acc_norm | same answer as " + (LABELS.get(ref.backend, ref.backend)
                                                            if ref else "-")
             + " | loglikelihood vs it: median / max abs diff | lm-eval run (s) |",
             "|---|---|---|---|---|---|"]
    for p in rep.paths:
        same, diff = "-", "-"
        if ref is not None and p is not ref and p.loglik and len(p.loglik) == len(ref.loglik):
            agree = sum(a == b for a, b in zip(p.picks, ref.picks, strict=True))
            same = f"{agree} / {len(p.picks)}"
            d = [abs(x - y) for a, b in zip(p.loglik, ref.loglik, strict=True)
                 for x, y in zip(a, b, strict=True)]
            diff = f"{statistics.median(d):.3f} / {max(d):.3f}"
        lines.append(f"| {LABELS.get(p.backend, p.backend)} | {p.acc:.3f} ± "
                     f"{p.acc_stderr:.3f} | {p.acc_norm:.3f} ± {p.acc_norm_stderr:.3f} | "
                     f"{same} | {diff} | {p.seconds:.0f} |")
    return lines


def evaluate(model: str, backends: list[str], limit: int | None, out: Path | None,
             say: Callable[[str], None] = print) -> list[str]:
    """Score the set on each engine path of `backends` (keys of LABELS) and return the
    markdown table's lines; with `out`, lm-eval's outputs and logs, eval.md and eval.json
    stay there (else in a temporary folder)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="harness-eval-") as tmp:
        work = out or Path(tmp)
        rep = run(model, backends, limit, work, say)
        lines = markdown(rep)
        if out is not None:
            (out / "eval.md").write_text("\n".join(lines) + "\n")
            (out / "eval.json").write_text(json.dumps(
                {"model": rep.model, "n": rep.n, "task": TASK,
                 "paths": [vars(p) for p in rep.paths]}, indent=1) + "\n")
    return lines
