"""Building a run's components from a validated recipe (or taking objects an embedding program
hands in), checking each against its protocol where it is made, and naming each the one way
messages name it (:func:`name_of`).

Objects handed in are checked before anything is built, so a wrong object costs no model load.
The label guard holds for objects as for registered factories: a router or a shaping term reads
ground truth only when it declares so and the recipe declares ``run.supervised = true``.
:class:`Parts` builds what :class:`corl.runtime.loop.Run` asks for, in the order the run needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from corl.context import Context
from corl.errors import ConfigError, CorlError, PluginError
from corl.plugins import Registry
from corl.protocols import PROTOCOLS, missing_members
from corl.recipe import AgentSpec, ComponentSpec, RunSpec, declared_traits, router_traits
from corl.recipe.schema import argument, slot
from corl.recipe.structure import Errors, structure
from corl.runtime.boundary import first_line, guard
from corl.traits import traits

#: the kinds each agent has one of (named "agent NAME's ...")
AGENT_KINDS = ("agent", "sampler", "optimizer")


@attrs.define
class AgentSlot:
    """An agent with the sampler and optimizer that serve it (``optimizer`` None: frozen)."""

    name: str
    agent: Any
    sampler: Any
    optimizer: Any


def check_given(spec: RunSpec, given: Mapping[str, Any]) -> None:
    """Objects passed to ``corl.run``, by slot (:func:`corl.recipe.schema.slot`: ``"router"``,
    ``"sampler:a"``): each must be an object satisfying its kind's protocol (an observer: a plugin
    with corl hooks) and name a part of the recipe; a router or a shaping term object is held to the
    recipe's label guard and its own traits; an optimizer comes with the agent it updates."""
    agents = {a.name: a for a in spec.agents}
    for key, obj in given.items():
        kind, _, name = key.partition(":")
        arg = argument(key)
        if kind in AGENT_KINDS and name not in agents:
            raise ConfigError(f"{arg}: the recipe has no agent {name!r} (agents: {', '.join(agents) or 'none'})")
        if isinstance(obj, type):
            raise ConfigError(f"{arg}={obj.__name__} is a class; corl.run takes an object: {arg}={obj.__name__}(...)")
        protocol = PROTOCOLS.get(kind)
        missing = missing_members(obj, protocol) if protocol else []
        if missing:
            raise ConfigError(f"{arg}= object {type(obj).__name__}: not a corl {protocol.__name__}: it has no "
                              f"{', '.join(missing)} (see corl.protocols.{protocol.__name__})")
        if kind == "observer" and not any(a.startswith("corl_") for a in dir(obj)):
            raise ConfigError(f"{arg}= object {type(obj).__name__}: not a corl observer: it implements no corl_* hook "
                              "(see corl.hookspecs)")
        if kind == "observer":
            _traits_of("observer", obj, arg)  # (every_rank, read when it is attached)
        if kind == "optimizer" and agents[name].frozen:
            raise ConfigError(f"{arg}: agent {name!r} is frozen (agents[].frozen = true): it has no optimizer")
        if kind == "optimizer" and slot("agent", name) not in given:
            raise ConfigError(f"{arg}: an optimizer updates the agent it was made for, and agent {name!r} is built "
                              f"from the recipe; hand in that agent too: agents={{{name!r}: ...}}")
        if kind == "shaping":
            if name not in {s.name for s in spec.shaping}:
                raise ConfigError(f"{arg}: the recipe has no [[shaping]] entry {name!r} (a RunSpec is taken as it is)")
            if _traits_of("shaping", obj, arg).needs_labels and not spec.run.supervised:
                raise ConfigError(f"{arg}= object {type(obj).__name__} declares needs_labels = True (it reads "
                                  "ground-truth labels), but the recipe is label-free; declare a supervised baseline "
                                  "with run.supervised = true")
    router = given.get("router")
    if router is None:
        return
    declared = _traits_of("router", router, "router")
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


def _traits_of(kind: str, obj: Any, arg: str) -> Any:
    try:
        return traits(kind, obj)
    except TypeError as exc:
        raise ConfigError(f"{arg}= object {type(obj).__name__}: {exc}") from None


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

    def __call__(self, kind: str, spec: ComponentSpec, ctx: Context, key: str = "") -> Any:
        """Build ``spec`` (``key``: the agent or the ``[[shaping]]`` entry it is for; by default the
        agent ``ctx`` serves)."""
        factory = spec.factory or self.registry.get(kind, spec.type).factory
        who = name_of(self.registry, kind, spec, key or (ctx.agent_name if kind in AGENT_KINDS else ""))
        with guard(who, "while building the run"):
            built = factory(spec.config, attrs.evolve(ctx, builder=self.nested(who)))
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


