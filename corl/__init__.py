"""corl: cooperative, label-free, multi-agent reinforcement learning for reasoning models.

Importing corl is cheap: torch and transformers load only inside the components that need them.
"""

from corl.errors import ConfigError, CorlError, PluginError
from corl.plugins import hookimpl
from corl.protocols import (
    Agent,
    Aggregator,
    AnswerVerifier,
    CohortAggregator,
    Optimizer,
    RewardRouter,
    Sampler,
    Stateful,
    Task,
    TokenBatch,
)
from corl.types import (
    Completion,
    Context,
    NoConfig,
    Prompt,
    PseudoLabel,
    Rollout,
    Routed,
    StepMetrics,
    StepOutcome,
    Vote,
    VoteContext,
)

__all__ = [
    "Agent", "Aggregator", "AnswerVerifier", "CohortAggregator", "Completion", "ConfigError", "Context", "CorlError",
    "NoConfig", "Optimizer", "PluginError", "Prompt", "PseudoLabel", "RewardRouter", "Rollout", "Routed", "Sampler",
    "Stateful", "StepMetrics", "StepOutcome", "Task", "TokenBatch", "Vote", "VoteContext", "hookimpl",
    "load_recipe", "run",
]


def load_recipe(*args, **kwargs):
    """See :func:`corl.recipe.load_recipe`."""
    from corl.recipe import load_recipe

    return load_recipe(*args, **kwargs)


def run(*args, **kwargs):
    """See :func:`corl.runtime.run`: run a recipe, optionally with component objects built in code."""
    from corl.runtime import run

    return run(*args, **kwargs)
