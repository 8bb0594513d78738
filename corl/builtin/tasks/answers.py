"""Final answers in free-form completions: find them the way benchmarks state them, and compare them.

``extract_answer`` tries, in order: the last ``\\boxed{...}`` / ``\\fbox{...}``, GSM8K's ``#### 42``,
"The answer is ..." / "Answer: ...", and the last number in the text. ``MathVerifier`` compares
answers: exact strings, then exact rationals, then math-verify (symbolic, slow, time-bounded).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Hashable
from fractions import Fraction

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE = re.compile(r"\\boxed +([^\s$]+)")  # MATH sometimes writes \boxed 5
_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(r"(?:\bthe\s+(?:final\s+)?answer\s+is\b\s*:?|\banswer\s*:)", re.IGNORECASE)
# Up to the end of the line or of the sentence: a period that ends a sentence is followed by
# white space or the end, which keeps the point of "3.5".
_SENTENCE = re.compile(r"\s*(.*?)(?:\.(?=\s|$)|\n|$)")
# A minus right after a word or ")" is subtraction ("10-3"), not a sign.
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+/\d+|\d*\.\d+|\d+)")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm)\{([^{}]*)\}")
_DECIMAL = re.compile(r"-?(?:\d+\.?\d*|\.\d+)")
_SLASH = re.compile(r"(-?\d+)/(\d+)")
_FRAC = re.compile(r"(-?)\\[dt]?frac\s*(?:\{\s*(-?\d+)\s*\}|(\d))\s*(?:\{\s*(-?\d+)\s*\}|(\d))")


def _braced(text: str, start: int) -> str | None:
    """The contents of the brace group opening at ``text[start]``, or None if it never closes."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "\\":  # \{ and \} are literal braces, not grouping
            continue
        if c == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif c == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[start + 1: i]
    return None


def _clean(answer: str) -> str:
    s = answer.strip()
    s = s.replace("\\!", "").replace("{,}", ",")  # LaTeX thin spaces and protected commas: 1{,}000
    s = s.replace("\\$", "").replace("$", "").strip().strip("*").strip()
    s = s.rstrip(".").strip()
    m = _TEXT.fullmatch(s)
    if m:  # \text{(B)} on its own; a unit after a number ("5\text{ cm}") is left alone
        s = m.group(1).strip()
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def _candidates(text: str):
    """Each format's answer, in order of trust; later ones only matter when earlier ones fail."""
    boxed = [(m.start(), m.group(1)) for m in _BOXED_BARE.finditer(text)]
    for m in _BOXED.finditer(text):
        inner = _braced(text, m.end() - 1)
        if inner is not None:
            boxed.append((m.start(), inner))
        elif not boxed or m.start() > max(boxed)[0]:
            # A truncated completion: what it began to box is no answer, nor are the numbers in it.
            text = text[: m.start()]
            break
    if boxed:
        yield max(boxed)[1]
    hashes = _HASHES.findall(text)
    if hashes:
        yield hashes[-1]
    anchors = list(_ANSWER_IS.finditer(text))  # the last anchor: "Answer: the final answer is 7"
    if anchors:
        yield _SENTENCE.match(text, anchors[-1].end()).group(1)
    numbers = _NUMBER.findall(text)
    if numbers:
        yield numbers[-1]


def extract_answer(text: str) -> str | None:
    """The answer ``text`` states, normalized (see the module doc for the formats), or None."""
    for candidate in _candidates(text):
        answer = _clean(candidate)
        if answer:
            return answer
    return None


def _rational(s: str) -> Fraction | None:
    """``s`` as an exact rational when it is a plain number or a simple fraction."""
    s = s.replace(" ", "")
    try:  # int() refuses numbers of over 4300 digits (ValueError): those are left to math-verify
        if _DECIMAL.fullmatch(s):
            return Fraction(s)
        m = _SLASH.fullmatch(s) or _FRAC.fullmatch(s)
        if m is None:
            return None
        if m.re is _SLASH:
            num, den = int(m.group(1)), int(m.group(2))
        else:
            num = int(m.group(2) or m.group(3)) * (-1 if m.group(1) else 1)
            den = int(m.group(4) or m.group(5))
        return Fraction(num, den) if den else None
    except ValueError:
        return None


class MathVerifier:
    """Answers of math problems: ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one answer.

    ``equivalent(answer, reference)`` reads ``b`` as the reference (math-verify is not symmetric
    for equations: ``x=5`` matches the reference ``5``).
    """

    # math-verify simplifies with sympy, so corl puts its time bound around us. math-verify's own
    # SIGALRM timeouts take over that timer during each of its calls (and end it): the effective
    # bound of one comparison is ``timeout`` per parse and per verify.
    bounded = False

    def __init__(self, timeout: int = 2):
        # Imported now, not at module import (sympy costs every CLI call ~0.4 s) nor on first use,
        # where corl's time bound could interrupt the import halfway.
        import math_verify  # noqa: F401

        self.timeout = timeout  # seconds per math-verify parse / comparison (whole seconds: signal.alarm)

    def extract(self, text: str) -> Hashable | None:
        return extract_answer(text)

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        if a == b:
            return True
        if a is None or b is None:
            return False
        a, b = str(a), str(b)
        ra, rb = _rational(a), _rational(b)
        if ra is not None and rb is not None:  # two numbers: exact, and decisive (0.33 is not 1/3)
            return ra == rb
        return self._symbolic(a, b)

    def _symbolic(self, a: str, b: str) -> bool:
        # math-verify's timeouts use SIGALRM, which only the main thread may set.
        seconds = self.timeout if threading.current_thread() is threading.main_thread() else None
        try:
            from math_verify import verify

            pa, pb = _parse(a, seconds), _parse(b, seconds)
            return bool(pa and pb and verify(pb, pa, timeout_seconds=seconds, raise_on_error=False))
        except Exception:  # a malformed answer is not equal to anything
            return False


@functools.lru_cache(maxsize=8192)
def _parse(answer: str, seconds: int | None) -> list:
    """math-verify's parse of one answer, cached: voting compares the same answers many times."""
    from math_verify import parse

    try:
        return parse(f"${answer}$", parsing_timeout=seconds, raise_on_error=False)
    except Exception:
        return []


_INT = re.compile(r"\s*(-?\d+)\s*")


class IntegerVerifier:
    """Answers are integers and the whole completion must be the number: what the tiny
    char-level zoo models answer (anything else has not answered)."""

    bounded = True  # a regex over a short string: no time bound needed

    def extract(self, text: str) -> Hashable | None:
        m = _INT.fullmatch(text)
        return int(m.group(1)) if m else None

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        return a == b
