"""Building a run's components from a validated recipe (or taking objects an embedding program
hands in), checking each against its protocol where it is made.

Objects handed in are checked before anything is built, so a wrong object costs no model load.
The label guard holds for objects as for registered factories: a router reads ground truth only
when it declares ``supervised = True`` and the recipe declares ``run.supervised = true``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from corl.context import Context
from corl.errors import ConfigError, CorlError, PluginError
from corl.plugins import Registry
from corl.protocols import PROTOCOLS, missing_members
from corl.recipe import ComponentSpec, RunSpec, declared_traits, router_traits
from corl.recipe.structure import Errors, structure
from corl.runtime.boundary import first_line, guard
from corl.traits import traits


@attrs.define
class AgentSlot:
    """An agent with the sampler and optimizer that serve it (``optimizer`` None: frozen)."""

    name: str
    agent: Any
    sampler: Any
    optimizer: Any


def check_given(spec: RunSpec, given: Mapping[str, Any]) -> None:
    """Objects passed to ``corl.run`` (``task=``, ``aggregator=``, ``router=``): each must satisfy its
    protocol, and a router object is held to the recipe's label guard and its own traits."""
    for kind, obj in given.items():
        if obj is None:
            continue
        if isinstance(obj, type):
            raise ConfigError(f"{kind}={obj.__name__} is a class; corl.run takes an object: {kind}={obj.__name__}(...)")
        missing = missing_members(obj, PROTOCOLS[kind])
        if missing:
            raise ConfigError(f"{kind}= object {type(obj).__name__}: not a corl {PROTOCOLS[kind].__name__}: it has no "
                              f"{', '.join(missing)} (see corl.protocols.{PROTOCOLS[kind].__name__})")
    router = given.get("router")
    if router is None:
        return
    try:
        declared = traits("router", router)
    except TypeError as exc:
        raise ConfigError(f"router= object {type(router).__name__}: {exc}") from None
    _label_guard(spec, declared.supervised, f"router= object {type(router).__name__}")
    if len(spec.agents) < declared.min_agents:
        raise ConfigError(f"router= object {type(router).__name__} needs at least {declared.min_agents} agents, the "
                          f"recipe has {len(spec.agents)}")
    if declared.check is None:
        return
    try:  # its own check reads its own config (the recipe's [topology] table belongs to another router)
        config = router.config
    except AttributeError:
        raise ConfigError(f"router= object {type(router).__name__} declares check() but has no config attribute for "
                          "it to check (corl.traits.RouterTraits)") from None
    for problem in declared.check(config, spec.agents):
        raise ConfigError(f"router= object {type(router).__name__}: {problem}")


def _config_for(config_cls: type, config: Any, asked: str) -> Any:
    """``ctx.build``'s config: None (the defaults), an instance, or a table of recipe keys (validated)."""
    if config is None:
        config = {}
    if isinstance(config, config_cls):
        return config
    if not isinstance(config, Mapping):
        raise PluginError(f"{asked}: config must be a {config_cls.__name__}, a table of its keys or None, got "
                          f"{type(config).__name__}")
    errors = Errors()
    built = structure(config_cls, dict(config), "", errors)
    if errors:
        raise PluginError(f"{asked}: {'; '.join(errors)}")
    return built


def _label_guard(spec: RunSpec, supervised: bool, who: str) -> None:
    if supervised and not spec.run.supervised:
        raise ConfigError(f"{who} declares supervised = True (it reads ground-truth labels), but the recipe is "
                          "label-free; declare a supervised baseline with run.supervised = true")
    if spec.run.supervised and not supervised:
        raise ConfigError(f"{who} is label-free, but the recipe declares run.supervised = true")


