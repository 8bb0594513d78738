"""Reading a recipe whole: a file or a parsed table, ``--set`` overrides applied, validated; every
problem prefixed with where the recipe came from."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from corl.errors import ConfigError
from corl.plugins import Registry
from corl.recipe.overrides import apply_overrides, read_toml
from corl.recipe.schema import RunSpec
from corl.recipe.validate import validate


def load_recipe(recipe: str | os.PathLike[str] | Mapping[str, Any], overrides: Sequence[str] = (), *,
                registry: Registry | None = None, source: str | None = None,
                distributions: Mapping[str, str] | None = None, objects: Collection[str] = ()) -> RunSpec:
    """Read, override and validate a recipe; raise :class:`~corl.errors.ConfigError` with one line
    per mistake, each starting with where the recipe came from.

    ``recipe``: a TOML file, or an already-parsed table (a dict, e.g. a run's ``recipe.json``).
    ``overrides``: ``key.path=value`` strings, as ``--set`` takes them (values parse as TOML).
    ``registry``: the components to validate against (:func:`corl.plugins.registry_of` a run's plugin
    manager); by default one built from every installed plugin, and then ``distributions`` too.
    ``source``: the file a table came from, so that relative data paths in it resolve against that
    file (default ``"<recipe>"``; a file is its own source). ``distributions``: the loaded plugin
    distributions, name -> version, that ``run.plugins`` is checked against (None: not checked).
    ``objects``: the slots (:func:`corl.recipe.schema.slot`: ``"router"``, ``"sampler:a"`` for agent
    ``a``'s sampler, ``"shaping:NAME"``, ``"observer:NAME"``) the caller hands in objects for, as
    ``corl.run(..., router=obj, samplers={"a": obj})`` does: the tables they replace are not looked
    up in the registry; a recipe that records such objects (an embedded run's ``recipe.json``)
    loads only where the same slots are handed in again.
    """
    if registry is None:
        from corl.plugins import distributions as loaded
        from corl.plugins import make_plugin_manager, registry_of

        pm = make_plugin_manager()
        registry, distributions = registry_of(pm), loaded(pm)
    if isinstance(recipe, Mapping):
        data, source = _deepcopy(recipe), source or "<recipe>"
    else:
        data, source = read_toml(recipe), str(recipe)
    data = apply_overrides(data, list(overrides))
    try:
        return validate(data, registry, source, distributions=distributions, objects=objects)
    except ConfigError as exc:
        raise ConfigError(*(f"{source}: {p}" for p in exc.problems)) from None


def _deepcopy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy(v) for v in value]
    return value
