"""Traits: optional capabilities a component states as class attributes of its factory (a router's
``supervised`` / ``min_agents`` / ``check``, an observer's ``every_rank``, a verifier's ``bounded``,
a task's ``missing_split``, an agent's ``check`` and ``tiny`` setup, a shaping term's ``needs_labels``), declared here
and never probed ad hoc; :func:`traits` reads them once into the frozen classes below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen
class RouterTraits:
    """``supervised``: the router reads ground-truth labels (a supervised baseline; the recipe must
    declare ``run.supervised = true``, and only then is it handed the labels). ``min_agents``: the
    fewest agents it can route between. ``check(config, agents)``: the router's own cross-checks of
    a validated recipe's agents, returning one message per problem; ``config`` is its recipe table,
    or for a router object handed to ``corl.run`` its ``config`` attribute (a router that declares
    ``check`` keeps its config there)."""

    supervised: bool = False
    min_agents: int = 1
    check: Callable[[Any, Sequence[Any]], Iterable[str]] | None = None


@attrs.frozen
class TaskTraits:
    """``missing_split(config, split)``: None when a task built from ``config`` will hold prompts in
    ``split``, else what to set so that it does (e.g. ``'task.seed = "FILE"'``), read at validation
    by components that need a split (a zoo model warm-starts on the labeled ``seed`` split).
    ``check_data(config, source, rows)``: open the task's data (relative paths against ``source``,
    the recipe file) and read at most ``rows`` rows of each file, returning one line per problem,
    worded as building the task would word it (``corl validate``); it imports no torch and loads
    no model. ``generates_data``: the task draws its splits from its config alone (every key has a
    default) as prompts of text, images and a label of text or a number, so ``corl data generate``
    can write them as data files the ``jsonl`` task reads back."""

    missing_split: Callable[[Any, str], str | None] | None = None
    check_data: Callable[[Any, str, int], Sequence[str]] | None = None
    generates_data: bool = False


@attrs.frozen
class RecipeFacts:
    """What an agent's validation cross-check (:class:`AgentTraits`) sees of the rest of the recipe:
    ``missing_split(split)`` is the task's :class:`TaskTraits` answer for its config (always None
    when the task declares nothing); ``sections`` are the validated plugin sections (``[zoo]``)."""

    task_type: str
    missing_split: Callable[[str], str | None]
    sections: Mapping[str, Any]


@attrs.frozen
class ModelFacts:
    """What an agent's config says about its model (:class:`AgentTraits` ``describe``), so that the
    host never reads an agent type's own keys: ``model``, what it loads, for messages
    (``"zoo:llama-tiny"``, a folder; ``""`` when it names none), and ``device``, where its weights
    live (``"cpu"``, ``"cuda"``, ``"cuda:1"``): the ranks of an agent on a CUDA device reduce over
    NCCL, others over gloo."""

    model: str = ""
    device: str = "cpu"


@attrs.frozen
class TinySetup:
    """An agent type's smallest working setup (:class:`AgentTraits` ``tiny``), for tests: ``agent``,
    its ``[[agents]]`` table (without ``name`` and ``type``), built in seconds on a CPU; ``task``, the
    ``[task]`` table (with its ``type``) of a task it answers, warm-starts on and is checked against."""

    agent: Mapping[str, Any]
    task: Mapping[str, Any]


@attrs.frozen
class AgentTraits:
    """``check(config, facts)``: the agent's own cross-checks of a validated recipe
    (:class:`RecipeFacts`), yielding ``(key, message)`` pairs, the key relative to the agent's table
    (``("model", "zoo:llama-tiny needs a labeled seed split ...")``). ``preview(config, ctx, prompts)``:
    the exact strings the agent would tokenize for ``prompts`` (its chat template applied), from its
    tokenizer alone, no model weights loaded (``corl data preview``; ``ctx`` as for the factory).
    ``describe(config)``: its :class:`ModelFacts` (``corl validate``, ``corl eval`` and placement
    read them; an agent that declares none shows its type and is placed as a CPU agent).
    ``model_key``: the key of the agent's table that names what it loads (the hf agents':
    ``"model"``), which ``corl eval`` sets to a run's exported weights (``checkpoints/final/NAME``,
    what ``Agent.save`` wrote) or to ``--model NAME=MODEL``; ``""``: it names none, and is evaluated
    as its recipe builds it. ``tiny(warm_steps)``: its :class:`TinySetup`, a real agent of this
    type small enough for a plugin's tests (``corl.testing.tiny_agent``), warm-started
    ``warm_steps`` steps where it warm-starts."""

    check: Callable[[Any, RecipeFacts], Iterable[tuple[str, str]]] | None = None
    preview: Callable[[Any, Any, Sequence[Any]], Sequence[str]] | None = None
    describe: Callable[[Any], ModelFacts] | None = None
    model_key: str = ""
    tiny: Callable[[int], TinySetup] | None = None


@attrs.frozen
class ObserverTraits:
    """``every_rank``: in a several-process run, attach the observer on every rank (the final
    export, the early stop), not only on the rank that writes the run's files."""

    every_rank: bool = False


@attrs.frozen
class VerifierTraits:
    """``bounded``: fast by construction (a regex over a short string, or a sandbox with its own
    limits), so the run puts no time bound around its calls."""

    bounded: bool = False


@attrs.frozen
class ShapingTraits:
    """``needs_labels``: the term reads ground-truth labels (``truth``), so only a run declared
    supervised may use it; a label-free recipe that names it is refused at validation."""

    needs_labels: bool = False


#: the protocol each component kind must satisfy (observers are hook plugins instead)
TRAITS: dict[str, type] = {"router": RouterTraits, "observer": ObserverTraits, "verifier": VerifierTraits,
                           "task": TaskTraits, "agent": AgentTraits, "shaping": ShapingTraits}


def declared_config(factory: Any) -> type | None:
    """The attrs config class a factory named by import path declares as its ``Config`` class
    attribute (``type = "package.module:Factory"``); None when it declares none."""
    return getattr(factory, "Config", None)  # a declaration, read like the traits below


def traits(kind: str, declared_on: Any) -> Any:
    """The traits a factory (or a component object) declares for ``kind``, as a frozen instance of
    its traits class; undeclared ones take their defaults. Raises ``TypeError`` (one line, naming
    the attribute) when a declaration has the wrong type."""
    cls = TRAITS.get(kind)
    if cls is None:
        return None
    values = {}
    for field in attrs.fields(cls):
        if not hasattr(declared_on, field.name):
            continue
        value = getattr(declared_on, field.name)
        if field.default is None:  # a function the trait's docstring describes
            if value is not None and not callable(value):
                raise TypeError(f"{field.name} must be a function (see corl.traits.{cls.__name__}), got {value!r}")
        elif type(value) is not type(field.default):  # bool is not int here: min_agents = True is a mistake
            raise TypeError(f"{field.name} must be {type(field.default).__name__}, got {value!r}")
        values[field.name] = value
    return cls(**values)
