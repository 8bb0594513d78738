"""The run-wide ``[zoo]`` section (how ``zoo:`` models are warm-started) and the agent-side checks of
a ``zoo:`` model. Only attrs here (nothing heavy), so a recipe validates without torch.

The agents' own tables (:mod:`corl.builtin.hf.backend.config`, :mod:`corl.builtin.hf.vision.config`)
carry ``model`` and the per-agent ``zoo_seed`` / ``zoo_steps`` / ``zoo_stop``; this module reads them
through :class:`ZooSettings`, so the models part imports nothing of the agents.
"""

from __future__ import annotations

from typing import Literal, Protocol

import attrs

from corl.builtin.hf.models.catalog import is_shipped


class ZooSettings(Protocol):
    """What an agent's table says about its model (both hf agents' tables have these keys)."""

    model: str
    zoo_seed: int | None
    zoo_steps: int | None
    zoo_stop: int | None


@attrs.frozen
class ZooConfig:
    """How zoo models are warm-started (applies to every ``zoo:`` model in a recipe)."""

    steps: int = attrs.field(default=2000, validator=attrs.validators.ge(0),
                             metadata={"help": "supervised warm-start steps (by steps, not seconds)"})
    batch_size: int = attrs.field(default=128, validator=attrs.validators.ge(1),
                                  metadata={"help": "examples per warm-start step"})
    lr: float = attrs.field(default=5e-3, validator=attrs.validators.gt(0),
                            metadata={"help": "peak AdamW learning rate (after a linear warmup)"})
    seed: int = attrs.field(default=0, metadata={"help": "initialisation and data-order seed"})
    schedule: Literal["cosine", "constant"] = attrs.field(default="cosine", metadata={
        "help": "learning rate after the warmup: cosine decay to 0 at the last step, or constant (how the shipped "
                "zoo:*-add3 models were warm-started, stopped inside their learning transition)"})
    warmup_steps: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)),
                                           metadata={"help": "linear warmup steps (default: 5% of steps)"})
    stop: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)), metadata={
        "help": "end the warm-start after this many steps while the schedule still spans `steps`: a base stopped "
                "inside its learning transition, with sampling headroom (bench/zoo_curve.py finds where)"})

    def __attrs_post_init__(self):
        if self.stop is not None and self.stop > self.steps:
            raise ValueError(f"stop ({self.stop}) must not exceed steps ({self.steps})")

    def describe(self) -> str:
        """How many steps run: "2000", or "1100 of 2000" when ``stop`` ends the warm-start early."""
        return f"{self.stop} of {self.steps}" if self.stop else str(self.steps)

    def cache_key(self) -> dict:
        """The settings as a cache key: ``schedule``, ``warmup_steps`` and ``stop`` at their defaults
        are left out, so models cached before those options existed keep their keys."""
        key = attrs.asdict(self)
        for name in ("schedule", "warmup_steps", "stop"):
            if key[name] == attrs.fields_dict(ZooConfig)[name].default:
                del key[name]
        return key


@attrs.frozen
class WarmUpSettings:
    """An agent's supervised warm-up before Co-RL (any model: pypi:, gguf:, a folder, a hub id): the zoo's
    "stopped partway through supervised learning" protocol for real models. ``steps`` AdamW steps of
    ``batch_size`` rows drawn (with ``seed``) from the task's labeled seed split (disjoint from train and
    eval), at a constant ``lr`` after one warmup step; cached by the model's and the warm-up's fingerprint."""

    steps: int = attrs.field(default=0, validator=attrs.validators.ge(0), metadata={
        "help": "supervised steps before Co-RL (0: none); fix them before any verdict run, on prompts apart from "
                "the evaluated ones (docs/how-to/real-models.md, \"Warm-starts\")"})
    lr: float = attrs.field(default=1e-5, validator=attrs.validators.gt(0), metadata={
        "help": "AdamW learning rate (constant after one warmup step)"})
    batch_size: int = attrs.field(default=8, validator=attrs.validators.ge(1), metadata={
        "help": "labeled seed examples per warm-up step"})
    seed: int = attrs.field(default=0, metadata={"help": "data-order seed of the warm-up"})
    target: str = attrs.field(default="{answer}", metadata={
        "help": "the completion taught after the agent's rendered prompt, with {answer} (the label) and the "
                "tokenizer's EOS after it: teach the format and the stop with the skill, e.g. \"Answer: {answer}\""})

    @target.validator
    def _target(self, attribute, value: str) -> None:
        try:
            value.format(answer="1")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"must be a format string with only {{answer}} ({exc})") from None
        if "{answer}" not in value:
            raise ValueError("must contain {answer}")


class WarmUpHolder(Protocol):
    warm_up: WarmUpSettings


def warm_up_needs_seed(config: WarmUpHolder, facts) -> list[tuple[str, str]]:
    """A warm-up trains on the task's labeled seed split: refused at validation on a task without one."""
    warm = getattr(config, "warm_up", None)
    if warm is None or not warm.steps:
        return []
    fix = facts.missing_split("seed")
    if fix is None:
        return []
    return [("warm_up", f"a warm-up of {warm.steps} steps trains on the task's labeled seed split; the {facts.task_type} task has "
                              f"none: give {fix}, or warm_up.steps = 0")]


def agent_checks(config, facts) -> list[tuple[str, str]]:
    """The hf agents' validation cross-checks (:class:`corl.protocols.AgentTraits`)."""
    return zoo_needs_seed(config, facts) + warm_up_needs_seed(config, facts)


def zoo_needs_seed(config: ZooSettings, facts) -> list[tuple[str, str]]:
    """An agent's validation cross-check (:class:`corl.traits.AgentTraits`): a ``zoo:`` model
    warm-starts on the task's labeled seed split, so a task that will have none is refused here,
    before anything loads (unless the agent asks for an untrained model with zoo_steps = 0). A
    shipped zoo model needs no seed split, and takes no warm-start settings."""
    if is_shipped(config.model):
        own = {"zoo_seed": config.zoo_seed, "zoo_steps": config.zoo_steps, "zoo_stop": config.zoo_stop}
        return [(key, f"{config.model} ships trained (no warm-start): {key} applies to the zoo models "
                      "warm-started here (zoo:llama-tiny, ...); remove it")
                for key, value in own.items() if value is not None]
    if not config.model.startswith("zoo:"):
        return []
    try:
        if zoo_config_for(config, facts.sections["zoo"]).steps == 0:
            return []
    except ValueError as exc:  # a stop past the steps (zoo.stop or zoo_stop against zoo.steps or zoo_steps)
        return [("zoo_stop" if config.zoo_stop is not None else "zoo_steps", str(exc))]
    fix = facts.missing_split("seed")
    if fix is None:
        return []
    return [("model", f"{config.model} needs a labeled seed split to warm-start on; the {facts.task_type} task has none: "
                      f"give {fix} or a model folder")]


def zoo_config_for(config: ZooSettings, zoo: ZooConfig) -> ZooConfig:
    """The run's ``[zoo]`` settings with this agent's own ``zoo_seed`` / ``zoo_steps`` / ``zoo_stop``
    (text and vision zoo models alike; part of the cache key, like every ZooConfig field). A stop past
    the steps raises ValueError (validation reports it at the agent's key)."""
    own = {"seed": config.zoo_seed, "steps": config.zoo_steps, "stop": config.zoo_stop}
    return attrs.evolve(zoo, **{k: value for k, value in own.items() if value is not None})
