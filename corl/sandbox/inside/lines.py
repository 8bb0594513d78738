"""The result lines a program's results travel in, child to worker and worker to parent, and the
only way they are read back.

A child writes one line per input, ``[ok, text]``; the worker writes one line per program,
``{"i": index, "results": [[ok, text], ...]}``; both exactly as :func:`json.dumps` writes them
(ASCII only). A program can write to its own channel whatever bytes it likes, so a line is read
with a pattern of that one shape, never with a general JSON parser: nesting, numbers, ``NaN``,
duplicate keys or binary junk are simply not a result (nothing here can raise, recurse or
allocate more than the line). A text is taken only if it round-trips: an exact ``str`` with no NUL
and no lone surrogate, so whatever holds it later (a log, a JSON file, a tensorboard tag) can
encode it.

A program's interpreter writes result lines and never reads one: it imports neither :mod:`json` nor
:mod:`re` (with :mod:`enum`, most of what a fresh interpreter would spend starting), which the
readers load when they first read.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _quote  # what json.dumps quotes a str with
except ImportError:  # another Python than CPython
    from json.encoder import py_encode_basestring_ascii as _quote

#: a JSON string as json.dumps writes it: printable ASCII but for the quote and the backslash, or an escape
_STRING = rb'"(?:[ !#-\[\]-~]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"'


_compiled: list = []


def _patterns():
    """The result's and the row's patterns, compiled at the first read."""
    if not _compiled:
        import re

        _compiled.extend((re.compile(rb"\[(true|false), (" + _STRING + rb")\]"),
                          re.compile(rb'\{"i": (0|[1-9][0-9]{0,8}), "results": \[(.*)\]\}', re.DOTALL)))
    return _compiled


def round_trips(text) -> bool:
    """Whether ``text`` is a result text: an exact ``str`` that UTF-8 and JSON give back unchanged."""
    if type(text) is not str or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def result_line(ok: bool, text: str) -> bytes:
    """``json.dumps([ok, text])`` and a newline, without loading :mod:`json`."""
    return ("[" + ("true" if ok else "false") + ", " + _quote(text) + "]\n").encode()


def row_line(index: int, results: list) -> bytes:
    import json

    return (json.dumps({"i": index, "results": results}) + "\n").encode()


def _result(match) -> tuple[bool, str] | None:
    import json

    try:
        text = json.loads(match[2])  # a string literal the pattern checked: no nesting, no number
    except Exception:  # noqa: BLE001 - whatever went wrong, it is not a result
        return None
    return (match[1] == b"true", text) if round_trips(text) else None


def parse_result(line: bytes) -> tuple[bool, str] | None:
    """``(ok, text)`` from a child's line (without its newline), or None if it is not exactly one."""
    match = _patterns()[0].fullmatch(line)
    return None if match is None else _result(match)


def parse_row(line: bytes) -> tuple[int, list[tuple[bool, str]]] | None:
    """``(index, results)`` from a worker's line (without its newline), or None if it is not exactly one."""
    row = _patterns()[1].fullmatch(line)
    if row is None:
        return None
    body, results, at = row[2], [], 0
    while at < len(body):
        if results:
            if not body.startswith(b", ", at):
                return None
            at += 2
        match = _patterns()[0].match(body, at)
        result = None if match is None else _result(match)
        if result is None:
            return None
        results.append(result)
        at = match.end()
    return int(row[1]), results
