"""The ``hf_vision`` backend: transformers image-text-to-text models (LLaVA, Idefics3 / SmolVLM,
Qwen2-VL, ...) as agents, built on the text backend's shared parts (:mod:`corl.builtin.hf.backend`:
the batch, the loading and length checks, ``ModelSettings``).

* :mod:`.agent` (``VisionAgent``), :mod:`.sampler` (batched ``generate`` with each row's image
  inputs), :mod:`.inputs` (images loaded, prompts through the processor, rows collated);
* :mod:`.zoo`: the tiny vision-language zoo models (``zoo:llava-tiny``, ``zoo:idefics3-tiny``),
  warm-started by the models part's trainer on prompts encoded exactly as the agent encodes them,
  which is why it sits here and not in :mod:`corl.builtin.hf.models` (that part imports nothing
  of the agents);
* :mod:`.config`: the agent's and sampler's tables (the sampler takes no ``stop``).
"""

from __future__ import annotations

from corl.builtin.hf.models.config import zoo_needs_seed
from corl.builtin.hf.vision.config import HFVisionAgentConfig, VisionSamplerConfig
from corl.context import Context


def make_vision_agent(config: HFVisionAgentConfig, ctx: Context):
    from corl.builtin.hf.vision.agent import VisionAgent

    return VisionAgent(config, ctx)


def make_vision_sampler(config: VisionSamplerConfig, ctx: Context | None = None):
    from corl.builtin.hf.vision.sampler import VisionSampler

    return VisionSampler(config, ctx)


make_vision_agent.check = zoo_needs_seed  # a trait (corl.traits.AgentTraits), as the hf agent's
