"""TOML recipe -> frozen :class:`RunSpec`, validated whole before any model loads.

Every mistake is collected and reported on its own line as ``key.path: what is wrong``, naming
the bad value and the valid choices. Nothing here imports torch.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from corl.errors import ConfigError
from corl.plugins import Registry
from corl.types import NoConfig
from corl.zoo import ZooConfig

H = "help"


def _output_template(value: str) -> None:
    try:
        value.format(name="x")
    except (KeyError, IndexError, ValueError):
        raise ValueError("the only placeholder allowed is {name}; write {{ and }} for braces") from None


@attrs.frozen
class RunSection:
    name: str = attrs.field(default="corl", metadata={H: "run name; used in the default output dir"})
    steps: int = attrs.field(default=40, validator=attrs.validators.ge(0), metadata={H: "training steps"})
    seed: int = attrs.field(default=0, metadata={H: "seed of data order, sampling and tie-breaks"})
    prompts_per_step: int = attrs.field(default=32, validator=attrs.validators.ge(1),
                                        metadata={H: "unlabeled prompts each agent samples per step"})
    output_dir: str = attrs.field(default="runs/{name}", validator=lambda i, a, value: _output_template(value),
                                  metadata={H: "where metrics, logs and checkpoints go ({name}: the run name)"})
    threads: int = attrs.field(default=0, validator=attrs.validators.ge(0),
                               metadata={H: "torch CPU threads (0: all cores)"})
    supervised: bool = attrs.field(default=False, metadata={
        H: "declare the run supervised: required for (and only allowed with) a router that reads labels"})
    observers: tuple[str, ...] = attrs.field(default=("console", "jsonl", "tensorboard", "checkpoint"),
                                             metadata={H: "observer plugins to attach, by name"})
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


@attrs.frozen
class AgentSpec:
    name: str
    agent: ComponentSpec
    sampler: ComponentSpec
    optimizer: ComponentSpec
    frozen: bool = False  # samples and votes (e.g. as a judge) but is never updated
    ranks: tuple[int, ...] = ()  # several processes: the ranks that serve this agent (see corl.distributed)


@attrs.frozen
class VotingSpec:
    aggregator: ComponentSpec
    n_votes: int
    n_train: int


@attrs.frozen
class RunSpec:
    run: RunSection
    task: ComponentSpec
    agents: tuple[AgentSpec, ...]
    voting: VotingSpec
    topology: ComponentSpec
    eval: EvalSection
    zoo: ZooConfig
    source: str = ""
    observers: tuple[ComponentSpec, ...] = ()  # [observers.NAME] tables: configured observers (attached too)

    @property
    def output_dir(self) -> Path:
        return Path(self.run.output_dir.format(name=self.run.name))

    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]


TOP_LEVEL = ("run", "task", "agents", "voting", "topology", "eval", "zoo", "observers")
DEFAULT_TYPES = {"task": "arithmetic", "agent": "hf", "sampler": "hf", "optimizer": "grpo",
                 "aggregator": "majority", "router": "ring"}


# ---------------------------------------------------------------------------------------------
# Loading and overrides


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such recipe file (see `corl recipes ls`)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)")


def _split_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in path.split("."):
        m = _PATH_PART.fullmatch(chunk)
        if chunk.isdigit():
            parts.append(int(chunk))
        elif m:
            parts.append(m.group(1))
            parts.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
        else:
            raise ConfigError(f"--set {path}: bad key path (write e.g. agents[0].sampler.temperature)")
    return parts


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values parse as TOML, else as a plain string."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        parts = _split_path(key.strip())
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            where = _fmt(parts[: i + 1])
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    raise ConfigError(f"--set {key}: {where} does not exist")
                node = node[part]
            else:
                if not isinstance(node, dict):
                    raise ConfigError(f"--set {key}: {_fmt(parts[:i])} is not a table")
                node = node.setdefault(part, {})
        last = parts[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last >= len(node):
                raise ConfigError(f"--set {key}: {_fmt(parts)} does not exist")
        elif not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {_fmt(parts[:-1])} is not a table")
        node[last] = value
    return data


def _fmt(parts: list[str | int]) -> str:
    return functools.reduce(_join, parts, "")


# ---------------------------------------------------------------------------------------------
# Structuring attrs classes with key paths


class _Errors(list):
    def add(self, path: str, message: str) -> None:
        self.append(f"{path}: {message}" if path else message)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return f"a list ({_type_name(typing.get_args(tp)[0])} each)"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "nothing"}.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(tp: Any, value: Any, path: str, errors: _Errors) -> Any:
    origin = typing.get_origin(tp)
    bad = f"expected {_type_name(tp)}, got {value!r}"
    if tp is Any:
        return value
    if origin is Literal:
        if value in typing.get_args(tp) and type(value) is not bool:
            return value
        errors.add(path, f"invalid value {value!r}; valid: {', '.join(repr(a) for a in typing.get_args(tp))}")
        return None
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            trial = _Errors()
            out = _convert(arg, value, path, trial)
            if not trial:
                return out
        errors.add(path, bad)
        return None
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            errors.add(path, bad)
            return None
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif attrs.has(tp):
        return structure(tp, value, path, errors)
    else:
        raise TypeError(f"corl cannot read config fields of type {tp!r} ({path})")
    errors.add(path, bad)
    return None


def structure(cls: type, data: Any, path: str, errors: _Errors, skip: tuple[str, ...] = ()) -> Any:
    """Build ``cls`` from ``data``, adding a key-path message to ``errors`` for every mistake."""
    if not isinstance(data, Mapping):
        errors.add(path, f"expected a table, got {data!r}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    for key in data:
        if key not in fields and key not in skip:
            valid = ", ".join(sorted(n for n in fields if n not in skip)) or "none"
            errors.add(_join(path, key), f"unknown key; valid keys here: {valid}")
    kwargs, ok = {}, True
    for name, field in fields.items():
        if name not in data:
            if field.default is attrs.NOTHING:
                errors.add(_join(path, name), "missing required key")
                ok = False
            continue
        before = len(errors)
        value = _convert(hints[name], data[name], _join(path, name), errors)
        if len(errors) > before:
            ok = False
            continue
        if field.validator is not None:
            try:
                field.validator(None, field, value)
            except (ValueError, TypeError) as exc:
                errors.add(_join(path, name), _validator_message(exc, value))
                ok = False
                continue
        kwargs[name] = value
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        errors.add(path, str(exc))
        return None


def _validator_message(exc: Exception, value: Any) -> str:
    text = str(exc.args[0]) if exc.args and isinstance(exc.args[0], str) else str(exc)
    # attrs' messages are "'x' must be >= 0: -1"; keep the constraint and show the value.
    text = re.sub(r"^'[^']+' ", "", text).split(": ")[0]
    return f"invalid value {value!r}: {text}"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _join(path: str, key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    key = key if isinstance(key, str) and _BARE_KEY.fullmatch(key) else json.dumps(str(key))  # TOML-quoted
    return f"{path}.{key}" if path else key


def _component(registry: Registry, kind: str, data: Any, path: str, errors: _Errors,
               skip: tuple[str, ...] = (), type_key: str = "type") -> ComponentSpec | None:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        errors.add(path, f"expected a table, got {data!r}")
        return None
    name = data.get(type_key, DEFAULT_TYPES[kind])
    if isinstance(name, str) and ":" in name:
        return _import_path_component(name, data, _join(path, type_key), errors, (type_key, *skip))
    if not isinstance(name, str) or (kind, name) not in {(c.kind, c.name) for c in registry}:
        hint = " (is the plugin package installed? see `corl plugins`)"
        errors.add(_join(path, type_key), f"unknown {kind} {name!r}; available: {', '.join(registry.names(kind))}{hint}")
        return None
    component = registry.get(kind, name)
    config = structure(component.config_cls, data, path, errors, skip=(type_key, *skip))
    return None if config is None else ComponentSpec(name, config)


IMPORT_PATHS_ENV = "CORL_ALLOW_IMPORT_PATHS"


def _import_path_component(name: str, data: Mapping[str, Any], path: str, errors: _Errors,
                           skip: tuple[str, ...]) -> ComponentSpec | None:
    """``type = "package.module:Factory"``: refused unless ``CORL_ALLOW_IMPORT_PATHS=1``, because a
    recipe would otherwise run arbitrary code on import. The factory's attrs ``Config`` (if any)
    validates the table's other keys."""
    import importlib
    import os

    if not os.environ.get(IMPORT_PATHS_ENV):
        errors.add(path, f"{name!r} is an import path; recipes name registered components only "
                         f"(see `corl plugins`), or set {IMPORT_PATHS_ENV}=1 to allow import paths")
        return None
    module_name, _, attr = name.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        errors.add(path, f"cannot import {name!r}: {exc}")
        return None
    config_cls = getattr(factory, "Config", NoConfig)
    config = structure(config_cls, data, path.rpartition(".")[0], errors, skip=skip)
    return None if config is None else ComponentSpec(name, config, factory)