def name_of(registry: Registry, kind: str, component: ComponentSpec | None, key: str = "", given: Any = None) -> str:
    """How every message names a run's component of ``kind``: its type and plugin (or import path),
    or the object handed in for it; ``key`` is the agent it serves, the ``[[shaping]]`` entry or
    the observer's name. ``agent 'a''s sampler 'hf' (plugin corl.builtin.hf)``,
    ``samplers['a']= object Tempered``, ``shaping 'fmt' ('format', plugin ...)``."""
    if given is not None:
        return f"{argument(slot(kind, key))}= object {type(given).__name__}"
    source = "import path" if component.factory is not None else f"plugin {registry.get(kind, component.type).plugin}"
    if kind == "shaping":
        return f"shaping {key!r} ({component.type!r}, {source})"
    text = f"{kind} {component.type!r} ({source})"
    return f"agent {key!r}'s {text}" if key and kind in AGENT_KINDS else text


@attrs.define
class ShapingSlot:
    """A built ``[[shaping]]`` term with its entry (name, weight), whether it may read labels, and
    how messages name it."""

    spec: Any
    term: Any
    needs_labels: bool
    who: str


class Parts:
    """A run's components, built from its recipe or taken from the objects handed in (``given``, by
    slot), each named by :func:`name_of` as it is made (:attr:`who`, read by ``Run.who``). The run
    asks for them in its own order: the task first (its splits are checked before any model loads),
    then each agent it holds, then the run-wide rest."""

    def __init__(self, spec: RunSpec, registry: Registry, given: Mapping[str, Any]):
        self.spec, self.registry, self.given = spec, registry, dict(given)
        self.build = Builder(registry)
        self.who: dict[tuple[str, str], str] = {}

    def name(self, kind: str, component: ComponentSpec | None, key: str = "") -> str:
        self.who[kind, key] = text = name_of(self.registry, kind, component, key, self.given.get(slot(kind, key)))
        return text

    def _make(self, kind: str, component: ComponentSpec, ctx: Context, key: str = "") -> Any:
        self.name(kind, component, key)
        given = self.given.get(slot(kind, key))
        return given if given is not None else self.build(kind, component, ctx, key)

    def task(self, ctx: Context) -> Any:
        task = self._make("task", self.spec.task, ctx)
        self.who["verifier", ""] = f"{self.who['task', '']}'s verifier"
        return task

    def agent(self, a: AgentSpec, ctx: Context) -> AgentSlot:
        """Agent ``a``, its optimizer (none when frozen) and its sampler; ``ctx`` is the agent's."""
        agent = self._make("agent", a.agent, ctx, a.name)
        ctx = attrs.evolve(ctx, agent=agent)
        optimizer = None if a.frozen else self._make("optimizer", a.optimizer, ctx, a.name)
        self.name("optimizer", a.optimizer, a.name)
        return AgentSlot(a.name, agent, self._make("sampler", a.sampler, ctx, a.name), optimizer)

    def aggregator(self, ctx: Context) -> Any:
        return self._make("aggregator", self.spec.voting.aggregator, ctx)

    def router(self, ctx: Context) -> Any:
        """The router handed in, else the recipe's: what the built one declares must match what its factory did."""
        spec = self.spec
        self.name("router", spec.topology)
        if "router" in self.given:
            return self.given["router"]
        router = self.build("router", spec.topology, ctx)
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

    def shaping(self, ctx: Context) -> list[ShapingSlot]:
        """The recipe's ``[[shaping]]`` terms, built or handed in. Only a term whose factory (or
        object) declares ``needs_labels`` is handed labels (allowed only in a run declared supervised)."""
        out = []
        for s in self.spec.shaping:
            term = self._make("shaping", s.term, ctx, s.name)
            given = self.given.get(slot("shaping", s.name))
            declared = traits("shaping", given) if given is not None else \
                declared_traits(self.registry, "shaping", s.term)
            out.append(ShapingSlot(s, term, declared.needs_labels, self.who["shaping", s.name]))
        return out

    def observers(self, ctx: Context, is_writer: bool) -> list[tuple[str, Any]]:
        """The observers to attach: ``run.observers``, every ``[observers.NAME]`` table and every one
        handed in. Observers report for the whole run from rank 0; an ``every_rank`` one (the final
        export) runs on each."""
        spec = self.spec
        configured = {c.type: c.config for c in spec.observers}
        given = {key.partition(":")[2]: obj for key, obj in self.given.items() if key.startswith("observer:")}
        out = []
        for name in dict.fromkeys([*spec.run.observers, *configured, *given]):
            if name in given:
                if is_writer or traits("observer", given[name]).every_rank:
                    self.name("observer", None, name)
                    out.append((name, given[name]))
                continue
            component = self.registry.get("observer", name)
            if not (is_writer or component.traits.every_rank):
                continue
            who = self.name("observer", ComponentSpec(name, None), name)
            config = configured.get(name) or component.config_cls()  # defaults when no table
            with guard(who, "while building the run"):
                out.append((name, component.factory(config, ctx)))
        return out
