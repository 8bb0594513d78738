"""A component's recipe table -> a :class:`ComponentSpec`, and what the chosen factory declares.

A table names its component by registered name (``type = "majority"``) or, where allowed, by import
path (``type = "package.module:Factory"``); the component's config class validates the table's other
keys, the host's own keys of that table (:class:`~corl.recipe.schema.AgentKeys`, ...) are read apart.
The declared traits of the chosen factory are read here too, for the cross-section checks and the build.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

import attrs

from corl import rewards
from corl.errors import PluginError
from corl.plugins import Registry
from corl.recipe.schema import DEFAULT_TYPES, AgentSpec, ComponentSpec
from corl.recipe.structure import Errors, join, structure
from corl.traits import ModelFacts, RouterTraits, declared_config, traits
from corl.types import NoConfig

IMPORT_PATHS_ENV = "CORL_ALLOW_IMPORT_PATHS"


def _handed_in(config: Any, ctx: Any) -> Any:
    raise RuntimeError("this component was handed to corl.run as an object; the run uses that object")


#: a component an embedding program hands to ``corl.run`` as an object, in place of its recipe table:
#: its traits are its own (read off the object when it is handed in), its table is not validated
GIVEN = ComponentSpec("<object>", None, factory=_handed_in)


def declared_traits(registry: Registry, kind: str, component: ComponentSpec) -> Any:
    """What a chosen component's factory declares (its :data:`~corl.traits.TRAITS` class)."""
    if component.factory is not None:  # an import path: read off the factory itself
        return traits(kind, component.factory)
    return registry.get(kind, component.type).traits


def router_traits(registry: Registry, topology: ComponentSpec) -> RouterTraits:
    """What the chosen router's factory declares (supervised, min_agents, check)."""
    return declared_traits(registry, "router", topology)


def model_facts(registry: Registry, agent: AgentSpec) -> ModelFacts:
    """What agent ``agent``'s type says of its model (:class:`~corl.traits.AgentTraits`
    ``describe``): for messages and placement, never read off an agent type's own keys."""
    declared = declared_traits(registry, "agent", agent.agent)
    if declared.describe is None:
        return ModelFacts()
    facts = declared.describe(agent.agent.config)
    if not isinstance(facts, ModelFacts):
        raise PluginError(f"agent {agent.agent.type!r}: its describe trait returned {type(facts).__name__}, "
                          "not a corl.traits.ModelFacts")
    return facts


def host_keys(cls: type) -> tuple[str, ...]:
    """The keys of a component table that are the host's (``cls``: :class:`VotingKeys`, ...), not the component's."""
    return tuple(f.name for f in attrs.fields(cls))


def host_table(cls: type, data: Any, path: str, errors: Errors) -> Any:
    """A component table's host keys (``cls``), structured on their own; a non-table is the component's to report."""
    if data is None:  # as read_component reads it: an empty table
        data = {}
    if not isinstance(data, Mapping):
        return None
    names = host_keys(cls)
    return structure(cls, {k: v for k, v in data.items() if k in names}, path, errors)


def read_component(registry: Registry, kind: str, data: Any, path: str, errors: Errors,
               skip: tuple[str, ...] = (), type_key: str = "type") -> ComponentSpec | None:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        errors.add(path, f"expected a table, got {data!r}")
        return None
    name = data.get(type_key, DEFAULT_TYPES.get(kind))
    if isinstance(name, str) and ":" in name and not registry.has(kind, name):  # not "<distribution>:<name>"
        return _import_path_component(name, data, join(path, type_key), errors, (type_key, *skip), kind)
    if not isinstance(name, str) or not registry.has(kind, name):
        errors.add(join(path, type_key), registry.unknown(kind, name))  # unknown, or ambiguous between plugins
        return None
    component = registry.get(kind, name)
    config = structure(component.config_cls, data, path, errors, skip=(type_key, *skip))
    return None if config is None else ComponentSpec(name, config)


def _import_path_component(name: str, data: Mapping[str, Any], path: str, errors: Errors,
                           skip: tuple[str, ...], kind: str = "") -> ComponentSpec | None:
    """``type = "package.module:Factory"``: refused unless ``CORL_ALLOW_IMPORT_PATHS=1``, because a
    recipe would otherwise run arbitrary code on import. The factory's attrs ``Config`` (if any)
    validates the table's other keys. A shaping term may also be a plain reward function
    (:mod:`corl.rewards`: ``fn(prompts, completions, **kwargs)``, as TRL's ``reward_funcs``)."""
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
    if kind == "shaping" and rewards.is_reward_function(factory):
        factory = rewards.factory_for(factory, name)
    config_cls = declared_config(factory) or NoConfig
    config = structure(config_cls, data, path.rpartition(".")[0], errors, skip=skip)
    return None if config is None else ComponentSpec(name, config, factory)