# ---------------------------------------------------------------------------------------------
# The recipe


def validate(data: Mapping[str, Any], registry: Registry, source: str = "") -> RunSpec:
    """Validate a whole recipe; raise :class:`ConfigError` listing every mistake."""
    errors = _Errors()
    if not isinstance(data, Mapping):
        raise ConfigError("a recipe must be a TOML table")
    for key in data:
        if key not in TOP_LEVEL:
            errors.add(_join("", key), f"unknown section; valid: {', '.join(TOP_LEVEL)}")
    run = structure(RunSection, data.get("run", {}), "run", errors)
    ev = structure(EvalSection, data.get("eval", {}), "eval", errors)
    zoo = structure(ZooConfig, data.get("zoo", {}), "zoo", errors)
    task = _component(registry, "task", data.get("task"), "task", errors)
    topology = _component(registry, "router", data.get("topology"), "topology", errors)

    voting_data = data.get("voting", {})
    aggregator = _component(registry, "aggregator", voting_data, "voting", errors, skip=("n_votes", "n_train"))
    n_votes = n_train = None
    if isinstance(voting_data, Mapping):
        n_votes = _convert(int, voting_data.get("n_votes", 8), "voting.n_votes", errors)
        n_train = _convert(int, voting_data.get("n_train", n_votes), "voting.n_train", errors)
        if isinstance(n_votes, int) and n_votes < 1:
            errors.add("voting.n_votes", f"invalid value {n_votes}: must be >= 1")
        if isinstance(n_train, int) and n_train < 2:
            errors.add("voting.n_train", f"invalid value {n_train}: must be >= 2 (group baselines need two samples)")
        if isinstance(n_votes, int) and isinstance(n_train, int) and n_train > n_votes:
            errors.add("voting.n_train", f"invalid value {n_train}: must be <= voting.n_votes ({n_votes}); "
                                         "trained samples are a subset of the voting ones")

    agents: list[AgentSpec] = []
    raw_agents = data.get("agents")
    if not isinstance(raw_agents, list) or not raw_agents:
        errors.add("agents", "expected at least one [[agents]] table")
        raw_agents = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_agents):
        path = f"agents[{i}]"
        if not isinstance(raw, Mapping):
            errors.add(path, f"expected a table, got {raw!r}")
            continue
        name = raw.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            errors.add(f"{path}.name", f"expected a name of letters, digits, '_', '-' or '.', got {name!r}")
        elif name in seen:
            errors.add(f"{path}.name", f"duplicate agent name {name!r} (also agents[{seen[name]}]); names must be unique")
        else:
            seen[name] = i
        agent = _component(registry, "agent", raw, path, errors, skip=("name", "sampler", "optimizer", "frozen", "ranks"))
        sampler = _component(registry, "sampler", raw.get("sampler"), f"{path}.sampler", errors)
        optimizer = _component(registry, "optimizer", raw.get("optimizer"), f"{path}.optimizer", errors)
        frozen = _convert(bool, raw.get("frozen", False), f"{path}.frozen", errors)
        ranks = _ranks(raw.get("ranks", []), f"{path}.ranks", errors)
        if None not in (agent, sampler, optimizer, frozen, ranks) and isinstance(name, str):
            agents.append(AgentSpec(name, agent, sampler, optimizer, frozen, ranks))
    placed = [i for i, raw in enumerate(raw_agents) if isinstance(raw, Mapping) and raw.get("ranks")]
    if placed and len(placed) != len(raw_agents):
        unplaced = next(i for i in range(len(raw_agents)) if i not in placed)
        errors.add(f"agents[{unplaced}].ranks", f"missing; agents[{placed[0]}] names its ranks, so every agent must")

    if topology is not None and run is not None:
        router_cls = topology.factory or registry.get("router", topology.type).factory
        min_agents = getattr(router_cls, "min_agents", 1)
        if len(raw_agents) < min_agents:
            errors.add("topology.type", f"{topology.type!r} needs at least {min_agents} agents, the recipe has "
                                        f"{len(raw_agents)}; use 'self' for a single agent")
        check = getattr(router_cls, "check", None)  # a router's own cross-checks against the agents
        # (only once every agent validated: a partial list would mislead the message)
        for problem in check(topology.config, agents) if check and len(agents) == len(raw_agents) else ():
            errors.add("topology", problem)
        if agents and all(a.frozen for a in agents):
            errors.add("agents", "every agent is frozen: nothing would train")
        supervised = bool(getattr(router_cls, "supervised", False))
        if supervised and not run.supervised:
            errors.add("topology.type", f"{topology.type!r} rewards with ground-truth labels; declare it with run.supervised = true")
        if run.supervised and not supervised:
            errors.add("run.supervised", f"true, but topology {topology.type!r} is label-free; "
                                         "set it to false or use a supervised router (ground_truth)")
    if run is not None:
        for i, name in enumerate(run.observers):
            if name not in registry.names("observer"):
                errors.add(f"run.observers[{i}]", f"unknown observer {name!r}; available: {', '.join(registry.names('observer'))}")
    observers = _observer_tables(registry, data.get("observers", {}), errors)
    if errors:
        raise ConfigError(*errors)
    return RunSpec(run=run, task=task, agents=tuple(agents), voting=VotingSpec(aggregator, n_votes, n_train),
                   topology=topology, eval=ev, zoo=zoo, source=source, observers=observers)


