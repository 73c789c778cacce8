"""Write tests/data/smol_golden.npz: SmolLM2 reference logits from HF transformers (f32).

transformers dequantizes the GGUF file to an f32 model (the same weights our exact path uses), so
its logits are the reference for pyllm's numpy-f32 path (tolerance 1e-3) and, through greedy ids and
top-1 margins, for the fast int8 path. Stored per prompt (compact, ~150 KB in all):
  ids            the prompt's token ids (from transformers' own GGUF tokenizer)
  greedy         up to 16 greedy tokens after the prompt (transformers `generate`, no sampling;
                 fewer when it emitted <|im_end|>)
  top_ids/top    the 16 largest logits at every position of prompt + greedy
  probe          logits of 128 fixed vocabulary ids (probe_ids) at the same positions
Run: python scripts/smol_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
Needs the `ref` extra (torch, transformers, accelerate); takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "smol_golden.npz"

# text prompts; "chat:" ones go through the chat template
PROMPTS = [
    "The capital of France is",
    "chat:What is the capital of France?",
    "In 2024, 12345 people paid $3.14 each; café, 日本語, emoji 😀 and   spaces.",
    "def fib(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who repaired every clock in the valley. One winter morning a stranger arrived "
    "with a watch that ran backwards, and asked him to",
]
N_TOP = 16
N_PROBE = 128
N_GREEDY = 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path,
                    default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.model.parent, gguf_file=args.model.name)
    model = AutoModelForCausalLM.from_pretrained(args.model.parent, gguf_file=args.model.name,
                                                 dtype=torch.float32).eval()
    print(f"transformers loaded the GGUF in {time.perf_counter() - t0:.1f} s")
    vocab = model.config.vocab_size
    probe = np.random.default_rng(1234).choice(vocab, N_PROBE, replace=False).astype(np.int32)
    out: dict[str, np.ndarray] = {"probe_ids": probe}
    meta = []
    for i, p in enumerate(PROMPTS):
        if p.startswith("chat:"):
            text = tok.apply_chat_template([{"role": "user", "content": p[5:]}], tokenize=False,
                                           add_generation_prompt=True)
        else:
            text = p
        ids = tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            gen = model.generate(x, max_new_tokens=N_GREEDY, do_sample=False,
                                 attention_mask=torch.ones_like(x), pad_token_id=2)
            # logits at every position of prompt + greedy continuation (for top-1 margins)
            logits = model(gen).logits[0].float().numpy()  # (n + greedy, vocab)
        top_ids = np.argsort(-logits, axis=1, kind="stable")[:, :N_TOP].astype(np.int32)
        out[f"p{i}_ids"] = np.asarray(ids, np.int32)
        out[f"p{i}_top_ids"] = top_ids
        out[f"p{i}_top"] = np.take_along_axis(logits, top_ids, axis=1).astype(np.float32)
        out[f"p{i}_probe"] = logits[:, probe].astype(np.float32)
        out[f"p{i}_greedy"] = gen[0, len(ids):].numpy().astype(np.int32)
        meta.append({"prompt": p, "text": text, "n": len(ids)})
        print(f"prompt {i}: {len(ids)} tokens, greedy {tok.decode(out[f'p{i}_greedy'])!r}")
    out["meta"] = np.frombuffer(json.dumps({
        "prompts": meta, "transformers": __import__("transformers").__version__,
        "torch": torch.__version__, "model": args.model.name}).encode(), dtype=np.uint8)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
