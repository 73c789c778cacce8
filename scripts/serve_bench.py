"""What HTTP adds: throughput and TTFT of C concurrent clients through `harness serve` against the
same requests on pyllm's Engine directly, in one run (rounds alternate the two, so a change in the
machine's load hits both).

    python scripts/serve_bench.py --model smol --clients 1,8 --requests 4 --max-tokens 32

Each client sends `--requests` requests one after another (a distinct prompt each, greedy,
ignore_eos, so every request generates exactly --max-tokens tokens; the prompts are shorter than a
prefix-cache block, so no request reuses another's prefill). TTFT is client-side: the request sent
-> its first token received (through the server: the first streamed chunk). Every answer through
the server is checked against the engine's ids for the same prompt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.serve.process import ServerProcess  # noqa: E402


@dataclass
class Result:
    ttft_s: list[float]
    tokens: int
    wall_s: float

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.wall_s

    def ttft(self, q: float) -> float:
        xs = sorted(self.ttft_s)
        return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_clients(one: Callable[[list[int]], tuple[float, list[int]]], prompts: list[list[int]],
                clients: int) -> tuple[Result, list[list[int]]]:
    """`clients` threads share `prompts` round-robin; `one(ids)` -> (ttft, generated ids)."""
    ttfts: list[float] = [0.0] * len(prompts)
    out: list[list[int]] = [[] for _ in prompts]
    go = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        go.wait()
        for i in range(c, len(prompts), clients):
            ttfts[i], out[i] = one(prompts[i])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return Result(ttfts, sum(len(o) for o in out), wall), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smol")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--requests", type=int, default=4, help="per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import openai

    from harness.engines.local import LoadedModel

    lm = LoadedModel.load(args.model)
    tok = lm.model.tokenizer
    n = args.max_tokens

    def direct(ids: list[int]) -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        req = lm.engine.submit(ids, max_new_tokens=n, stop_ids=())
        next(iter(req))
        return time.perf_counter() - t0, req.wait()

    with ServerProcess(args.model, max_waiting=1024) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="unused", max_retries=0, timeout=600)

        def http(ids: list[int]) -> tuple[float, list[int]]:
            t0 = time.perf_counter()
            ttft, got = 0.0, []
            for chunk in client.completions.create(
                    model=srv.model, prompt=ids, max_tokens=n, temperature=0, stream=True,
                    extra_body={"return_token_ids": True, "ignore_eos": True}):
                new = chunk.choices[0].model_extra.get("token_ids") or []
                if new and not got:
                    ttft = time.perf_counter() - t0
                got += new
            return ttft, got

        http(tok.encode("warm up"))
        print(f"{args.model}: {args.requests} requests per client x {n} tokens, "
              f"{args.rounds} rounds (medians), engine direct vs through {srv.url}")
        print(f"{'clients':>7} {'path':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9}")
        for c in (int(x) for x in args.clients.split(",")):
            prompts = [tok.encode(f"Request {i} of client {i % c}: tell me about number {i}")
                       for i in range(c * args.requests)]
            rows: dict[str, list[Result]] = {"engine": [], "http": []}
            for _ in range(args.rounds):
                ref, want = run_clients(direct, prompts, c)
                rows["engine"].append(ref)
                res, got = run_clients(http, prompts, c)
                rows["http"].append(res)
                bad = sum(g != w for g, w in zip(got, want, strict=True))
                if bad:
                    print(f"  {bad} of {len(got)} answers through HTTP differ from the engine's")
            for path, rs in rows.items():
                print(f"{c:>7} {path:>7} {statistics.median(r.tok_per_s for r in rs):>8.1f} "
                      f"{statistics.median(r.ttft(0.5) for r in rs) * 1e3:>7.1f}ms "
                      f"{statistics.median(r.ttft(0.99) for r in rs) * 1e3:>7.1f}ms")
    lm.close()


if __name__ == "__main__":
    main()
