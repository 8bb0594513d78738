"""How an output becomes the string a behaviour signature holds: :func:`canonical`. The worker uses
it on what programs return, and the tasks' reference solutions on theirs, so both agree."""

from __future__ import annotations


def canonical(value) -> str:
    """The signature string of one output: ``repr``, with integral floats read as ints and other
    floats rounded to 9 significant digits (so ``2.0`` and ``2`` agree, as ``==`` says)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if value.is_integer() and abs(value) < 2**53:
            return repr(int(value))
        return repr(float(f"{value:.9g}"))
    if isinstance(value, (list, tuple)):
        inner = ", ".join(canonical(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)
