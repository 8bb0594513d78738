"""The fallback: the answer of a completion that names none with a marker, read from its prose.

Without a marker (:mod:`corl.builtin.tasks.extract`), the answer is the last stretch of mathematics
in the text (``we get 2\\sqrt{3}.`` -> ``2\\sqrt{3}``; ``in all 1,234 marbles`` -> ``1234``), the last
side of an equation (``12 - 0.25 = 11.75`` -> ``11.75``), as GSM8K's flexible reading and math-verify
read unmarked text. A completion that stops mid-sentence after a sentence it finished was cut off while
working (:func:`cut_off`): it states no answer.
"""

from __future__ import annotations

import re

_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator notes: 48/2 = <<48/2=24>>24
_PROSE_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
MATHS = re.compile(r"[\d\\=+\-*/^_<>|()\[\]{}]")
_ENGLISH_LETTERS = ("a", "A", "I")  # one-letter chunks of prose that are words, not variables


def _chunks(text: str) -> list[str]:
    """``text`` split at white space outside braces (``\\text{ square units}`` stays one chunk)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "{}" and i and text[i - 1] == "\\":
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
        elif c.isspace() and depth == 0:
            if i > start:
                out.append(text[start:i])
            start = i + 1
    if start < len(text):
        out.append(text[start:])
    return out


def _is_maths(chunk: str) -> bool:
    bare = chunk.strip(".,;:!?\"'*")
    if not bare or _PROSE_WORD.fullmatch(bare) and (len(bare) > 1 or bare in _ENGLISH_LETTERS):
        return False  # a word ("pears,", "(see" is handled below), or "a" / "I"
    if len(bare) == 1 and bare.isalpha():
        return True  # a variable: "so x"
    stripped = bare.strip("()[]")
    if _PROSE_WORD.fullmatch(stripped) and len(stripped) > 1:
        return False  # "(see", "[sic]"
    return bool(MATHS.search(bare))


def _balanced(span: str) -> str:
    """Drop brackets the span cut in half ("(so 5)" -> "5"); intervals pair ( with ] and stay."""
    opening = lambda s: s.count("(") + s.count("[")  # noqa: E731
    closing = lambda s: s.count(")") + s.count("]")  # noqa: E731
    while span and span[-1] in ")]" and closing(span) > opening(span):
        span = span[:-1].rstrip()
    while span and span[0] in "([" and opening(span) > closing(span):
        span = span[1:].lstrip()
    return span


def last_equation_side(span: str) -> str:
    """After the last ``=`` (``12 - 0.25 = 11.75`` -> ``11.75``), as math-verify reads an equation
    chain; a list of assignments (``a=1, b=2``) stays whole."""
    if "," in span or ";" in span:
        return span
    parts = re.split(r"(?<![\\<>!])=", span)
    return parts[-1].strip() if len(parts) > 1 and parts[-1].strip() else span


def last_maths(text: str) -> str | None:
    """The last stretch of mathematics in prose: trailing words skipped, then chunks collected
    back to the first word ("in all 1,234 marbles" -> "1,234"; "we get 2\\sqrt{3}." -> "2\\sqrt{3}")."""
    chunks = _chunks(_CALCULATOR.sub(" ", text))
    end = len(chunks)
    while end and not _is_maths(chunks[end - 1]):
        end -= 1
    start = end
    while start and _is_maths(chunks[start - 1]):
        start -= 1
    if start == end:
        return None
    span = " ".join(chunks[start:end]).strip().rstrip(".,;:!?").strip()
    return last_equation_side(_balanced(span)) or None


# a finished sentence (closing bold "**21**" too, not a dangling "2 *"), or a finished line
_ENDS = re.compile(r"(?:[.!?)\]}\"'$`]|(?<=\S)\*)[ \t]*$|\n\s*$")
_BREAK = re.compile(r"[.!?](?:\s|$)|\n")


def cut_off(text: str) -> bool:
    """A completion that stops mid-sentence after a sentence it finished: cut off by the token limit
    while still working (``... = 24 passengers.\n\nTherefore``). Without a marker it states no answer,
    and the last number of its working is none. A line it ended (``Passengers: 34\n``, before a stop
    string) is finished, and one unfinished line (``so -12``) is a short answer."""
    return bool(text.strip()) and not _ENDS.search(text) and _BREAK.search(text.strip()) is not None
