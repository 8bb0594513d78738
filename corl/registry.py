"""The component registry a plugin fills through ``corl_register_components`` (the
:class:`corl.context.RegistryView` it is handed): component factories by kind and name, their
qualified names, the names two plugins share, and plugin-owned recipe sections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from corl.errors import ConfigError, PluginError
from corl.traits import traits

KINDS = ("task", "agent", "sampler", "aggregator", "router", "optimizer", "observer", "shaping")
#: Recipe sections of the host itself; plugins may declare more (``registry.add_section``).
CORE_SECTIONS = ("run", "task", "agents", "voting", "topology", "eval", "observers", "shaping")
#: the environment variable that switches entry-point autoload off (read by :mod:`corl.plugins`)
AUTOLOAD_ENV = "CORL_DISABLE_PLUGIN_AUTOLOAD"


@attrs.frozen
class Component:
    kind: str
    name: str
    factory: Callable[..., Any]
    config_cls: type
    plugin: str
    help: str = ""
    traits: Any = None  # the factory's declared traits (corl.traits.TRAITS), for kinds that have them
    qualifier: str | None = None  # its distribution (``corl`` for a built-in); None: a plugin object passed in

    @property
    def qualified(self) -> str:
        """The name a recipe can always use, ``<distribution>:<name>`` (the bare name for a plugin object)."""
        return f"{self.qualifier}:{self.name}" if self.qualifier else self.name


@attrs.frozen
class Section:
    name: str
    config_cls: type
    plugin: str
    help: str = ""


#: how a recipe names a built-in unambiguously (``corl:majority``); a distribution's components go by
#: its name (``corl-gspo:agreement``)
BUILTIN_QUALIFIER = "corl"


class Registry:
    """Component factories by kind and name, and plugin-owned recipe sections, filled by
    ``corl_register_components`` (the :class:`corl.context.RegistryView` a plugin is handed).

    Every component of a built-in or of a plugin distribution also answers to its qualified name,
    ``<distribution>:<name>`` (``corl:reliability``, ``corl-gspo:reliability``). When a distribution
    registers a name a built-in or another distribution already has, both stay loaded and the bare
    name becomes ambiguous: ``corl plugins`` lists the clash, and a recipe that uses the bare name is
    told, at its key, the qualified names to choose from. A plugin object passed in by the caller (not
    a distribution) that reuses a name is refused, as is a plugin registering one name twice."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Component] = {}  # unambiguous bare names
        self._qualified: dict[tuple[str, str], Component] = {}  # "<distribution>:<name>"
        self._all: list[Component] = []
        self.clashes: dict[tuple[str, str], list[Component]] = {}  # ambiguous bare names -> their components
        self._sections: dict[str, Section] = {}
        self.current_plugin = "?"
        self.current_qualifier: str | None = None  # the distribution the current plugin belongs to
        self.failed: dict[str, str] = {}  # plugin -> why it was skipped (import or registration error)
        self.external: set[str] = set()  # plugins loaded through entry points (by the names messages use)
        self._said: set[str] = set()  # failed plugins whose reason a message already gave
        self._facts: dict[str, Callable[[], Any]] = {}  # corl env's lines a plugin adds (name -> how to compute it)

    def add(self, kind: str, name: str, factory: Callable[..., Any], config_cls: type, help: str = "") -> None:
        who = f"plugin {self.current_plugin}"
        if kind not in KINDS:
            raise PluginError(f"{who}: unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")
        if not isinstance(name, str) or not name or ":" in name:
            raise PluginError(f"{who}: a {kind} needs a non-empty string name without ':', got {name!r}")
        if not callable(factory):
            raise PluginError(f"{who}: the factory of {kind} {name!r} is not callable: {factory!r}")
        if not attrs.has(config_cls):
            raise PluginError(f"{who}: config of {kind} {name!r} must be an attrs class")
        try:
            declared = traits(kind, factory)
        except TypeError as exc:
            raise PluginError(f"{who}: {kind} {name!r}: {exc}") from None
        component = Component(kind, name, factory, config_cls, self.current_plugin, help, declared,
                              self.current_qualifier)
        others = self.clashes.get((kind, name)) or ([self._items[kind, name]] if (kind, name) in self._items else [])
        if others:
            mine = [c for c in others if c.plugin == self.current_plugin]
            if mine or component.qualifier is None or any(c.qualifier is None for c in others) \
                    or component.qualifier == BUILTIN_QUALIFIER == others[0].qualifier:
                other = (mine or others)[0].plugin
                hint = (f" (an installed distribution, loaded through its entry point; to test another copy of it, "
                        f"load only the plugins you pass: corl.testing.run_tiny does by default, or set "
                        f"{AUTOLOAD_ENV}=1)" if other in self.external and self.current_plugin not in self.external
                        else "")
                raise PluginError(f"{who}: {kind} {name!r} is already registered by {other}{hint}")
            self._items.pop((kind, name), None)  # two distributions (or one and corl): the bare name is ambiguous
            self.clashes[kind, name] = [*others, component]
        else:
            self._items[kind, name] = component
        if component.qualifier is not None:
            self._qualified[kind, component.qualified] = component
        self._all.append(component)

    def add_section(self, name: str, config_cls: type, help: str = "") -> None:
        """Declare top-level recipe section ``[name]``, validated against ``config_cls`` (its
        defaults apply when a recipe leaves it out); components read it as ``ctx.section(name)``."""
        who = f"plugin {self.current_plugin}"
        if name in CORE_SECTIONS:
            raise PluginError(f"{who}: section [{name}] belongs to corl itself")
        if name in self._sections:
            raise PluginError(f"{who}: section [{name}] is already declared by {self._sections[name].plugin}")
        if not attrs.has(config_cls):
            raise PluginError(f"{who}: config of section [{name}] must be an attrs class")
        self._sections[name] = Section(name, config_cls, self.current_plugin, help)

    def add_fact(self, name: str, compute: Callable[[], Any]) -> None:
        """A fact ``corl env`` reports for bug reports (``compute()``, JSON-able, called only then)."""
        self._facts[name] = compute

    def facts(self) -> dict[str, Any]:
        """Every plugin's facts, computed now (a fact that raises says so in its place)."""
        out: dict[str, Any] = {}
        for name, compute in self._facts.items():
            try:
                out[name] = compute()
            except Exception as exc:  # a bug report must still print
                out[name] = f"error: {exc}"
        return out

    def get(self, kind: str, name: str) -> Component:
        found = self._items.get((kind, name)) or self._qualified.get((kind, name))
        if found is None:
            raise ConfigError(self.unknown(kind, name))
        return found

    def has(self, kind: str, name: str) -> bool:
        return (kind, name) in self._items or (kind, name) in self._qualified

    def unknown(self, kind: str, name: Any) -> str:
        """Why ``name`` names no ``kind``, in one line: ambiguous (with the names to choose from), or
        unknown (with the available ones)."""
        clash = self.clashes.get((kind, name)) if isinstance(name, str) else None
        if clash:
            return (f"{kind} {name!r} is ambiguous: {' and '.join(c.qualifier or c.plugin for c in clash)} each "
                    f"register one; write {' or '.join(repr(c.qualified) for c in clash)}")
        return f"unknown {kind} {name!r}; available: {', '.join(self.names(kind))}{self.hint()}"

    def names(self, kind: str) -> list[str]:
        """The names a recipe may use: bare ones, and the qualified names of ambiguous ones."""
        return sorted([n for k, n in self._items if k == kind]
                      + [c.qualified for (k, _), clash in self.clashes.items() if k == kind for c in clash])

    def clash_lines(self) -> list[str]:
        """One line per ambiguous bare name (``corl plugins``)."""
        return [f"{kind} {name!r} is registered by {' and '.join(c.qualifier or c.plugin for c in clash)}: a recipe "
                f"names one as {' or '.join(repr(c.qualified) for c in clash)}"
                for (kind, name), clash in sorted(self.clashes.items())]

    def sections(self) -> list[Section]:
        return sorted(self._sections.values(), key=lambda s: s.name)

    def hint(self) -> str:
        """What to say after an unknown name: plugins that failed, else how to check what is installed."""
        if self.failed:  # the reason once per registry (one command), then only the name
            said = self._said
            self._said = set(self.failed)
            return "".join(f" (plugin {name!r} failed to load" + (": see above)" if name in said else f": {why})")
                           for name, why in sorted(self.failed.items()))
        return " (is the plugin package installed? see `corl plugins`)"

    def collapse(self, problems: list[str]) -> list[str]:
        """A recipe's problems, those a plugin that failed to load explains said once: every key that
        names what it would have provided (its components, its sections) in one line, with why it
        failed, instead of one line per key."""
        if not self.failed:
            return problems
        mine = [p for p in problems if " failed to load" in p or ": unknown section; valid:" in p]
        if len(mine) < 2:
            return problems
        keys = ", ".join(p.split(": ", 1)[0] for p in mine)
        self._said = set()
        return [f"{keys}: unknown here{self.hint()}", *[p for p in problems if p not in mine]]

    def __iter__(self):
        return iter(sorted(self._all, key=lambda c: (c.kind, c.name, c.plugin)))
