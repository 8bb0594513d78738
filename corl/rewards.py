"""A plain reward function as a ``[[shaping]]`` term, the way TRL's ``reward_funcs`` are written.

``[[shaping]] type = "mypkg.rewards:format_reward"`` (an import path, so allowed only where import
paths are, ``CORL_ALLOW_IMPORT_PATHS=1``) names a function whose parameters include
``completions``; it is called once per agent and step as

    fn(prompts=[...], completions=[...], answers=[...], agent="llama") -> list[float]

with one entry per completion, flattened prompt by prompt (a prompt's text repeated for each of its
samples): TRL's signature with corl's extras, the answer the task's verifier extracted (None: none)
and the agent's name. Take ``**kwargs`` to ignore what you do not read. It returns one finite number
per completion (None counts as 0.0: "does not apply", as TRL allows). A function with the attribute
``needs_labels = True`` also gets ``labels=[...]`` (the hidden ground truth, repeated alike), and,
like any term that reads labels, is refused in a label-free recipe.

From Python no import path is needed: ``corl.run(recipe, rewards=[fn, (other_fn, 0.5)])`` registers
each function object (weight 1, or the one paired with it) as a shaping term named after it, for
that run only (:func:`given`); ``recipe.json`` records it by that name, and the run resumes from
Python with the same functions (``corl.run(RUN_DIR, resume=True, rewards=[fn])``). With
``run.peer_reward = false`` the terms are the whole reward (supervised RLVR with a custom verifier,
or a reward model alone) instead of additions to the peer reward.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from corl.errors import ConfigError, CorlError, PluginError
from corl.hookspecs import hookimpl
from corl.traits import traits
from corl.types import NoConfig, Rollout


def is_reward_function(obj: Any) -> bool:
    """A function (not a factory class) that takes ``completions``, as TRL's reward functions do."""
    if inspect.isclass(obj) or not callable(obj):
        return False
    try:
        return "completions" in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


def factory_for(fn: Callable[..., Any], name: str) -> Callable[[Any, Any], RewardFunctionTerm]:
    """A shaping factory ``(config, ctx) -> term`` around ``fn``; it declares ``needs_labels`` as ``fn`` does."""

    try:
        declared = traits("shaping", fn)  # a function declares needs_labels as any factory does
    except TypeError as exc:
        raise PluginError(f"reward function {name!r}: {exc}") from None

    def build(config: Any, ctx: Any) -> RewardFunctionTerm:
        return RewardFunctionTerm(fn, name)

    build.needs_labels = declared.needs_labels  # the ShapingTraits of the factory
    return build


class RewardFunctionTerm:
    """Scores completions with a TRL-style reward function (see the module doc)."""

    def __init__(self, fn: Callable[..., Any], name: str):
        self.fn, self.name = fn, name

    def score(self, rollout: Rollout, answers: Sequence[Sequence[Hashable | None]], verifier: Any,
              truth: Sequence[Any] | None = None) -> list[list[float]]:
        n = rollout.n
        kwargs: dict[str, Any] = {
            "prompts": [p.text for p in rollout.prompts for _ in range(n)],
            "completions": [text for row in rollout.texts for text in row],
            "answers": [a for row in answers for a in row],
            "agent": rollout.agent,
        }
        if truth is not None:
            kwargs["labels"] = [t for t in truth for _ in range(n)]
        try:
            values = self.fn(**kwargs)
        except CorlError:
            raise
        except Exception as exc:  # noqa: BLE001 - one line naming the function, never a silent 0
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise PluginError(f"reward function {self.name!r} raised {type(exc).__name__}: {first}") from exc
        if not isinstance(values, Sequence) or isinstance(values, (str, bytes)) or len(values) != len(kwargs["completions"]):
            size = len(values) if isinstance(values, Sequence) else type(values).__name__
            raise PluginError(f"reward function {self.name!r} returned {size} values for "
                              f"{len(kwargs['completions'])} completions; return one number per completion")
        flat = [0.0 if v is None else v for v in values]
        return [list(flat[p * n: (p + 1) * n]) for p in range(len(rollout.texts))]


class GivenRewards:
    """A plugin for one run: the reward functions handed to ``corl.run(rewards=...)`` as shaping
    components named after them."""

    def __init__(self, functions: dict[str, Callable[..., Any]]):
        self.functions = functions

    @hookimpl
    def corl_register_components(self, registry):
        for name, fn in self.functions.items():
            registry.add("shaping", name, factory_for(fn, name), NoConfig,
                         help=f"reward function {name} (handed to corl.run)")


def given(functions: Sequence[Any]) -> tuple[GivenRewards, list[dict[str, Any]]]:
    """The plugin registering ``functions`` (each a reward function, or ``(function, weight)``) and
    the ``[[shaping]]`` tables that name them, in order."""
    named: dict[str, Callable[..., Any]] = {}
    tables = []
    for i, entry in enumerate(functions):
        fn, weight = entry if isinstance(entry, tuple) and len(entry) == 2 else (entry, 1.0)
        where = f"rewards[{i}]"
        if not is_reward_function(fn):
            raise ConfigError(f"{where}: {fn!r} is not a reward function; expected a function taking completions "
                              "(TRL's reward_funcs signature: fn(prompts, completions, **kwargs) -> list[float]), "
                              "or (function, weight)")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigError(f"{where}: weight {weight!r} is not a number")
        # a function's own name; a callable object's class name
        name = fn.__name__ if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__name__
        if not name.isidentifier():
            raise ConfigError(f"{where}: a reward function needs a name of its own (def name(...)), not {name!r}; "
                              "the name labels its metric and its entry in recipe.json")
        if name in named and named[name] is not fn:
            raise ConfigError(f"{where}: two reward functions are named {name!r}; rename one")
        named[name] = fn
        tables.append({"type": name, "weight": float(weight)})
    return GivenRewards(named), tables
