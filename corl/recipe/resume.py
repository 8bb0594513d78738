"""What a resumed run may change, and the resolved recipe as plain JSON (``recipe.json``, checkpoints).

A saved recipe is compared with the current one key by key. A key the saved recipe does not have
(it was written before the key existed) is no change when the current value is the key's default:
the run it saved behaved as the default does. Components an embedding program handed to
``corl.run`` as objects are recorded by their class (:class:`~corl.recipe.schema.GivenObject`); a
command line cannot rebuild them, so such a run continues only from Python with the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from corl.recipe.schema import (
    OBJECT_MAPPINGS,
    AgentKeys,
    ComponentSpec,
    RunSpec,
    ShapingKeys,
    VotingKeys,
    argument,
    object_tables,
    slot,
)
from corl.recipe.structure import default_of, join

#: Keys a resumed run may change: how long, where and how it reports, not what it trains.
RESUMABLE_CHANGES = ("run.steps", "run.name", "run.output_dir", "run.observers", "run.checkpoint_every", "run.answer_timeout",
                     "run.keep_checkpoints", "run.max_nonfinite", "run.threads", "run.collective_timeout", "eval.every")

_ABSENT = object()  # a key one of two recipes does not have


def differences(old: Mapping[str, Any], new: Mapping[str, Any], path: str = "",
                ignore: tuple[str, ...] = RESUMABLE_CHANGES, defaults: Mapping[str, Any] | None = None) -> list[str]:
    """Key paths where a saved recipe ``old`` and the current ``new`` differ, except the paths in
    ``ignore``. ``defaults`` (:func:`defaults_of` the current spec) are the values a key ``old``
    lacks stands for: equal to one, the key is no change."""
    return _differences(old, new, path, ignore, _ABSENT if defaults is None else defaults)


def _differences(old: Any, new: Any, path: str, ignore: tuple[str, ...], default: Any) -> list[str]:
    if path in ignore:
        return []
    if old is _ABSENT and isinstance(new, (Mapping, list)):
        old = {} if isinstance(new, Mapping) else []  # each key inside is compared with its own default
    elif old is _ABSENT and default is not _ABSENT and new == default:
        return []
    out: list[str] = []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        inner = default if isinstance(default, Mapping) else {}
        for key in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), join(path, key), ignore,
                                inner.get(key, _ABSENT))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        inner = default if isinstance(default, list) and len(default) == len(new) else [_ABSENT] * len(new)
        for i, (a, b, d) in enumerate(zip(old, new, inner)):
            out += _differences(a, b, join(path, i), ignore, d)
    elif old != new:
        show = lambda v: "(absent)" if v is _ABSENT else repr(v)
        out.append(f"{path}: {show(old)} -> {show(new)}")
    return out


def to_dict(spec: RunSpec) -> dict[str, Any]:
    """The fully resolved recipe (defaults filled in), as written to ``output_dir/recipe.json``; a
    component handed in as an object is recorded by its class instead of the recipe's table."""
    return json.loads(json.dumps(_resolved(spec, attrs.asdict, lambda value, default: value)))  # JSON-normal


def defaults_of(spec: RunSpec) -> dict[str, Any]:
    """:func:`to_dict`'s shape holding each key's default (keys without one are left out): what a
    key missing from an older saved recipe stands for (:func:`differences`)."""
    def pick(value: Any, default: Any) -> Any:
        return default

    return _plain(_resolved(spec, _field_defaults, pick))


