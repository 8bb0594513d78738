"""What the hf backend knows by name, importing nothing: the zoo's models and where built models
are cached. (The modules that build them import this one, never the other way round.)"""

from __future__ import annotations

import os
from pathlib import Path

#: text zoo name -> transformers family (``zoo:NAME``; :mod:`corl.builtin.hf.models.zoo`)
TEXT_ZOO = {"llama-tiny": "llama", "qwen2-tiny": "qwen2", "gpt-neox-tiny": "gpt_neox", "gpt2-tiny": "gpt2",
            "llama-h32": "llama_h32"}  # 2 heads of 32: the narrowest vLLM's CPU attention runs (16 is refused)
#: text zoo models shipped trained inside the package (no warm-start) -> transformers family; how
#: they were built and how to rebuild them: :mod:`corl.builtin.hf.models.shipped`
SHIPPED_ZOO = {"llama-add3": "llama", "qwen2-add3": "qwen2", "neox-add3": "gpt_neox",
               "llama-add3-weak": "llama", "qwen2-add3-weak": "qwen2", "neox-add3-weak": "gpt_neox",
               "qwen2-add3-strong": "qwen2"}
#: vision-language zoo name -> design (:mod:`corl.builtin.hf.vision.zoo`)
VISION_ZOO = {"llava-tiny": "llava", "idefics3-tiny": "idefics3"}
#: vision-language zoo models shipped trained inside the package (warm-started on the ``shapes`` task,
#: the VLM pair's matched bases) -> design; built like the text ones (:mod:`corl.builtin.hf.models.shipped`)
SHIPPED_VISION_ZOO = {"llava-shapes": "llava", "idefics3-shapes": "idefics3"}

CACHE_ENV = "CORL_CACHE_DIR"


def cache_root() -> Path:
    """Where built models are cached: ``$CORL_CACHE_DIR``, default ``~/.cache/corl``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "corl")


def is_shipped(model: str) -> bool:
    """Whether ``model = "..."`` names a zoo model shipped trained (text or vision): no warm-start."""
    return model.startswith("zoo:") and (model[4:] in SHIPPED_ZOO or model[4:] in SHIPPED_VISION_ZOO)


def shipped_folder(name: str) -> Path:
    """The package folder holding shipped zoo model ``name`` (a Hugging Face model folder)."""
    return Path(__file__).resolve().parent / "zoo_weights" / name
