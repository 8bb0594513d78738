"""Reading a recipe file and applying ``--set key.path=value`` overrides to the parsed table."""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path
from typing import Any

from corl.errors import ConfigError
from corl.recipe.structure import join


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such recipe file (see `corl recipes ls`)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)")


def _split_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in path.split("."):
        m = _PATH_PART.fullmatch(chunk)
        if chunk.isdigit():
            parts.append(int(chunk))
        elif m:
            parts.append(m.group(1))
            parts.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
        else:
            raise ConfigError(f"--set {path}: bad key path (write e.g. agents[0].sampler.temperature)")
    return parts


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values parse as TOML, else as a plain string."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        parts = _split_path(key.strip())
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            where = fmt(parts[: i + 1])
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    raise ConfigError(f"--set {key}: {where} does not exist")
                node = node[part]
            else:
                if not isinstance(node, dict):
                    raise ConfigError(f"--set {key}: {fmt(parts[:i])} is not a table")
                node = node.setdefault(part, {})
        last = parts[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last >= len(node):
                raise ConfigError(f"--set {key}: {fmt(parts)} does not exist")
        elif not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {fmt(parts[:-1])} is not a table")
        node[last] = value
    return data


def fmt(parts: list[str | int]) -> str:
    return functools.reduce(join, parts, "")


