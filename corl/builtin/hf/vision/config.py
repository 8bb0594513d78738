"""The ``hf_vision`` agent's and sampler's tables. Only attrs here (nothing heavy).

The sampler's table holds only what :class:`~corl.builtin.hf.vision.sampler.VisionSampler` honours:
``generate`` takes no stop strings here, so ``stop`` (an ``hf`` sampler key) is refused at
validation as an unknown key, with its key path, instead of when the run builds the sampler.
"""

from __future__ import annotations

import attrs

from corl.builtin.hf.backend.config import ModelSettings, SamplingSettings


def _vision_model(instance, attribute, value: str) -> None:
    """Recipe-time check of an ``hf_vision`` agent's ``model`` (forms: corl.builtin.hf.models.sources)."""
    from corl.builtin.hf.models import sources

    sources.check_source(value, vision=True)


@attrs.frozen
class HFVisionAgentConfig(ModelSettings):
    model: str = attrs.field(kw_only=True, validator=_vision_model, metadata={
        "help": "zoo:llava-shapes or zoo:idefics3-shapes (shipped trained on the shapes task), zoo:llava-tiny "
                "or zoo:idefics3-tiny (built and warm-started here), a local folder of an "
                "image-text-to-text model (its config has a vision_config), or a hub id"})


@attrs.frozen
class VisionSamplerConfig(SamplingSettings):
    """Temperature, top-p, top-k, min-p, the repetition penalty, the length limit and rows per ``generate``
    call; no stop strings."""