def _resolved(spec: RunSpec, config: Callable[[Any], dict[str, Any]], pick: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """The resolved recipe's tree: ``config(c)`` gives an attrs config's keys, ``pick(value, default)``
    a key outside the config classes (``_ABSENT``: it has no default)."""
    def component(c: ComponentSpec, kind: str = "", **extra: Any) -> dict[str, Any]:
        given = spec.objects.get(kind)
        if given is not None:
            return {**extra, **{k: pick(v, _ABSENT) for k, v in given.record().items()}}
        return {"type": pick(c.type, _ABSENT), **extra, **config(c.config)}

    tree = {
        "run": config(spec.run),
        "task": component(spec.task, "task"),
        "agents": [{"name": pick(a.name, _ABSENT), **component(a.agent, slot("agent", a.name)),
                    "sampler": component(a.sampler, slot("sampler", a.name)),
                    "optimizer": component(a.optimizer, slot("optimizer", a.name)), "frozen": pick(a.frozen, declared(AgentKeys, "frozen")),
                    "ranks": pick(list(a.ranks), list(declared(AgentKeys, "ranks")))}  # empty: placed automatically
                   for a in spec.agents],
        "voting": component(spec.voting.aggregator, "aggregator",
                            n_votes=pick(spec.voting.n_votes, declared(VotingKeys, "n_votes")),
                            n_train=pick(spec.voting.n_train, declared(VotingKeys, "n_train", spec.voting))),
        "topology": component(spec.topology, "router"),
        "eval": config(spec.eval),
        **{name: config(section) for name, section in spec.sections.items()},
        "observers": {c.type: config(c.config) for c in spec.observers},
        "shaping": [component(t.term, slot("shaping", t.name), name=pick(t.name, _ABSENT), weight=pick(t.weight, declared(ShapingKeys, "weight")))
                    for t in spec.shaping],
    }
    return tree


def declared(cls: type, key: str, owner: Any = None) -> Any:
    """Key ``key``'s declared default in a host-keys class (:class:`~corl.recipe.schema.VotingKeys`, ...);
    one read off other keys reads them off ``owner``."""
    return default_of(attrs.fields_dict(cls)[key], owner)


def _field_defaults(config: Any) -> dict[str, Any]:
    """An attrs config's fields that have a default, each with it (nested configs as tables)."""
    out = {}
    for field in attrs.fields(type(config)):
        default = default_of(field, config)
        if default is not attrs.NOTHING:
            out[field.name] = _field_defaults(default) if attrs.has(type(default)) else default
    return out


def _plain(value: Any) -> Any:
    """JSON-normal (tuples as lists, as in recipe.json), keeping the absent marker out."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not _ABSENT}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if attrs.has(type(value)):
        return _plain(attrs.asdict(value))
    return json.loads(json.dumps(value))


def recorded_objects(recipe: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The components a resolved recipe (``recipe.json``, a checkpoint's) records as objects handed
    to ``corl.run``, by slot (:func:`~corl.recipe.schema.slot`):
    ``{"router": {"object": "GatedRouter", "import": "mypkg:GatedRouter"}, "sampler:a": {...}}``."""
    return {key: {"object": table["object"], "import": table.get("import")}
            for key, _, table in object_tables(recipe) if "object" in table}


def resume_from_python(out: str, records: Mapping[str, Mapping[str, Any]]) -> str:
    """What a run built with objects ``records`` (by slot) needs, in the words of both refusals:
    which objects, and the call that continues it."""
    named = " and ".join(f"{argument(key)}= object {r['object']}" + (f" ({r['import']})" if r.get("import") else "")
                         for key, r in records.items())
    args: dict[str, list[str]] = {}
    for key, r in records.items():
        kind, _, name = key.partition(":")
        if name:
            args.setdefault(OBJECT_MAPPINGS[kind], []).append(f"{name!r}: {r['object']}(...)")
        else:
            args[kind] = [f"{r['object']}(...)"]
    call = ", ".join(f"{arg}={{{', '.join(values)}}}" if arg in OBJECT_MAPPINGS.values() else f"{arg}={values[0]}"
                     for arg, values in args.items())
    return (f"the run in {out} was built in Python with {named}, which a recipe cannot name; resume it from Python "
            f"with the same objects: corl.run({str(out)!r}, resume=True, {call})")