class Builder:
    """Calls factories as ``factory(config, ctx)`` and checks what they return."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def __call__(self, kind: str, spec: ComponentSpec, ctx: Context) -> Any:
        component = self.registry.get(kind, spec.type) if spec.factory is None else None
        factory = spec.factory or component.factory
        who = f"{kind} {spec.type!r} (plugin {component.plugin if component else 'import path'})"
        agent = f"agent {ctx.agent_name!r}'s " if ctx.agent_name and kind in ("agent", "sampler", "optimizer") else ""
        with guard(f"{agent}{who}", "while building the run"):
            built = factory(spec.config, attrs.evolve(ctx, builder=self.nested(f"{agent}{who}")))
        missing = missing_members(built, PROTOCOLS[kind]) if kind in PROTOCOLS else []
        if missing:
            raise PluginError(f"{who} built a {type(built).__name__} without {', '.join(missing)} "
                              f"(see corl.protocols.{PROTOCOLS[kind].__name__})")
        return built

    def nested(self, outer: str) -> Callable[[str, str, Any, Context], Any]:
        """What :meth:`corl.context.Context.build` calls for the component named ``outer``: build a
        registered component for it; every mistake in doing so is one line naming ``outer`` first."""
        def build(kind: str, name: str, config: Any, ctx: Context) -> Any:
            asked = f"{outer}: ctx.build({kind!r}, {name!r})"
            try:
                component = self.registry.get(kind, name)
            except ConfigError as exc:
                raise PluginError(f"{asked}: {exc}") from None
            config = _config_for(component.config_cls, config, asked)
            inner = f"{outer}'s {kind} {name!r} (plugin {component.plugin})"
            try:
                built = component.factory(config, attrs.evolve(ctx, builder=self.nested(inner)))
            except CorlError as exc:  # the wrapped component's own words, said for the wrapper
                raise PluginError(f"{inner}: {exc}") from exc
            except Exception as exc:  # noqa: BLE001 - one line that names both
                raise PluginError(f"{inner} raised {type(exc).__name__}: {first_line(exc)} while being built") from exc
            missing = missing_members(built, PROTOCOLS[kind]) if kind in PROTOCOLS else []
            if missing:
                raise PluginError(f"{inner} built a {type(built).__name__} without {', '.join(missing)}")
            return built

        return build

    def router(self, spec: RunSpec, ctx: Context) -> Any:
        """The recipe's router; what the built object declares must match what its factory did."""
        router = self(kind="router", spec=spec.topology, ctx=ctx)
        declared = router_traits(self.registry, spec.topology)
        try:
            own = traits("router", router)
        except TypeError as exc:
            raise PluginError(f"router {spec.topology.type!r}: {exc}") from None
        if own.supervised != declared.supervised:
            raise PluginError(f"router {spec.topology.type!r}: its factory declares supervised = {declared.supervised} "
                              f"but the router it built declares {own.supervised}; declare it on the factory")
        _label_guard(spec, own.supervised, f"router {spec.topology.type!r}")
        return router


@attrs.define
class ShapingSlot:
    """A built ``[[shaping]]`` term with its entry (name, weight), whether it may read labels, and
    how messages name it."""

    spec: Any
    term: Any
    needs_labels: bool
    who: str


def shaping_terms(spec: RunSpec, registry: Registry, build: Builder, ctx: Context) -> list[ShapingSlot]:
    """The recipe's ``[[shaping]]`` terms, built. Only a term whose factory declares ``needs_labels``
    is handed labels (validation allows one only in a run declared supervised)."""
    out = []
    for s in spec.shaping:
        component = registry.get("shaping", s.term.type) if s.term.factory is None else None
        declared = declared_traits(registry, "shaping", s.term)
        who = f"shaping {s.name!r} ({s.term.type!r}, {f'plugin {component.plugin}' if component else 'import path'})"
        out.append(ShapingSlot(s, build("shaping", s.term, ctx), declared.needs_labels, who))
    return out


def observers(spec: RunSpec, registry: Registry, ctx: Context, is_writer: bool) -> list[tuple[str, Any]]:
    """The observers to attach: ``run.observers`` and every ``[observers.NAME]`` table. Observers
    report for the whole run from rank 0; an ``every_rank`` one (the final export) runs on each."""
    configured = {c.type: c.config for c in spec.observers}
    out = []
    for name in dict.fromkeys([*spec.run.observers, *configured]):
        component = registry.get("observer", name)
        if not (is_writer or component.traits.every_rank):
            continue
        config = configured.get(name) or component.config_cls()  # defaults when no table
        with guard(f"observer {name!r} (plugin {component.plugin})", "while building the run"):
            out.append((name, component.factory(config, ctx)))
    return out
