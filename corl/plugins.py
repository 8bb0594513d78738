"""The per-run plugin manager, which fills a component registry (:mod:`corl.registry`).

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

import pluggy

from corl import hookspecs
from corl.errors import CorlError, PluginError
from corl.registry import (  # noqa: F401 - the registry's names, re-exported where they were
    AUTOLOAD_ENV,
    BUILTIN_QUALIFIER,
    CORE_SECTIONS,
    KINDS,
    Component,
    Registry,
    Section,
)

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
ENTRY_POINT_GROUP = "corl"
ALLOW_ENV = "CORL_PLUGINS"


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
