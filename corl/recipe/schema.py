"""The recipe's shape: the core sections as frozen attrs classes, and the validated ``RunSpec``.

A component table (``[task]``, ``[topology]``, ``[voting]``, each agent's own table and its
``sampler`` / ``optimizer``, each ``[[shaping]]`` entry) picks a registered component by ``type``; its other keys are that
component's config class. Plugins add their own top-level sections (``registry.add_section``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

H = "help"
#: how the reference shows a default computed from other keys (``n_votes``, ``the type``)
SHOWN = "shown"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _output_template(value: str) -> None:
    if not value.strip():
        raise ValueError("give a folder (the default is runs/{name})")
    try:
        value.format(name="x")
    except (KeyError, IndexError, ValueError):
        raise ValueError("the only placeholder allowed is {name}; write {{ and }} for braces") from None


def _run_name(instance, attribute, value: str) -> None:
    """A run name becomes a folder name (``runs/{name}``): one non-empty path component."""
    if not value.strip() or value in (".", "..") or any(c in value for c in "/\\") or not value.isprintable():
        raise ValueError("a run name is one folder name (not empty, no '/' or '\\', not '.' or '..')")


@attrs.frozen
class RunSection:
    name: str = attrs.field(default="corl", validator=_run_name, metadata={
        H: "run name; used in the default output dir (a folder name: no '/')"})
    steps: int = attrs.field(default=40, validator=attrs.validators.ge(0), metadata={H: "training steps"})
    seed: int = attrs.field(default=0, metadata={H: "seed of data order, sampling and tie-breaks"})
    prompts_per_step: int = attrs.field(default=32, validator=attrs.validators.ge(1),
                                        metadata={H: "unlabeled prompts each agent samples per step"})
    output_dir: str = attrs.field(default="runs/{name}", validator=lambda i, a, value: _output_template(value),
                                  metadata={H: "where metrics, logs and checkpoints go ({name}: the run name); a "
                                               "relative path is relative to the working directory `corl run` "
                                               "starts in, not to the recipe file (data paths are)"})
    threads: int = attrs.field(default=0, validator=attrs.validators.ge(0),
                               metadata={H: "torch CPU threads (0: all cores)"})
    peer_reward: bool = attrs.field(default=True, metadata={
        H: "false: no peer reward; the [[shaping]] terms (and corl.run's rewards= functions) are the whole reward "
           "(supervised RLVR with a custom verifier, a reward model alone); votes and pseudo-labels are still "
           "measured"})
    supervised: bool = attrs.field(default=False, metadata={
        H: "declare the run supervised: required for (and only allowed with) a router that reads labels"})
    protocol: Literal["held_out", "test_time"] = attrs.field(default="held_out", metadata={
        H: "held_out: train on the task's train split, evaluate on its eval split; test_time: train label-free "
           "on the very prompts that are evaluated (TTRL's protocol; their labels only score the evaluations)"})
    observers: tuple[str, ...] = attrs.field(default=("console", "jsonl", "tensorboard", "checkpoint"),
                                             metadata={H: "observer plugins to attach, by name"})
    plugins: tuple[str, ...] = attrs.field(default=(), metadata={
        H: "plugin distributions the recipe needs, e.g. [\"corl-vllm\"] or [\"corl-vllm>=0.2\"]; checked at validation"})
    checkpoint_every: int = attrs.field(default=20, validator=attrs.validators.ge(0), metadata={
        H: "write a whole-run checkpoint every N steps (0: only on SIGINT / SIGTERM)"})
    keep_checkpoints: int = attrs.field(default=2, validator=attrs.validators.ge(1),
                                        metadata={H: "how many of the newest checkpoints to keep"})
    answer_timeout: float = attrs.field(default=2.0, validator=attrs.validators.ge(0), metadata={
        H: "seconds one answer extraction or comparison may take; past it, no answer (0: no bound)"})
    max_nonfinite: int = attrs.field(default=3, validator=attrs.validators.ge(1), metadata={
        H: "stop after this many consecutive non-finite (skipped) updates of one agent"})
    collective_timeout: float = attrs.field(default=600.0, validator=attrs.validators.gt(0), metadata={
        H: "several processes: seconds a rank waits for the others at an exchange; past it the run stops"})
    log_completions: int = attrs.field(default=4, validator=attrs.validators.ge(0), metadata={
        H: "completions logged per agent each step and each evaluation (prompt, text, extracted answer, the label "
           "it was scored against, reward, hidden label): samples.jsonl, tensorboard text, trackers' tables (0: none)"})


@attrs.frozen
class EvalSection:
    size: int = attrs.field(default=500, validator=attrs.validators.ge(0),
                            metadata={H: "held-out labeled prompts (0 turns evaluation off)"})
    k: int = attrs.field(default=8, validator=attrs.validators.ge(1), metadata={H: "samples per prompt for pass@1 and maj@k"})
    temperature: float = attrs.field(default=1.0, validator=attrs.validators.gt(0), metadata={H: "sampling temperature of the k samples"})
    every: int = attrs.field(default=0, validator=attrs.validators.ge(0),
                             metadata={H: "evaluate every N steps (0: only before and after)"})


@attrs.frozen
class ComponentSpec:
    """A component chosen by registered name plus its validated config."""

    type: str
    config: Any
    factory: Any = None  # set only for an import-path type (CORL_ALLOW_IMPORT_PATHS)


def _name(instance, attribute, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ValueError("a name is one or more letters, digits, '_', '-' or '.'")


def _name_or_default(instance, attribute, value: str) -> None:
    if value:  # empty: the default name
        _name(instance, attribute, value)


def _ranks(instance, attribute, value: tuple[int, ...]) -> None:
    bad = [r for r in value if r < 0]
    if bad:
        raise ValueError(f"invalid rank {bad[0]}: ranks are >= 0")
    if len(set(value)) != len(value):
        raise ValueError(f"invalid value {list(value)!r}: a rank is listed twice")


def _n_train(instance, attribute, value: int) -> None:
    if value < 2:
        raise ValueError("must be >= 2 (group baselines need two samples)")
    n_votes = instance.n_votes  # None where it was wrong itself
    if isinstance(n_votes, int) and value > n_votes:
        raise ValueError(f"must be <= voting.n_votes ({n_votes}); trained samples are a subset of the voting ones")


# The host's own keys of the component tables ([voting], [[agents]], [[shaping]]): each sits beside
# the chosen component's ``type`` and keys. Validation (corl.recipe.validate), the reference
# (corl.tools.reference) and the resolved recipe's defaults (corl.recipe.resume) read them from here.

@attrs.frozen
class VotingKeys:
    n_votes: int = attrs.field(default=8, validator=attrs.validators.ge(1), metadata={
        H: "samples per prompt and agent that vote for the pseudo-label"})
    n_train: int = attrs.field(default=attrs.Factory(lambda keys: keys.n_votes, takes_self=True), validator=_n_train,
                               metadata={H: "of those, how many are trained on (2 <= n_train <= n_votes)",
                                         SHOWN: "n_votes"})


@attrs.frozen
class AgentKeys:
    name: str = attrs.field(validator=_name, metadata={
        H: "unique name (letters, digits, `_`, `-`, `.`)"})
    sampler: Mapping[str, Any] = attrs.field(factory=dict, metadata={
        H: "sampler, see below; its type defaults to the agent's own type when a sampler of that name exists "
           "(`hf_vision`), else `hf`"})
    optimizer: Mapping[str, Any] = attrs.field(factory=dict, metadata={H: "optimizer, see below"})
    frozen: bool = attrs.field(default=False, metadata={H: "samples and votes (a judge) but is never trained"})
    ranks: tuple[int, ...] = attrs.field(default=(), validator=_ranks, metadata={
        H: "several processes: the ranks that serve this agent (several: an hf agent is sharded over them with "
           "FSDP2); empty: equal blocks of ranks (docs/how-to/scale-out.md)"})


@attrs.frozen
class ShapingKeys:
    weight: float = attrs.field(default=1.0, metadata={
        H: "multiplies the term's value (negative: a penalty becomes a bonus)"})
    name: str = attrs.field(default="", validator=_name_or_default, metadata={
        H: "names the term's metric `shaping/<name>` (two terms of one type need names)", SHOWN: "the type"})


@attrs.frozen
class AgentSpec:
    name: str
    agent: ComponentSpec
    sampler: ComponentSpec
    optimizer: ComponentSpec
    frozen: bool  # samples and votes (e.g. as a judge) but is never updated
    ranks: tuple[int, ...]  # several processes: the ranks that serve this agent (see corl.runtime.distributed)


@attrs.frozen
class VotingSpec:
    aggregator: ComponentSpec
    n_votes: int
    n_train: int


@attrs.frozen
class ShapingSpec:
    """One ``[[shaping]]`` entry: a reward term and its weight; ``name`` labels its metric."""

    name: str
    weight: float
    term: ComponentSpec


@attrs.frozen
class GivenObject:
    """A component an embedding program handed to ``corl.run`` as a ready object (``router=``,
    ``samplers={"a": ...}``, ...), as ``recipe.json`` and checkpoints record it in place of the
    recipe's table: its class, the name it can be imported by where there is one (None for a
    class of ``__main__`` or one defined inside a function). Its settings (:func:`settings_of`) go in
    the run's checkpoints, which a resume compares as the CLI compares a recipe's keys."""

    cls: str
    import_path: str | None = None
    settings: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def of(cls, obj: Any) -> GivenObject:
        kind = type(obj)
        importable = kind.__module__ != "__main__" and "<locals>" not in kind.__qualname__
        return cls(kind.__qualname__, f"{kind.__module__}:{kind.__qualname__}" if importable else None,
                   settings_of(obj))

    def record(self) -> dict[str, Any]:
        return {"object": self.cls, "import": self.import_path}


#: the most items of a list setting that is recorded (longer ones are data, not settings)
_SETTING_ITEMS = 32


def settings_of(obj: Any) -> dict[str, Any]:
    """What an object's settings are, for comparing two objects of one class: its attrs fields (an
    attrs object), else its public attributes; of each, plain values (numbers, strings, short lists
    of them) and attrs configs as tables (``{"warmup": 3, "config": {"seed": 99}}``). Data and
    handles (a list of prompts, a model) are left out."""
    if attrs.has(type(obj)):
        items = attrs.asdict(obj, recurse=False)
    else:
        try:
            items = dict(vars(obj))
        except TypeError:  # no __dict__ (slots, a builtin)
            return {}
    out = {}
    for name, value in items.items():
        plain = _plain_setting(value)
        if not name.startswith("_") and plain is not _NOT_PLAIN:
            out[name] = plain
    return out


_NOT_PLAIN = object()


def _plain_setting(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and len(value) <= _SETTING_ITEMS:
        items = [_plain_setting(v) for v in value]
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in items) else items
    if attrs.has(type(value)) and not isinstance(value, type):
        table = {k: _plain_setting(v) for k, v in attrs.asdict(value, recurse=False).items()}
        return {k: v for k, v in table.items() if v is not _NOT_PLAIN}
    return _NOT_PLAIN


#: the recipe section of each run-wide component kind an embedding program may hand in as an object
OBJECT_SECTIONS = {"task": "task", "aggregator": "voting", "router": "topology"}
#: the ``corl.run`` argument, a mapping by name, of each kind handed in per agent, per ``[[shaping]]``
#: entry or per observer: ``corl.run(..., samplers={"a": MySampler()})``
OBJECT_MAPPINGS = {"agent": "agents", "sampler": "samplers", "optimizer": "optimizers", "shaping": "shaping",
                   "observer": "observers"}


def slot(kind: str, name: str = "") -> str:
    """The key of an object handed to ``corl.run`` (:attr:`RunSpec.objects`): the kind of a run-wide
    one (``"router"``), ``kind:name`` of one handed in by name (``"sampler:a"``: agent ``a``'s sampler)."""
    return f"{kind}:{name}" if name else kind


def argument(key: str) -> str:
    """How messages name the ``corl.run`` argument of slot ``key``: ``router``, ``samplers['a']``."""
    kind, _, name = key.partition(":")
    return f"{OBJECT_MAPPINGS[kind]}[{name!r}]" if name else kind


def shaping_name(raw: Mapping[str, Any]) -> str:
    """A ``[[shaping]]`` term's name: its ``name``, by default its type, or an import path's function
    name (``"mypkg.rewards:format_reward"`` -> ``format_reward``); what an object slot matches on."""
    return str(raw.get("name") or str(raw.get("type", "")).rpartition(":")[2])


def object_tables(data: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Each table of a parsed recipe that an object may replace: its slot (:func:`slot`), its key
    path and the table. The run-wide sections, each agent's table and its ``sampler`` and
    ``optimizer``, each ``[[shaping]]`` entry (by its name, the type by default)."""
    for kind, section in OBJECT_SECTIONS.items():
        if isinstance(data.get(section), Mapping):
            yield kind, section, data[section]
    agents = data.get("agents")
    for i, raw in enumerate(agents if isinstance(agents, list) else ()):
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            yield slot("agent", raw["name"]), f"agents[{i}]", raw
            for kind in ("sampler", "optimizer"):
                if isinstance(raw.get(kind), Mapping):
                    yield slot(kind, raw["name"]), f"agents[{i}].{kind}", raw[kind]
    terms = data.get("shaping")
    for i, raw in enumerate(terms if isinstance(terms, list) else ()):
        if isinstance(raw, Mapping):
            name = shaping_name(raw)
            if name:
                yield slot("shaping", name), f"shaping[{i}]", raw


@attrs.frozen
class RunSpec:
    run: RunSection
    task: ComponentSpec
    agents: tuple[AgentSpec, ...]
    voting: VotingSpec
    topology: ComponentSpec
    eval: EvalSection
    source: str = ""
    observers: tuple[ComponentSpec, ...] = ()  # [observers.NAME] tables: configured observers (attached too)
    shaping: tuple[ShapingSpec, ...] = ()  # [[shaping]]: reward terms added to the router's rewards
    sections: Mapping[str, Any] = attrs.field(factory=dict)  # plugin-declared sections, e.g. the hf backend's [zoo]
    # components handed to corl.run as objects, by slot (``"router"``, ``"sampler:a"``: see slot()): they
    # replace (and are recorded instead of) the recipe's own table there
    objects: Mapping[str, GivenObject] = attrs.field(factory=dict)

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output_dir.format(name=self.run.name))

    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]


DEFAULT_TYPES = {"task": "arithmetic", "agent": "hf", "sampler": "hf", "optimizer": "grpo",
                 "aggregator": "majority", "router": "ring"}
