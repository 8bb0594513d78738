"""The per-run plugin manager and the component registry it fills.

(Just over 300 lines: loading, the registry and the failure records one `corl plugins` shows.)

Built-ins and third-party packages register through the same hook. Entry points of the ``corl``
group load automatically unless ``CORL_DISABLE_PLUGIN_AUTOLOAD`` is set to a true value;
``CORL_PLUGINS=a,b`` loads only the named entry points or distributions (an allow-list, as llm's
``LLM_LOAD_PLUGINS``). A third-party plugin that fails to import or to register is skipped and
remembered (``corl plugins`` lists it; a recipe that needs one of its components names it), so
one broken package never breaks every command.
"""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import os
import types
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pluggy

from corl import hookspecs
from corl.errors import ConfigError, CorlError, PluginError
from corl.traits import traits

#: Built-in plugin modules, registered exactly like third-party plugins.
BUILTIN_PLUGINS = (
    "corl.builtin.tasks.arithmetic",
    "corl.builtin.tasks.addition",
    "corl.builtin.tasks.word_problems",
    "corl.builtin.tasks.drills",
    "corl.builtin.tasks.data",
    "corl.builtin.tasks.code_tasks",
    "corl.builtin.tasks.shapes",
    "corl.builtin.hf",
    "corl.builtin.voting",
    "corl.builtin.topology",
    "corl.builtin.policy",
    "corl.builtin.shaping",
    "corl.builtin.observers",
    "corl.builtin.early_stop",
)
KINDS = ("task", "agent", "sampler", "aggregator", "router", "optimizer", "observer", "shaping")
#: Recipe sections of the host itself; plugins may declare more (``registry.add_section``).
CORE_SECTIONS = ("run", "task", "agents", "voting", "topology", "eval", "observers", "shaping")
ENTRY_POINT_GROUP = "corl"
AUTOLOAD_ENV = "CORL_DISABLE_PLUGIN_AUTOLOAD"
ALLOW_ENV = "CORL_PLUGINS"

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
        self.owners: dict[str, str] = {}  # plugin name -> its distribution, for messages

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
            return "".join(f" (plugin {name!r} failed to load: " + (f"see above{self._of(name)})" if name in said else
                                                                      f"{why})") for name, why in sorted(self.failed.items()))
        return " (is the plugin package installed? see `corl plugins`)"

    def _of(self, plugin: str) -> str:
        owner = self.owners.get(plugin)
        return f", distribution {owner}" if owner and owner != plugin else ""

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


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


class PluginManager(pluggy.PluginManager):
    """A run's (or a command's) plugin manager: pluggy's, with what loading found out and the
    registry its plugins fill (:func:`registry_of`)."""

    def __init__(self) -> None:
        super().__init__("corl")
        self.add_hookspecs(hookspecs)
        self.corl_failed: dict[str, str] = {}  # plugin name -> one line on why it was skipped
        self.corl_dists: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution name, version)
        self.corl_owners: dict[str, str] = {}  # plugin name -> the distribution it belongs to (entry point or module)
        self.corl_registry: Registry | None = None  # built once, on first use


def make_plugin_manager(plugins: Iterable[Any] = (), autoload: bool | None = None) -> PluginManager:
    """A fresh plugin manager: built-ins, then entry points (unless disabled), then ``plugins``.

    Entry points that fail to import are skipped and recorded in ``pm.corl_failed``; plugin
    objects passed in ``plugins`` are the caller's own and raise instead.
    """
    pm = PluginManager()
    for name in BUILTIN_PLUGINS:
        register(pm, importlib.import_module(name), name)
    if autoload is None:
        autoload = not _true(os.environ.get(AUTOLOAD_ENV))
    if autoload:
        _load_entry_points(pm)
    for plugin in plugins:
        if pm.is_registered(plugin):  # the very module an entry point loaded (a plugin's own tests pass it too)
            continue
        name = _plugin_name(pm, plugin)
        owner = _distribution_of(plugin)
        if owner:  # a distribution's module passed in (its own tests): named and qualified as installed
            pm.corl_owners[name] = owner
        register(pm, plugin, name)
    return pm


