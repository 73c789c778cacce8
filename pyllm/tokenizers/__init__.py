"""Tokenizers: text <-> token ids. `base.py` is the interface; `bpe.py` builds SmolLM2's byte-level
BPE from a GGUF vocabulary (or a tokenizer.json); `qwen.py` wraps Qwen3.5's vocabulary."""
