"""The Hugging Face backend, a built-in plugin like any other: transformers models as agents.

The package is split by audience:

* :mod:`~corl.builtin.hf.backend`: the ``hf`` agent and sampler (a causal LM, a KV-cached decode
  loop), the part to copy when writing a backend of your own;
* :mod:`~corl.builtin.hf.vision`: the ``hf_vision`` agent and sampler (image-text-to-text models)
  and their tiny zoo models;
* :mod:`~corl.builtin.hf.models`: where weights come from (``zoo:`` models, shipped weights,
  warm-starts, GGUF and packaged models), for tests, demos and real models;
* :mod:`~corl.builtin.hf.scale`: FSDP2 sharding and LoRA adapters of an ``hf`` agent;
* :mod:`~corl.builtin.hf.engines`: the public API of engine plugins (vLLM, SGLang), which sample
  for an ``hf`` agent; its import path is stable.

This module only registers: agents and samplers ``hf`` and ``hf_vision``, the ``hf_static``
sampler and the ``[zoo]`` recipe section. Importing it is cheap: torch and transformers load inside the factories.
"""

from __future__ import annotations

from corl.builtin.hf.backend import make_agent, make_sampler, make_static_sampler
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.models.config import ZooConfig
from corl.builtin.hf.models.sources import installed_packaged
from corl.builtin.hf.reward_model import RewardModel, RewardModelConfig
from corl.builtin.hf.vision import make_vision_agent, make_vision_sampler
from corl.builtin.hf.vision.config import HFVisionAgentConfig, VisionSamplerConfig
from corl.context import RegistryView
from corl.hookspecs import hookimpl
from corl.traits import ModelFacts, TinySetup


def describe(config: HFAgentConfig | HFVisionAgentConfig) -> ModelFacts:
    return ModelFacts(model=config.model, device=config.device)


# Traits (corl.traits.AgentTraits) both agents share: messages and placement read the model and
# device from `describe`; `corl eval` points `model` at a run's exported weights.
make_agent.describe = make_vision_agent.describe = describe
make_agent.model_key = make_vision_agent.model_key = "model"


def tiny(warm_steps: int) -> TinySetup:
    """The ``hf`` agent's smallest setup (``corl.testing.tiny_agent``): a zoo model warm-started
    ``warm_steps`` steps on a small arithmetic task (the zoo's alphabet, ``0-9 + - * = |``)."""
    return TinySetup({"model": "zoo:llama-tiny", "zoo_steps": warm_steps},
                     {"type": "arithmetic", "seed_size": 64, "train_size": 16, "eval_size": 4})


make_agent.tiny = tiny  # a trait (corl.traits.AgentTraits)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add_fact("packaged_models", installed_packaged)  # corl env: the pypi: models here, with provenance
    registry.add("agent", "hf", make_agent, HFAgentConfig,
                 help="transformers causal LM (zoo:, a folder, gguf:, pypi: or a hub id); FSDP2 sharding and "
                      "LoRA adapters on request")
    registry.add("sampler", "hf", make_sampler, HFSamplerConfig,
                 help="batched KV-cached decoding, one prefill per prompt, sampling-time log-probs, stop strings")
    registry.add("sampler", "hf_static", make_static_sampler, HFSamplerConfig,
                 help="hf with a fixed-shape decode step over a preallocated (static) KV cache; sliding-window "
                      "models take hf's loop")
    registry.add("agent", "hf_vision", make_vision_agent, HFVisionAgentConfig,
                 help="transformers image-text-to-text model (LLaVA, Idefics3, Qwen2-VL, ...)")
    registry.add("sampler", "hf_vision", make_vision_sampler, VisionSamplerConfig,
                 help="batched generate with each row's image inputs (no stop strings)")
    registry.add("shaping", "reward_model", RewardModel, RewardModelConfig,
                 help="a learned reward model (a sequence-classification folder, one output) scores prompt + "
                      "completion, batched on the agent's device; with run.peer_reward = false, a judge-style baseline")
    registry.add_section("zoo", ZooConfig, help="how zoo: models are warm-started (every zoo: agent of the recipe)")
