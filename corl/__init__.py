"""corl: cooperative, label-free, multi-agent reinforcement learning for reasoning models.

Importing corl is cheap: torch and transformers load only inside the components that need them.
"""

from corl.errors import ConfigError, CorlError, PluginError
from corl.hookspecs import hookimpl
from corl.protocols import Agent, Aggregator, AnswerVerifier, Context, Optimizer, RewardRouter, Sampler, Task
from corl.types import NoConfig, Prompt, PseudoLabel, Rollout, StepMetrics, Vote

__all__ = [
    "Agent", "Aggregator", "AnswerVerifier", "ConfigError", "Context", "CorlError", "NoConfig", "Optimizer", "PluginError",
    "Prompt", "PseudoLabel", "RewardRouter", "Rollout", "Sampler", "StepMetrics", "Task", "Vote", "hookimpl",
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
