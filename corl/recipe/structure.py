"""A strict structurer: a parsed TOML table -> a frozen attrs instance, with a key path in every
message. We wrote it (~100 lines) instead of using cattrs: cattrs converts ``1.5`` to an ``int`` and
``true`` to a ``str`` unless every primitive gets a strict hook, and does not attribute attrs
validator failures to a key path."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, Literal

import attrs


class Errors(list):
    """Every mistake found, one ``key.path: message`` line each."""

    def add(self, path: str, message: str) -> None:
        self.append(f"{path}: {message}" if path else message)


def type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return f"a list ({type_name(typing.get_args(tp)[0])} each)"
    if typing.get_origin(tp) is Mapping:
        return "a table"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "nothing"}.get(tp, getattr(tp, "__name__", str(tp)))


def convert(tp: Any, value: Any, path: str, errors: Errors) -> Any:
    origin = typing.get_origin(tp)
    bad = f"expected {type_name(tp)}, got {value!r}"
    if tp is Any:
        return value
    if origin is Literal:
        if value in typing.get_args(tp) and type(value) is not bool:
            return value
        errors.add(path, f"invalid value {value!r}; valid: {', '.join(repr(a) for a in typing.get_args(tp))}")
        return None
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            trial = Errors()
            out = convert(arg, value, path, trial)
            if not trial:
                return out
        errors.add(path, bad)
        return None
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            errors.add(path, bad)
            return None
        item = typing.get_args(tp)[0]
        return tuple(convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value))
    if origin is Mapping:  # a table read by someone else (an agent's sampler: its own component)
        if isinstance(value, Mapping):
            return value
        errors.add(path, bad)
        return None
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif attrs.has(tp):
        return structure(tp, value, path, errors)
    else:
        raise TypeError(f"corl cannot read config fields of type {tp!r} ({path})")
    errors.add(path, bad)
    return None


def structure(cls: type, data: Any, path: str, errors: Errors, skip: tuple[str, ...] = ()) -> Any:
    """Build ``cls`` from ``data``, adding a key-path message to ``errors`` for every mistake."""
    if not isinstance(data, Mapping):
        errors.add(path, f"expected a table, got {data!r}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    for key in data:
        if key not in fields and key not in skip:
            valid = ", ".join(sorted(n for n in fields if n not in skip)) or "none"
            errors.add(join(path, key), f"unknown key; valid keys here: {valid}")
    # known: every key before this one, defaults too, None where it was wrong (what a cross-check reads)
    kwargs, known, ok = {}, {}, True
    for name, field in fields.items():
        known[name] = None
        if name in data:
            before = len(errors)
            value = convert(hints[name], data[name], join(path, name), errors)
            if len(errors) > before:
                ok = False
                continue
        elif field.default is attrs.NOTHING:
            errors.add(join(path, name), "missing required key")
            ok = False
            continue
        elif not _reads_other_keys(field):
            known[name] = default_of(field)
            continue
        elif ok:  # read off the keys before it: checked as if given, its rules hold for the default too
            value = default_of(field, SimpleNamespace(**known))
        else:
            continue
        known[name] = value
        if field.validator is not None:
            try:
                field.validator(SimpleNamespace(**known), field, value)
            except (ValueError, TypeError) as exc:
                errors.add(join(path, name), _validator_message(exc, value))
                ok = False
                continue
        kwargs[name] = value
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        errors.add(path, str(exc))
        return None


def default_of(field: attrs.Attribute, owner: Any = None) -> Any:
    """A field's declared default (``attrs.NOTHING``: none); one read off other keys reads them off ``owner``."""
    default = field.default
    if isinstance(default, attrs.Factory):
        return default.factory(owner) if default.takes_self else default.factory()
    return default


def _reads_other_keys(field: attrs.Attribute) -> bool:
    return isinstance(field.default, attrs.Factory) and field.default.takes_self


def _validator_message(exc: Exception, value: Any) -> str:
    text = str(exc.args[0]) if exc.args and isinstance(exc.args[0], str) else str(exc)
    if text.startswith("invalid "):  # a validator's whole message, value included
        return text
    # attrs' messages are "'x' must be >= 0: -1"; keep the constraint and show the value.
    text = re.sub(r"^'[^']+' ", "", text).split(": ")[0]
    return f"invalid value {value!r}: {text}"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def join(path: str, key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    key = key if isinstance(key, str) and _BARE_KEY.fullmatch(key) else json.dumps(str(key))  # TOML-quoted
    return f"{path}.{key}" if path else key