def _distribution_of(plugin: Any) -> str | None:
    """The installed distribution a plugin module belongs to (None for any other object)."""
    if not isinstance(plugin, types.ModuleType):
        return None
    top = plugin.__name__.partition(".")[0]
    names = importlib.metadata.packages_distributions().get(top, [])
    if len(names) != 1 or top == "corl":
        return None
    try:
        return importlib.metadata.distribution(names[0]).metadata["name"] or names[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def _allowed() -> set[str] | None:
    raw = os.environ.get(ALLOW_ENV)
    if raw is None:
        return None
    return {x.strip() for x in raw.split(",") if x.strip()}


def _load_entry_points(pm: PluginManager) -> None:
    allowed = _allowed()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            dist_name = dist.metadata["name"] or "?"
            if allowed is not None and ep.name not in allowed and dist_name not in allowed:
                continue
            pm.corl_dists[ep.name] = (dist_name, dist.version)
            pm.corl_owners[ep.name] = dist_name
            try:
                plugin = ep.load()
                register(pm, plugin, ep.name, f"distribution {dist_name} (entry point {ep.name!r})")
            except Exception as exc:  # noqa: BLE001 - a broken package is reported by name and skipped
                if pm.has_plugin(ep.name):
                    pm.unregister(name=ep.name)
                pm.corl_failed[ep.name] = (f"PluginError: {exc}" if isinstance(exc, PluginError) else
                                           f"{type(exc).__name__}: {_first_line(exc)} (distribution {dist_name})")


def register(pm: pluggy.PluginManager, plugin: Any, name: str, who: str | None = None) -> None:
    """Register ``plugin`` under ``name`` and validate its hooks now: a misspelled hook, a wrong
    argument name, or a ``corl_*`` function without ``@corl.hookimpl`` is an error naming it (as
    ``who`` says, e.g. ``plugin corl-gspo``; by default ``plugin 'NAME'``)."""
    who = who or f"plugin {name!r}"
    unmarked = [attr for attr in dir(plugin) if attr.startswith("corl_") and callable(getattr(plugin, attr, None))
                and pm.parse_hookimpl_opts(plugin, attr) is None]
    if unmarked:
        raise PluginError(f"{who}: {unmarked[0]} is not marked with @corl.hookimpl, so corl would never call it")
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except (pluggy.PluginValidationError, ValueError) as exc:
        if pm.has_plugin(name):
            pm.unregister(name=name)
        raise PluginError(f"{who}: {_hook_problem(pm, exc)}") from None


def _hook_problem(pm: pluggy.PluginManager, exc: Exception) -> str:
    """pluggy's reason a hook implementation was refused, in one line: the arguments no spec has (with
    the spec's), or the unknown hook (with the nearest real one)."""
    import difflib
    import re

    text = str(exc)
    unknown = re.search(r"unknown hook '(\w+)'", text)
    if unknown:
        hooks = [h for h in dir(hookspecs) if h.startswith("corl_")]
        near = difflib.get_close_matches(unknown.group(1), hooks, n=1)
        return (f"unknown hook {unknown.group(1)!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                + f" (hooks: {', '.join(hooks)})")
    args = re.search(r"hook '(\w+)'.*Argument\(s\) (\{.*?\}) are declared in the hookimpl", text, re.S)
    if args:
        spec = getattr(pm.hook, args.group(1)).spec
        allowed = ", ".join(spec.argnames) if spec is not None else "?"
        return (f"{args.group(1)} takes no argument(s) {args.group(2)}; its arguments are ({allowed}), any of "
                "which an implementation may leave out")
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def call_hook(pm: pluggy.PluginManager, hook: str, names: Callable[[str], str] | None = None,
              **kwargs: Any) -> list[Any]:
    """Call ``hook`` on every plugin. An exception raised by a plugin's implementation becomes a
    :class:`PluginError` naming that plugin (``names(plugin_name)`` says how) and the hook; a
    :class:`CorlError` already says what to fix and passes unchanged, as do signals."""
    try:
        return getattr(pm.hook, hook)(**kwargs)
    except CorlError:
        raise
    except Exception as exc:  # noqa: BLE001 - turned into one line that names the plugin
        culprit = _raised_by(pm, hook, exc)
        who = (names or (lambda name: f"plugin {name!r}"))(culprit) if culprit else "a plugin"
        raise PluginError(f"{who}: {hook} raised {type(exc).__name__}: {_first_line(exc)}") from exc


def _raised_by(pm: pluggy.PluginManager, hook: str, exc: BaseException) -> str | None:
    """The plugin whose implementation of ``hook`` the traceback of ``exc`` passes through."""
    import inspect

    codes = {}
    for impl in getattr(pm.hook, hook).get_hookimpls():
        code = getattr(inspect.unwrap(impl.function), "__code__", None)
        if code is not None:
            codes[code] = impl.plugin_name
    tb = exc.__traceback__
    while tb is not None:  # outermost first: the implementation pluggy called
        if tb.tb_frame.f_code in codes:
            return codes[tb.tb_frame.f_code]
        tb = tb.tb_next
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _plugin_name(pm: pluggy.PluginManager, plugin: Any) -> str:
    """A readable name for an object plugin (a module's name, else its class), unique within ``pm``."""
    base = plugin.__name__ if isinstance(plugin, types.ModuleType) else f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    name, i = base, 1
    while pm.has_plugin(name):
        i += 1
        name = f"{base}#{i}"
    return name


def registry_of(pm: PluginManager) -> Registry:
    """The registry of ``pm``'s plugins, built on first use and kept with ``pm``: a run (or a
    command) validates its recipe, builds its components and names them from one registry, and
    each plugin's ``corl_register_components`` runs once. Plugins registered later (a run's
    observers) add no components."""
    if pm.corl_registry is None:
        pm.corl_registry = build_registry(pm)
    return pm.corl_registry


def build_registry(pm: PluginManager) -> Registry:
    """Every plugin's components, in a new registry (:func:`registry_of` keeps one per plugin
    manager). A third-party entry-point plugin whose registration fails is skipped (its partial
    registrations removed) and recorded; any other failure raises."""
    registry = Registry()
    registry.failed.update(pm.corl_failed)
    registry.owners = dict(pm.corl_owners)
    external = set(pm.corl_dists)
    registry.external = {plugin_label(pm, name) for name in external}
    for impl in pm.hook.corl_register_components.get_hookimpls():  # registration order
        registry.current_plugin = plugin_label(pm, impl.plugin_name)
        registry.current_qualifier = (BUILTIN_QUALIFIER if impl.plugin_name in BUILTIN_PLUGINS else
                                      pm.corl_owners.get(impl.plugin_name))
        before = copy.copy(registry.__dict__)
        before = {k: copy.copy(v) for k, v in before.items()}
        try:
            impl.function(registry=registry)
        except Exception as exc:  # noqa: BLE001
            if impl.plugin_name not in external:
                if isinstance(exc, PluginError):
                    raise
                raise PluginError(f"plugin {impl.plugin_name!r}: corl_register_components failed: "
                                  f"{type(exc).__name__}: {_first_line(exc)}") from exc
            registry.__dict__.update(before)  # its partial registrations removed
            registry.failed[impl.plugin_name] = (f"corl_register_components failed: {_first_line(exc)} "
                                                 f"(distribution {pm.corl_owners[impl.plugin_name]})")
    registry.current_plugin, registry.current_qualifier = "?", None
    return registry


def plugin_label(pm: PluginManager, name: str) -> str:
    """How messages name a plugin: by the distribution users install (``corl-gspo``), whether its
    entry point loaded it or its module was passed in; a built-in or another object by its own name."""
    return pm.corl_owners.get(name, name)


def describe(pm: PluginManager) -> list[dict[str, Any]]:
    """What is installed: each plugin's name, its distribution and version, and the hooks it
    implements; plugins that failed to load are listed with the reason."""
    dists = pm.corl_dists
    rows = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist, version = dists.get(name, (DISTRIBUTION, corl_version()) if name.startswith("corl.") else ("", ""))
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or ())
        rows.append({"name": name, "distribution": dist, "version": version, "hooks": hooks, "error": None})
    for name, why in sorted(pm.corl_failed.items()):
        dist, version = dists.get(name, ("", ""))
        rows.append({"name": name, "distribution": dist, "version": version, "hooks": [], "error": why})
    return rows


def distributions(pm: PluginManager) -> dict[str, str]:
    """Loaded plugin distributions, name -> version (corl itself included)."""
    out = {DISTRIBUTION: corl_version()}
    for name, (dist, version) in pm.corl_dists.items():
        if name not in pm.corl_failed:
            out[dist] = version
    return out


DISTRIBUTION = "co-rl"  # the name corl installs under (its import name and command are `corl`; `corl` on the package index is another project)


def corl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "dev"
