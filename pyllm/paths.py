"""Where pyllm's files live: the models directory, the repack cache, the SmolLM2 file.

Below every other layer (the backend's repack cache and the course models need these as
much as the registry does), so it imports nothing of pyllm.
"""

from __future__ import annotations

import os
from pathlib import Path

SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # `harness models fetch smol` puts it here


def models_dir() -> Path:
    """Where named models live: PYLLM_MODELS_DIR, else the checkout's models/."""
    env = os.environ.get("PYLLM_MODELS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "models"


def cache_dir() -> Path:
    """Where repacked weights are cached: PYLLM_CACHE_DIR, else models/.cache."""
    env = os.environ.get("PYLLM_CACHE_DIR")
    return Path(env) if env else models_dir() / ".cache"
