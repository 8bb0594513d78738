"""Reading one field of a data row, whatever layout the data set has.

* dotted paths into nested tables: verl's ``reward_model.ground_truth`` (a key that itself holds a
  dot is found first);
* chat message lists (``[{"role": "user", "content": ...}, ...]``): a ``messages`` column, TRL's
  conversational ``prompt``, verl's ``prompt``. As a prompt, the conversation up to its last user
  turn (:func:`prompt_messages`, rendered by a chat-format agent's template as it is) and, for agents
  without a chat template, its text (:func:`prompt_text`: the last user turn with any system turns
  before it prepended); as an answer, the last assistant turn (a reference solution). Content given
  as parts (``[{"type": "text", "text": ...}]``) is joined.

A value that is not what the task needs raises :class:`FieldError`, one line naming the field; the
task adds the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class FieldError(Exception):
    """What is wrong with a row's field (the caller names the file and line)."""


class MissingField(FieldError):
    """The row has no such field; ``available`` says which it has (``fields of 'reward_model': style``)."""

    def __init__(self, path: str, available: str):
        super().__init__(f"missing field {path!r} ({available})")
        self.available = available


def lookup(row: Mapping[str, Any], path: str) -> Any:
    """``row[path]``, or the nested value a dotted ``path`` names; :class:`FieldError` if missing."""
    if path in row:
        return row[path]
    value: Any = row
    walked: list[str] = []
    for part in path.split("."):
        if not isinstance(value, Mapping):
            raise FieldError(f"field {path!r}: {'.'.join(walked)!r} is {_kind(value)}, not a table")
        if part not in value:
            where = f" of {'.'.join(walked)!r}" if walked else ""
            raise MissingField(path, f"fields{where}: {', '.join(map(str, value)) or 'none'}")
        value = value[part]
        walked.append(part)
    return value


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) and "role" in m for m in value)


def prompt_text(value: Any, path: str) -> str:
    """A prompt: text, or a chat conversation's last user turn (system turns prepended)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if is_messages(value):
        turns = _turns(value, path)
        users = [i for i, (role, _) in enumerate(turns) if role == "user"]
        if not users:
            roles = ", ".join(role for role, _ in turns)
            raise FieldError(f"field {path!r} is a conversation without a user turn (roles: {roles})")
        system = [text for role, text in turns[: users[-1]] if role in ("system", "developer")]
        return "\n\n".join([*system, turns[users[-1]][1]])
    raise FieldError(f"field {path!r} is {_kind(value)}, not text or a list of chat messages "
                     f"({{\"role\": ..., \"content\": ...}}): {short(value)}")


def prompt_messages(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """A conversation's turns up to and including its last user turn, ``(role, text)`` each, as a
    chat template should see them (TRL passes a conversational prompt to it as it is); ``()`` for text."""
    if not is_messages(value):
        return ()
    turns = _turns(value, path)
    users = [i for i, (role, _) in enumerate(turns) if role == "user"]
    return tuple(turns[: users[-1] + 1]) if users else ()


def answer_text(value: Any, path: str) -> str | None:
    """A reference answer: text or a number, or a conversation's last assistant turn (None if it has none)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if is_messages(value):
        replies = [text for role, text in _turns(value, path) if role == "assistant"]
        return replies[-1] if replies else None
    hint = (f"; name the key that holds it: {', '.join(repr(f'{path}.{k}') for k in value)}"
            if isinstance(value, Mapping) and value else "")
    raise FieldError(f"field {path!r} is {_kind(value)}, not an answer (text or a number){hint}: {short(value)}")


def _turns(messages: list, path: str) -> list[tuple[str, str]]:
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text") or "" for p in content if isinstance(p, Mapping) and p.get("type") == "text")
        if not isinstance(content, str):
            raise FieldError(f"field {path!r}: message {i} ({m.get('role')!r}) has no text content: {short(m)}")
        out.append((str(m["role"]), content))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return {str: "text", bool: "true/false", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def short(value: Any, n: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    except (TypeError, ValueError):  # a value JSON cannot show (an image, bytes)
        text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."
