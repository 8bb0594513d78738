"""The Hugging Face backend, a built-in plugin like any other: transformers models as agents.

Registered names: agent and sampler ``hf`` (causal LMs: :mod:`~corl.builtin.hf.agent`,
:mod:`~corl.builtin.hf.sampler`) and ``hf_vision`` (image-text-to-text models:
:mod:`~corl.builtin.hf.vision`); the ``[zoo]`` recipe section (how tiny ``zoo:`` models are
warm-started: :mod:`~corl.builtin.hf.zoo`, :mod:`~corl.builtin.hf.vision_zoo`). Models come from
one resolver (:mod:`~corl.builtin.hf.sources`); :mod:`~corl.builtin.hf.engines` is the bridge the
vLLM and SGLang sampler plugins share. A third-party backend can be written by copying this package.

Importing this module is cheap: torch and transformers load inside the factories.
"""

from __future__ import annotations

from corl.builtin.hf.config import HFAgentConfig, HFSamplerConfig, HFVisionAgentConfig, ZooConfig, zoo_needs_seed
from corl.hookspecs import hookimpl
from corl.protocols import ModelFacts


def make_agent(config: HFAgentConfig, ctx):
    from corl.builtin.hf.agent import HFAgent

    return HFAgent(config, ctx)


def make_sampler(config: HFSamplerConfig, ctx=None):
    from corl.builtin.hf.sampler import HFSampler

    return HFSampler(config, ctx)


def make_vision_agent(config: HFVisionAgentConfig, ctx):
    from corl.builtin.hf.vision import VisionAgent

    return VisionAgent(config, ctx)


def make_vision_sampler(config: HFSamplerConfig, ctx=None):
    from corl.builtin.hf.vision import VisionSampler

    return VisionSampler(config, ctx)


def preview(config: HFAgentConfig, ctx, prompts):
    from corl.builtin.hf.preview import rendered

    return rendered(config, ctx, prompts)


def describe(config: HFAgentConfig | HFVisionAgentConfig) -> ModelFacts:
    return ModelFacts(model=config.model, device=config.device)


# Traits (corl.protocols.AgentTraits): validation refuses a zoo: model on a task without a seed split;
# `corl data preview` renders a text agent's prompts from its tokenizer alone; messages and placement
# read the model and device from `describe`; `corl eval` points `model` at a run's exported weights.
make_agent.check = zoo_needs_seed
make_agent.preview = preview
make_vision_agent.check = zoo_needs_seed
make_agent.describe = make_vision_agent.describe = describe
make_agent.model_key = make_vision_agent.model_key = "model"


@hookimpl
def corl_register_components(registry):
    registry.add("agent", "hf", make_agent, HFAgentConfig, help="transformers causal LM")
    registry.add("sampler", "hf", make_sampler, HFSamplerConfig, help="batched KV-cached decoding, one prefill per prompt")
    registry.add("agent", "hf_vision", make_vision_agent, HFVisionAgentConfig,
                 help="transformers image-text-to-text model (LLaVA, Idefics3, Qwen2-VL, ...)")
    registry.add("sampler", "hf_vision", make_vision_sampler, HFSamplerConfig,
                 help="batched generate with each row's image inputs")
    registry.add_section("zoo", ZooConfig, help="how zoo: models are warm-started (every zoo: agent of the recipe)")
