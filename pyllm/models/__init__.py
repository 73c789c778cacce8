"""Model architectures. `base.py` is the protocol every architecture implements; `llama.py` is
SmolLM2 (Llama), `qwen35.py` is Qwen3.5 (hybrid Gated DeltaNet). Models are built by the registry
(`pyllm.registry.load`), not imported directly by users."""
