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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from corl.errors import CorlError, PluginError
from corl.traits import traits
from corl.types import Rollout


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
