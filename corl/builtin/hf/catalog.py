"""What the hf backend knows by name, importing nothing: the zoo's models and where built models
are cached. (The modules that build them import this one, never the other way round.)"""

from __future__ import annotations

import os
from pathlib import Path

#: text zoo name -> transformers family (``zoo:NAME``; :mod:`corl.builtin.hf.zoo`)
TEXT_ZOO = {"llama-tiny": "llama", "qwen2-tiny": "qwen2", "gpt-neox-tiny": "gpt_neox", "gpt2-tiny": "gpt2"}
#: vision-language zoo name -> design (:mod:`corl.builtin.hf.vision_zoo`)
VISION_ZOO = {"llava-tiny": "llava", "idefics3-tiny": "idefics3"}

CACHE_ENV = "CORL_CACHE_DIR"


def cache_root() -> Path:
    """Where built models are cached: ``$CORL_CACHE_DIR``, default ``~/.cache/corl``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "corl")
