"""corl: cooperative, label-free, multi-agent reinforcement learning for reasoning models.

Importing corl is cheap: torch and transformers load only inside the components that need them
(``run`` and ``load_recipe`` import the host when called).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corl.context import Context
from corl.errors import ConfigError, CorlError, PluginError
from corl.hookspecs import hookimpl
from corl.protocols import (
    Agent,
    Aggregator,
    AnswerVerifier,
    CohortAggregator,
    Optimizer,
    RewardRouter,
    RewardShaping,
    Sampler,
    Stateful,
    Task,
)
from corl.types import (
    Completion,
    NoConfig,
    Prompt,
    PseudoLabel,
    Rollout,
    Routed,
    StepMetrics,
    StepOutcome,
    TokenBatch,
    Vote,
    VoteContext,
)

if TYPE_CHECKING:
    from corl.plugins import Registry
    from corl.recipe import RunSpec

__all__ = [
    "Agent", "Aggregator", "AnswerVerifier", "CohortAggregator", "Completion", "ConfigError", "Context", "CorlError",
    "NoConfig", "Optimizer", "PluginError", "Prompt", "PseudoLabel", "RewardRouter", "Rollout", "Routed", "Sampler",
    "Stateful", "StepMetrics", "StepOutcome", "Task", "TokenBatch", "Vote", "VoteContext", "hookimpl",
    "load_recipe", "run",
]


def load_recipe(recipe: str | os.PathLike[str] | Mapping[str, Any], overrides: Sequence[str] = (), *,
                registry: Registry | None = None, source: str | None = None,
                distributions: Mapping[str, str] | None = None, objects: Collection[str] = ()) -> RunSpec:
    """Read, override and validate a recipe: :func:`corl.recipe.load_recipe`, which documents each argument."""
    from corl.recipe import load_recipe

    return load_recipe(recipe, overrides, registry=registry, source=source, distributions=distributions,
                       objects=objects)


def run(recipe: str | os.PathLike[str] | Mapping[str, Any] | RunSpec, overrides: Sequence[str] = (), *,
        task: Task | None = None, aggregator: Aggregator | None = None, router: RewardRouter | None = None,
        agents: Mapping[str, Agent] | None = None, samplers: Mapping[str, Sampler] | None = None,
        optimizers: Mapping[str, Optimizer] | None = None, shaping: Mapping[str, RewardShaping] | None = None,
        observers: Mapping[str, Any] | None = None, plugins: Sequence[Any] = (), resume: bool = False,
        force: bool = False, autoload: bool | None = None, rewards: Sequence[Any] = ()) -> dict[str, Any]:
    """Run Co-RL from a recipe and return the summary (what ``summary.json`` holds).

    ``recipe``: a recipe file, a shipped recipe's name or a run dir, as ``corl run`` takes them; a
    parsed table; or a validated :class:`~corl.recipe.RunSpec`. ``overrides``: ``key.path=value``
    strings, as ``--set`` takes them.

    Any component may be handed in as a ready object that replaces the recipe's table of it (that
    table is then not looked up in the registry): ``task``, ``aggregator``, ``router`` (satisfying
    :class:`~corl.protocols.Task`, :class:`~corl.protocols.Aggregator`,
    :class:`~corl.protocols.RewardRouter`); ``agents``, ``samplers``, ``optimizers``: mappings from
    an agent's name to its :class:`~corl.protocols.Agent`, :class:`~corl.protocols.Sampler`,
    :class:`~corl.protocols.Optimizer` (an optimizer is bound to its agent when made, so it comes
    with that agent's object); ``shaping``: a mapping from a ``[[shaping]]`` entry's name to its
    :class:`~corl.protocols.RewardShaping` term (a name the recipe lacks adds an entry of weight 1);
    ``observers``: a mapping from a name to an observer (a plugin object with ``corl_*`` hooks). Each
    is checked as it is handed in, before any model loads. The run records each object's class and
    settings (observers aside) in ``recipe.json`` and its checkpoints, and such a run resumes only
    from Python, with objects of the same classes and settings
    (``corl.run(RUN_DIR, resume=True, router=...)``). ``plugins``: plugin objects
    registered for this run only. ``resume``, ``force``: ``corl run``'s ``--resume`` (continue from
    the newest checkpoint in the output dir) and ``--force`` (replace an earlier run there; with
    ``resume``, resume even though the recipe changed, but never with other component objects).
    ``rewards``: reward functions with TRL's ``reward_funcs`` signature (``fn(prompts, completions,
    **kwargs) -> list[float]``), each, or ``(fn, weight)``, a ``[[shaping]]`` term named after the
    function, no import path or environment variable needed (:mod:`corl.rewards`); with
    ``run.peer_reward = false`` they are the whole reward.
    """
    from corl.runtime import run

    return run(recipe, overrides, task=task, aggregator=aggregator, router=router, agents=agents, samplers=samplers,
               optimizers=optimizers, shaping=shaping, observers=observers, plugins=plugins, resume=resume,
               force=force, autoload=autoload, rewards=rewards)
