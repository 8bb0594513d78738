"""The per-run plugin manager and the component registry it fills.

Built-ins and third-party packages register through the same hook. Entry points of the ``corl``
group load automatically unless ``CORL_DISABLE_PLUGIN_AUTOLOAD`` is set.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pluggy

from corl import hookspecs
from corl.errors import ConfigError, PluginError

#: Built-in plugin modules, registered exactly like third-party plugins.
BUILTIN_PLUGINS = (
    "corl.builtin.tasks",
    "corl.builtin.word_problems",
    "corl.builtin.data",
    "corl.builtin.code_tasks",
    "corl.builtin.visual",
    "corl.builtin.hf",
    "corl.builtin.voting",
    "corl.builtin.topology",
    "corl.builtin.policy",
    "corl.builtin.observers",
    "corl.builtin.early_stop",
)
KINDS = ("task", "agent", "sampler", "aggregator", "router", "optimizer", "observer")
ENTRY_POINT_GROUP = "corl"
AUTOLOAD_ENV = "CORL_DISABLE_PLUGIN_AUTOLOAD"

hookimpl = pluggy.HookimplMarker("corl")


@attrs.frozen
class Component:
    kind: str
    name: str
    factory: Callable[..., Any]
    config_cls: type
    plugin: str
    help: str = ""


class Registry:
    """Component factories by kind and name, filled by ``corl_register_components``."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Component] = {}
        self.current_plugin = "?"

    def add(self, kind: str, name: str, factory: Callable[..., Any], config_cls: type, help: str = "") -> None:
        if kind not in KINDS:
            raise PluginError(f"plugin {self.current_plugin}: unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")
        if not attrs.has(config_cls):
            raise PluginError(f"plugin {self.current_plugin}: config of {kind} {name!r} must be an attrs class")
        if (kind, name) in self._items:
            other = self._items[kind, name].plugin
            raise PluginError(f"plugin {self.current_plugin}: {kind} {name!r} is already registered by {other}")
        self._items[kind, name] = Component(kind, name, factory, config_cls, self.current_plugin, help)

    def get(self, kind: str, name: str) -> Component:
        try:
            return self._items[kind, name]
        except KeyError:
            raise ConfigError(f"unknown {kind} {name!r}; available: {', '.join(self.names(kind))}") from None

    def names(self, kind: str) -> list[str]:
        return sorted(n for k, n in self._items if k == kind)

    def __iter__(self):
        return iter(sorted(self._items.values(), key=lambda c: (c.kind, c.name)))


def make_plugin_manager(plugins: Iterable[Any] = (), autoload: bool | None = None) -> pluggy.PluginManager:
    """A fresh plugin manager: built-ins, then entry points (unless disabled), then ``plugins``."""
    pm = pluggy.PluginManager("corl")
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    if autoload is None:
        autoload = not os.environ.get(AUTOLOAD_ENV)
    if autoload:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:  # a broken third-party package must name itself
            raise PluginError(f"loading entry points of group {ENTRY_POINT_GROUP!r} failed: {exc}") from exc
    for plugin in plugins:
        pm.register(plugin, name=_plugin_name(pm, plugin))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin!r}: {exc}") from exc
    return pm


def _plugin_name(pm: pluggy.PluginManager, plugin: Any) -> str:
    """A readable name for an object plugin (its class), unique within ``pm``."""
    base = getattr(plugin, "__name__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    name, i = base, 1
    while pm.has_plugin(name):
        i += 1
        name = f"{base}#{i}"
    return name


def build_registry(pm: pluggy.PluginManager) -> Registry:
    registry = Registry()
    for impl in pm.hook.corl_register_components.get_hookimpls():  # registration order
        registry.current_plugin = impl.plugin_name
        impl.function(registry=registry)
    registry.current_plugin = "?"
    return registry


def describe(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """What is installed: each plugin's name, distribution version and the hooks it implements."""
    dists = {id(p): d for p, d in pm.list_plugin_distinfo()}
    rows = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(id(plugin))
        version = dist.version if dist is not None else _corl_version() if name.startswith("corl.") else ""
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or ())
        rows.append({"name": name, "version": version, "hooks": hooks})
    return rows


def _corl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corl")
    except PackageNotFoundError:
        return "dev"
