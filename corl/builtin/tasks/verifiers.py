"""Answer verifiers: how two answers a completion or a data set states are compared.

``MathVerifier`` reads answers with :mod:`corl.builtin.tasks.extract` and compares them: exact
strings, exact rationals, text answers as words, then math-verify (symbolic, slow, time-bounded).
``IntegerVerifier`` takes the whole completion as an integer (the tiny zoo models).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Hashable

from corl.builtin.tasks.extract import (
    _PHRASE,
    _WORD,
    _parse,
    _rational,
    extract_answer,
    extract_label,
    extract_label_path,
)


def _words(s: str) -> str | None:
    """A text answer's words, case and spacing aside (``Evelyn``, ``New York``), or None for
    mathematics; one letter is a variable or a choice, left to math-verify."""
    s = " ".join(s.split())
    return s.casefold() if _PHRASE.fullmatch(s) and _WORD.search(s) else None


class MathVerifier:
    """Answers of math problems: ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one answer.

    ``equivalent(answer, reference)`` reads ``b`` as the reference (math-verify is not symmetric
    for equations: ``x=5`` matches the reference ``5``).
    """

    # math-verify simplifies with sympy, so corl puts its time bound around us. math-verify's own
    # SIGALRM timeouts take over that timer during each of its calls (and end it): the effective
    # bound of one extraction or comparison is ``timeout`` per parse and per verify.
    bounded = False

    def __init__(self, timeout: int = 2):
        # Imported now, not at module import (sympy costs every CLI call ~0.4 s) nor on first use,
        # where corl's time bound could interrupt the import halfway.
        import math_verify  # noqa: F401

        self.timeout = timeout  # seconds per math-verify parse / comparison (whole seconds: signal.alarm)

    def _seconds(self) -> int | None:
        # math-verify's timeouts use SIGALRM, which only the main thread may set.
        return self.timeout if threading.current_thread() is threading.main_thread() else None

    def extract(self, text: str) -> Hashable | None:
        return extract_answer(text, self._seconds())

    def label(self, text: str) -> Hashable | None:
        """A data set's reference answer (:func:`extract_label`)."""
        return extract_label(text, self._seconds())

    def label_path(self, text: str) -> tuple[Hashable | None, str | None]:
        """The reference answer and how it was found (:func:`extract_label_path`)."""
        return extract_label_path(text, self._seconds())

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        if a is None or b is None:  # no answer agrees with nothing, also not with another non-answer
            return False
        if a == b:
            return True
        a, b = str(a), str(b)
        ra, rb = _rational(a), _rational(b)
        if ra is not None and rb is not None:  # two numbers: exact, and decisive (0.33 is not 1/3)
            return ra == rb
        wa, wb = _words(a), _words(b)
        if wa is not None or wb is not None:  # to sympy, "Evelyn" is a product of six symbols
            return wa == wb
        return self._symbolic(a, b)

    def _symbolic(self, a: str, b: str) -> bool:
        seconds = self._seconds()
        try:
            from math_verify import verify

            pa, pb = _parse(a, seconds), _parse(b, seconds)
            return bool(pa and pb and verify(pb, pa, timeout_seconds=seconds, raise_on_error=False))
        except Exception:  # a malformed answer is not equal to anything
            return False


_INT = re.compile(r"\s*(-?\d+)\s*")


class IntegerVerifier:
    """Answers are integers and the whole completion must be the number: what the tiny
    char-level zoo models answer (anything else has not answered)."""

    bounded = True  # a regex over a short string: no time bound needed

    def extract(self, text: str) -> Hashable | None:
        m = _INT.fullmatch(text)
        return int(m.group(1)) if m else None

    def label(self, text: str) -> Hashable | None:
        return self.extract(text)

    def label_path(self, text: str) -> tuple[Hashable | None, str | None]:
        label = self.extract(text)
        return label, None if label is None else "whole"

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        return a == b
