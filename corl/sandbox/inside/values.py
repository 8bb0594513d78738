"""How an output becomes the string a behaviour signature holds: :func:`canonical`. The worker uses
it on what programs return, and the tasks' reference solutions on theirs, so both agree."""

from __future__ import annotations

#: the deepest nesting of lists, tuples, dicts and sets a signature holds (a value nested deeper is
#: ``bad_output``): far past any honest answer, and well inside the interpreter's recursion limit
MAX_DEPTH = 100
_CONTAINERS = (list, tuple, dict, set, frozenset)


class TooDeep(ValueError):
    """A value nested past :data:`MAX_DEPTH`: it has no signature."""


def _check_depth(value) -> None:
    """Raise :class:`TooDeep` where containers nest past :data:`MAX_DEPTH`: a walk with a stack of
    its own, so that no depth makes it recurse (``repr`` and :func:`canonical` do)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _CONTAINERS):
            if depth > MAX_DEPTH:
                raise TooDeep(f"a value nested deeper than {MAX_DEPTH}")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def canonical(value) -> str:
    """The signature string of one output: ``repr``, with integral floats read as ints and other
    floats rounded to 9 significant digits (so ``2.0`` and ``2`` agree, as ``==`` says). Raises
    :class:`TooDeep` for a value nested past :data:`MAX_DEPTH`."""
    _check_depth(value)
    return _canonical(value)


def _canonical(value) -> str:
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if value.is_integer() and abs(value) < 2**53:
            return repr(int(value))
        return repr(float(f"{value:.9g}"))
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_canonical(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)
