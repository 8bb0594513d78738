"""The ``hf`` backend: a transformers causal LM as an agent, and the sampler that decodes with it.
This is the part to copy when writing a backend of your own.

* :mod:`.agent` (``HFAgent``: load, encode, training log-probs, checkpoints, export),
  :mod:`.forward` (the update's forward pass, each distinct prompt once) and :mod:`.batch` (the
  token-level payload a sampler hands the optimizer);
* :mod:`.sampler` and :mod:`.decode` (the KV-cached decode loop, sampling-time log-probs);
* :mod:`.prompts` (chat / raw prompt formats), :mod:`.preview` (prompt strings from the tokenizer
  alone, ``corl data preview``), :mod:`.common` (the agent surfaces each sampler serves, as
  protocols, and the checks the ``hf_vision`` agent shares), :mod:`.config` (the tables).

It leans on two parts it could do without: :mod:`corl.builtin.hf.models` resolves ``model = ...``
(a copy may call ``from_pretrained`` on a folder instead), :mod:`corl.builtin.hf.scale` shards the
model (FSDP2) or adds LoRA adapters when a recipe asks. The factories below are what the package's
``corl_register_components`` registers (:mod:`corl.builtin.hf`); importing this module is cheap:
torch and transformers load inside them.
"""

from __future__ import annotations

from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.models.config import agent_checks
from corl.context import Context


def make_agent(config: HFAgentConfig, ctx: Context):
    from corl.builtin.hf.backend.agent import HFAgent

    return HFAgent(config, ctx)


def make_sampler(config: HFSamplerConfig, ctx: Context | None = None):
    from corl.builtin.hf.backend.sampler import HFSampler

    return HFSampler(config, ctx)


def make_static_sampler(config: HFSamplerConfig, ctx: Context | None = None):
    from corl.builtin.hf.backend.static_decode import HFStaticSampler

    return HFStaticSampler(config, ctx)


def preview(config: HFAgentConfig, ctx: Context, prompts):
    from corl.builtin.hf.backend.preview import rendered

    return rendered(config, ctx, prompts)


# Traits (corl.traits.AgentTraits): validation refuses a zoo: model on a task without a seed split;
# `corl data preview` renders a text agent's prompts from its tokenizer alone.
make_agent.check = agent_checks
make_agent.preview = preview