def _observer_tables(registry: Registry, data: Any, errors: _Errors) -> tuple[ComponentSpec, ...]:
    """``[observers.NAME]``: an observer's settings; a configured observer is attached to the run."""
    if not isinstance(data, Mapping):
        errors.add("observers", f"expected tables [observers.NAME], got {data!r}")
        return ()
    out = []
    for name, body in data.items():
        if name not in registry.names("observer"):
            errors.add(_join("observers", name), f"unknown observer {name!r}; available: {', '.join(registry.names('observer'))}")
            continue
        config = structure(registry.get("observer", name).config_cls, body, _join("observers", name), errors)
        if config is not None:
            out.append(ComponentSpec(name, config))
    return tuple(out)


def _ranks(value: Any, path: str, errors: _Errors) -> tuple[int, ...] | None:
    """``agents[i].ranks``: distinct non-negative process ranks (empty: placed automatically)."""
    before = len(errors)
    ranks = _convert(tuple[int, ...], value, path, errors)
    if len(errors) > before:
        return None
    bad = [r for r in ranks if r < 0]
    if bad:
        errors.add(path, f"invalid rank {bad[0]}: ranks are >= 0")
        return None
    if len(set(ranks)) != len(ranks):
        errors.add(path, f"invalid value {list(ranks)!r}: a rank is listed twice")
        return None
    return ranks


