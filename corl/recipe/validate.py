"""A parsed recipe -> a validated :class:`RunSpec`, every mistake collected with its key path.

One pass over the recipe's sections, each checked against the others; what each key may hold is
declared beside it (:mod:`corl.recipe.schema`, the component's config class), the cross-section
rules are here. How one component table is read (a registered name or an import path) is
:mod:`corl.recipe.components`; reading a file with its overrides, :mod:`corl.recipe.load`.

Each message names the TOML key path, the bad value and the valid choices; nothing here imports
torch, so ``corl validate`` is instant and a recipe error costs no model load.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from corl.errors import ConfigError
from corl.plugins import CORE_SECTIONS, Registry
from corl.recipe.components import GIVEN, declared_traits, host_keys, host_table, read_component, router_traits
from corl.recipe.resume import recorded_objects, resume_from_python
from corl.recipe.schema import (
    AgentKeys,
    AgentSpec,
    ComponentSpec,
    EvalSection,
    RunSection,
    RunSpec,
    ShapingKeys,
    ShapingSpec,
    VotingKeys,
    VotingSpec,
    object_tables,
    shaping_name,
    slot,
)
from corl.recipe.structure import Errors, join, structure
from corl.traits import RecipeFacts, RouterTraits


def validate(data: Mapping[str, Any], registry: Registry, source: str = "", *,
             distributions: Mapping[str, str] | None = None, objects: Collection[str] = ()) -> RunSpec:
    """Validate a whole recipe; raise :class:`ConfigError` listing every mistake.

    ``distributions`` (name -> version) are the plugin distributions loaded, for ``run.plugins``.
    ``objects``: the slots the caller hands in objects for (see :func:`load_recipe`).
    """
    errors = Errors()
    if not isinstance(data, Mapping):
        raise ConfigError("a recipe must be a TOML table")
    sections = {s.name: s for s in registry.sections()}
    for key in data:
        if key not in CORE_SECTIONS and key not in sections:
            errors.add(join("", key), f"unknown section; valid: {', '.join([*CORE_SECTIONS, *sections])}")
    run = structure(RunSection, data.get("run", {}), "run", errors)
    data = _objects_given_again(data, run, objects)
    ev = structure(EvalSection, data.get("eval", {}), "eval", errors)
    own = {name: structure(s.config_cls, data.get(name, {}), name, errors) for name, s in sections.items()}
    # a component handed in as an object replaces its table, which is then not looked up in the registry
    task = GIVEN if "task" in objects else read_component(registry, "task", data.get("task"), "task", errors)
    topology = GIVEN if "router" in objects else read_component(registry, "router", data.get("topology"), "topology",
                                                             errors)
    aggregator, voting = _voting(registry, data.get("voting", {}), errors, "aggregator" in objects)
    agents, raw_agents = _agents(registry, data.get("agents"), errors, objects)
    if task is not None and None not in own.values():
        _check_agents(registry, task, agents, raw_agents, own, errors)
    if topology is not None and run is not None and "router" not in objects:  # an object is checked as it is handed in
        _check_router(router_traits(registry, topology), topology, run, agents, len(raw_agents), errors)
    if agents and all(a.frozen for a in agents):
        errors.add("agents", "every agent is frozen: nothing would train")
    if run is not None:
        for i, name in enumerate(run.observers):
            if not registry.has("observer", name) and slot("observer", name) not in objects:
                errors.add(f"run.observers[{i}]", registry.unknown("observer", name))
        _check_plugins(run.plugins, distributions, registry, errors)
    observers = _observer_tables(registry, data.get("observers", {}), errors, objects)
    if run is not None:
        _check_untabled_observers(registry, [n for n in run.observers if slot("observer", n) not in objects],
                                  {c.type for c in observers}, data.get("observers"), errors)
    shaping = _shaping(registry, _with_given_terms(data.get("shaping", []), objects), run, errors, objects)
    if errors:
        raise ConfigError(*registry.collapse(errors))  # a plugin that failed to load, said once
    return RunSpec(run=run, task=task, agents=tuple(agents), voting=VotingSpec(aggregator, voting.n_votes, voting.n_train),
                   topology=topology, eval=ev, source=source, observers=observers, shaping=shaping, sections=own)


def data_problems(spec: RunSpec, registry: Registry, rows: int) -> list[str]:
    """What the task's data holds wrong in the first ``rows`` rows of each file (``corl validate``), through
    the task's declared ``check_data`` (:class:`~corl.traits.TaskTraits`): the lines building the task would
    give, without a model or torch. A task that declares no check has none."""
    task = spec.task
    declared = declared_traits(registry, "task", task)
    if declared.check_data is None:
        return []
    return list(declared.check_data(task.config, spec.source, rows))


def _objects_given_again(data: Mapping[str, Any], run: RunSection | None, objects: Collection[str]) -> Mapping[str, Any]:
    """A resolved recipe that records components handed to ``corl.run`` as objects (an embedded
    run's ``recipe.json``) is valid only where the same slots are handed in again: their records
    are then dropped (the objects replace those tables), and any other is refused in one line."""
    recorded = recorded_objects(data)
    missing = {key: record for key, record in recorded.items() if key not in objects}
    if missing:
        out = run.output_dir.format(name=run.name) if run is not None else "its output dir"
        where = ", ".join(path for key, path, _ in object_tables(data) if key in missing)
        raise ConfigError(f"{where}: {resume_from_python(out, missing)}")
    if not recorded:
        return data
    data = copy.deepcopy(dict(data))
    for key, _, table in object_tables(data):
        if key in recorded:
            for record in ("object", "import"):
                table.pop(record, None)
    return data


def _with_given_terms(data: Any, objects: Collection[str]) -> Any:
    """``[[shaping]]`` with an entry (weight 1) for each shaping object whose name no entry has."""
    if not isinstance(data, list):
        return data
    named = {key for key, _, _ in object_tables({"shaping": data})}
    added = [{"name": key.partition(":")[2]} for key in objects if key.startswith("shaping:") and key not in named]
    return [*data, *added]


def _check_router(declared: RouterTraits, topology: ComponentSpec, run: RunSection, agents: list[AgentSpec],
                  n_raw: int, errors: Errors) -> None:
    if n_raw < declared.min_agents:
        errors.add("topology.type", f"{topology.type!r} needs at least {declared.min_agents} agents, the recipe has "
                                    f"{n_raw}; use 'self' for a single agent")
    # a router's own cross-checks, once every agent validated (a partial list would mislead)
    if declared.check is not None and len(agents) == n_raw:
        for problem in declared.check(topology.config, agents):
            errors.add("topology", problem)
    if declared.supervised and not run.supervised:
        errors.add("topology.type", f"{topology.type!r} rewards with ground-truth labels; declare it with run.supervised = true")
    if run.supervised and not declared.supervised:
        errors.add("run.supervised", f"true, but topology {topology.type!r} is label-free; "
                                     "set it to false or use a supervised router (ground_truth)")


def _check_agents(registry: Registry, task: ComponentSpec, agents: list[AgentSpec], raw_agents: list[Any],
                  sections: Mapping[str, Any], errors: Errors) -> None:
    """Each agent's own cross-checks (:class:`~corl.traits.AgentTraits`) against the task's
    declared splits (:class:`~corl.traits.TaskTraits`) and the plugin sections."""
    declared = declared_traits(registry, "task", task)
    facts = RecipeFacts(task.type, lambda split: declared.missing_split(task.config, split) if declared.missing_split
                        else None, sections)
    index = {raw["name"]: i for i, raw in enumerate(raw_agents) if isinstance(raw, Mapping)
             and isinstance(raw.get("name"), str)}
    for agent in agents:
        spec = agent.agent
        checks = declared_traits(registry, "agent", spec)
        for key, message in checks.check(spec.config, facts) if checks.check else ():
            errors.add(join(f"agents[{index[agent.name]}]", key), message)


def _voting(registry: Registry, data: Any, errors: Errors,
            given: bool = False) -> tuple[ComponentSpec | None, VotingKeys | None]:
    aggregator = GIVEN if given else read_component(registry, "aggregator", data, "voting", errors,
                                                skip=host_keys(VotingKeys))
    return aggregator, host_table(VotingKeys, data, "voting", errors)


def _agents(registry: Registry, raw_agents: Any, errors: Errors,
            objects: Collection[str] = ()) -> tuple[list[AgentSpec], list[Any]]:
    agents: list[AgentSpec] = []
    if not isinstance(raw_agents, list) or not raw_agents:
        errors.add("agents", "expected at least one [[agents]] table")
        raw_agents = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_agents):
        path = f"agents[{i}]"
        if not isinstance(raw, Mapping):
            errors.add(path, f"expected a table, got {raw!r}")
            continue
        keys = host_table(AgentKeys, raw, path, errors)
        given = {kind for kind in ("agent", "sampler", "optimizer") if slot(kind, str(raw.get("name"))) in objects}
        agent = GIVEN if "agent" in given else read_component(registry, "agent", raw, path, errors,
                                                              skip=host_keys(AgentKeys))  # an object replaces its table
        if keys is None:
            continue
        if keys.name in seen:
            errors.add(f"{path}.name", f"duplicate agent name {keys.name!r} (also agents[{seen[keys.name]}]); "
                                       "names must be unique")
        seen.setdefault(keys.name, i)
        sampler_data = keys.sampler
        if agent is not None and registry.has("sampler", agent.type) and "type" not in sampler_data:
            # an agent type that has a sampler of its own name samples with it by default (hf_vision)
            sampler_data = {**sampler_data, "type": agent.type}
        sampler = GIVEN if "sampler" in given else read_component(registry, "sampler", sampler_data,
                                                                  f"{path}.sampler", errors)
        optimizer = GIVEN if "optimizer" in given else read_component(registry, "optimizer", keys.optimizer,
                                                                      f"{path}.optimizer", errors)
        if None not in (agent, sampler, optimizer):
            agents.append(AgentSpec(keys.name, agent, sampler, optimizer, keys.frozen, keys.ranks))
    placed = [i for i, raw in enumerate(raw_agents) if isinstance(raw, Mapping) and raw.get("ranks")]
    if placed and len(placed) != len(raw_agents):
        unplaced = next(i for i in range(len(raw_agents)) if i not in placed)
        errors.add(f"agents[{unplaced}].ranks", f"missing; agents[{placed[0]}] names its ranks, so every agent must")
    return agents, raw_agents


def _observer_tables(registry: Registry, data: Any, errors: Errors,
                     objects: Collection[str] = ()) -> tuple[ComponentSpec, ...]:
    """``[observers.NAME]``: an observer's settings; a configured observer is attached to the run.
    An observer handed in as an object replaces its table."""
    if not isinstance(data, Mapping):
        errors.add("observers", f"expected tables [observers.NAME], got {data!r}")
        return ()
    out = []
    for name, body in data.items():
        if slot("observer", name) in objects:
            continue
        if not registry.has("observer", name):
            errors.add(join("observers", name), registry.unknown("observer", name))
            continue
        config = structure(registry.get("observer", name).config_cls, body, join("observers", name), errors)
        if config is not None:
            out.append(ComponentSpec(name, config))
    return tuple(out)


def _check_untabled_observers(registry: Registry, names: Sequence[str], configured: set[str], tables: Any,
                              errors: Errors) -> None:
    """An observer named in ``run.observers`` without an ``[observers.NAME]`` table is built with its
    config class's defaults: a required setting must be given in a table."""
    for name in names:
        if name in configured or (isinstance(tables, Mapping) and name in tables) or not registry.has("observer", name):
            continue
        found = Errors()
        structure(registry.get("observer", name).config_cls, {}, join("observers", name), found)
        for problem in found:
            errors.append(f"{problem} (observer {name!r} is attached by run.observers; give its settings in "
                          f"[observers.{name}])")


def _shaping(registry: Registry, data: Any, run: RunSection | None, errors: Errors,
             objects: Collection[str] = ()) -> tuple[ShapingSpec, ...]:
    """``[[shaping]]``: reward terms beside the peer reward, each with a ``weight`` (and a ``name``
    for its metric, the type by default, an import path's function name). A term that reads labels needs a run declared supervised."""
    if not isinstance(data, list) or not all(isinstance(x, Mapping) for x in data):
        errors.add("shaping", f"expected [[shaping]] tables, got {data!r}")
        return ()
    if run is not None and not run.peer_reward and not data:
        errors.add("run.peer_reward", "false leaves no reward: add [[shaping]] terms (or pass reward functions: "
                                      "corl.run(..., rewards=[fn])), or set it to true")
    out, seen = [], {}
    for i, raw in enumerate(data):
        path = f"shaping[{i}]"
        named = shaping_name(raw)
        if slot("shaping", named) in objects:  # an object replaces the term: its type is not looked up
            keys = host_table(ShapingKeys, {k: v for k, v in raw.items() if k != "name"}, path, errors)
            if keys is not None:
                seen.setdefault(named, i)
                out.append(ShapingSpec(named, keys.weight, GIVEN))
            continue
        if "type" not in raw:
            errors.add(f"{path}.type", f"missing; available: {', '.join(registry.names('shaping'))}")
            continue
        term = read_component(registry, "shaping", raw, path, errors, skip=host_keys(ShapingKeys))
        keys = host_table(ShapingKeys, raw, path, errors)
        if keys is None:
            continue
        name = named
        if name in seen:
            errors.add(f"{path}.name", f"{name!r} is also shaping[{seen[name]}]'s name; give one of them a "
                                       "name = \"...\" of its own")
        seen.setdefault(name, i)
        if term is None:
            continue
        declared = declared_traits(registry, "shaping", term)
        if declared.needs_labels and run is not None and not run.supervised:
            errors.add(f"{path}.type", f"{term.type!r} rewards with ground-truth labels, which a label-free run never "
                                       "reads; drop it, or declare a supervised baseline (run.supervised = true)")
        out.append(ShapingSpec(name, keys.weight, term))
    return tuple(out)


def _check_plugins(required: tuple[str, ...], distributions: Mapping[str, str] | None, registry: Registry,
                   errors: Errors) -> None:
    """``run.plugins``: each named distribution (optionally with a version specifier) is loaded."""
    if not required or distributions is None:
        return
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    loaded = {canonicalize_name(name): version for name, version in distributions.items()}
    for i, text in enumerate(required):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            errors.add(f"run.plugins[{i}]", f"invalid value {text!r}: expected a distribution name, e.g. 'corl-vllm' "
                                            "or 'corl-vllm>=0.2'")
            continue
        version = loaded.get(canonicalize_name(req.name))
        if version is None:
            failed = [f"{name!r} failed to load: {why}" for name, why in registry.failed.items()]
            why = "; ".join(failed) if failed else ("not installed, or not loaded (see `corl plugins`, "
                                                    "CORL_PLUGINS, CORL_DISABLE_PLUGIN_AUTOLOAD)")
            errors.add(f"run.plugins[{i}]", f"the recipe needs plugin distribution {req.name!r}: {why}")
        elif req.specifier and not req.specifier.contains(version, prereleases=True):
            errors.add(f"run.plugins[{i}]", f"the recipe needs {text!r}, but {req.name} {version} is installed")