def load_recipe(path: str | Path | Mapping[str, Any], overrides: list[str] = (), registry: Registry | None = None,
                source: str | None = None) -> RunSpec:
    """Read, override and validate a recipe (a path or an already-parsed table; ``source`` names
    where a table came from, so that relative paths in it resolve against that file)."""
    if registry is None:
        from corl.plugins import build_registry, make_plugin_manager

        registry = build_registry(make_plugin_manager())
    if isinstance(path, Mapping):
        data, source = _deepcopy(path), source or "<recipe>"
    else:
        data, source = read_toml(path), str(path)
    data = apply_overrides(data, list(overrides))
    try:
        return validate(data, registry, source)
    except ConfigError as exc:
        raise ConfigError(*(f"{source}: {p}" for p in exc.problems)) from None


def _deepcopy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy(v) for v in value]
    return value


#: Keys a resumed run may change: how long, where and how it reports, not what it trains.
RESUMABLE_CHANGES = ("run.steps", "run.name", "run.output_dir", "run.observers", "run.checkpoint_every", "run.answer_timeout",
                     "run.keep_checkpoints", "run.max_nonfinite", "run.threads", "run.collective_timeout", "eval.every")


def differences(old: Mapping[str, Any], new: Mapping[str, Any], path: str = "",
                ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """Key paths where two resolved recipes differ, except the paths in ``ignore``."""
    out: list[str] = []
    if path in ignore:
        return out
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            out += differences(old.get(key), new.get(key), _join(path, key), ignore)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, _join(path, i), ignore)
    elif old != new:
        show = lambda v: "(absent)" if v is None else repr(v)
        out.append(f"{path}: {show(old)} -> {show(new)}")
    return out


def to_dict(spec: RunSpec) -> dict[str, Any]:
    """The fully resolved recipe (defaults filled in), as written to ``output_dir/recipe.json``."""
    def component(c: ComponentSpec, **extra: Any) -> dict[str, Any]:
        return {"type": c.type, **extra, **attrs.asdict(c.config)}

    return json.loads(json.dumps({  # JSON-normal: tuples become lists, as in recipe.json and checkpoints
        "run": attrs.asdict(spec.run),
        "task": component(spec.task),
        "agents": [{"name": a.name, **component(a.agent), "sampler": component(a.sampler),
                    "optimizer": component(a.optimizer), "frozen": a.frozen,
                    **({"ranks": list(a.ranks)} if a.ranks else {})}  # absent when placed automatically
                   for a in spec.agents],
        "voting": component(spec.voting.aggregator, n_votes=spec.voting.n_votes, n_train=spec.voting.n_train),
        "topology": component(spec.topology),
        "eval": attrs.asdict(spec.eval),
        "zoo": attrs.asdict(spec.zoo),
        **({"observers": {c.type: attrs.asdict(c.config) for c in spec.observers}} if spec.observers else {}),
    }))
