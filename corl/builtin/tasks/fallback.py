"""The fallback: the answer of a completion that names none with a marker, read from its prose.

Without a marker (:mod:`corl.builtin.tasks.extract`), the answer is the last stretch of mathematics
in the text (``we get 2\\sqrt{3}.`` -> ``2\\sqrt{3}``; ``in all 1,234 marbles`` -> ``1234``), the last
side of an equation (``12 - 0.25 = 11.75`` -> ``11.75``), as GSM8K's flexible reading and math-verify
read unmarked text, but only where the completion ends on it as a result, as a person reads it
(:func:`states_no_result`: not a list of options or steps, a statement it goes on past, a supposition,
a side remark relating two quantities). A completion that stops mid-sentence after a sentence it
finished was cut off while working (:func:`cut_off`). Either states no answer.
"""

from __future__ import annotations

import re

_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator notes: 48/2 = <<48/2=24>>24
_PROSE_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
MATHS = re.compile(r"[\d\\=+\-*/^_<>|()\[\]{}]")
_ENGLISH_LETTERS = ("a", "A", "I")  # one-letter chunks of prose that are words, not variables


def _chunk_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` splits at white space outside braces (``\\text{ square units}`` stays one chunk)."""
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
                out.append((start, i))
            start = i + 1
    if start < len(text):
        out.append((start, len(text)))
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
    text = _CALCULATOR.sub(" ", text)
    chunks = [text[a:b] for a, b in _chunk_spans(text)]
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


# A statement ends at a line's end or where a sentence's end mark (and a closing quote) meets white space.
_STATEMENT_END = re.compile(r"(?<=[.!?])[\"')\]]*[ \t]+|\n")
# A line that is an item of a list: "a. 12.", "h) 3,943 girls", "(c) ...", "3. Omar earns ...", "6."
_ITEM = re.compile(r"\s*\(?(?:[A-Za-z]|\d{1,2})[.)](?:\s|$)")
# A line that is a bare answer, as a list of answers writes them: "2", "(40, 3)", "-1.5"
_BARE = re.compile(r"[\d\s.,()\[\]+\-/%$]*\d[\d\s.,()\[\]+\-/%$]*")
# What makes a statement a conclusion (an equation's result aside): its own words for one.
_CONCLUDES = re.compile(r"\b(?:so|therefore|thus|hence|in total|in all|altogether|answer|result|we get|gives|makes)\b",
                        re.IGNORECASE)
# A statement after the answer's that only points back at it, or a courtesy: "This is the answer.", "I hope it helps."
_POINTS_BACK = re.compile(r"\b(?:answer|result|solution|hope|let me know|feel free)\b", re.IGNORECASE)
_SUPPOSES = re.compile(r"[\s*_]*(?:if|suppose|assume|imagine)\b", re.IGNORECASE)
# A number relating two quantities: "5 times more than", "45% of the total", "4 more eggs than"
_RELATES = re.compile(r"\s*(?:times\b(?!\s*\d)|(?:more|fewer|less)\b[^.!?\n]*?\bthan\b)", re.IGNORECASE)
_PERCENT = re.compile(r"\s*(?:percent|per cent)\b", re.IGNORECASE)
_SHARE = re.compile(r"\s*(?:(?:percent|per cent)\s+)?of\b", re.IGNORECASE)  # "45% of", "45 percent of"


def _concludes(statement: str) -> bool:
    return "=" in statement or _CONCLUDES.search(statement) is not None


def states_no_result(text: str) -> bool:
    """True where the end of a completion without a marker states no result, so that the last number of
    its text is not its answer (a person reads none there; GSM8K's flexible reading and math-verify's
    unanchored one would read it all the same):

    * it ends in a list: options (``a. 12.`` ... ``j. 72.``), steps or questions of its own
      (``3. Omar earns 2 dollars washing cars.``, an empty ``6.``), or two or more different bare
      answers a line each (``2``, ``(40, 3)``), unless its last item concludes (``3. So she has
      5 + 3 = 8 apples.``: an equation's result, "so", "therefore", "in total", "the answer" ...);
    * it goes on past the statement that holds its last number (``... "A pen costs 3 dollars. How much
      does a pen cost?" in a conversation with you.``), unless what follows only points back at the
      answer or is a courtesy (``This is the answer.``, ``I hope it helps.``);
    * that statement is a supposition that concludes nothing (``If there are 5 boxes, there are 6 eggs
      in 1 box.``; not ``If we add 10 and 11, we get 21.``);
    * its last number is a side remark relating two quantities (``..., which is 5 times more than the
      previous morning``, ``..., which is 45% of the total eggs``; not ``12 + 5, which is 17 apples``).
    """
    text = _CALCULATOR.sub(" ", text).rstrip()
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if not lines:
        return False
    if _ITEM.match(lines[-1]) and not _concludes(lines[-1]):
        return True
    bare = 0
    while bare < len(lines) and _BARE.fullmatch(lines[-1 - bare]):
        bare += 1
    if bare >= 2 and len(set(lines[-bare:])) > 1:
        return True
    spans = [(a, b) for a, b in _chunk_spans(text) if _is_maths(text[a:b])]
    if not spans:
        return False
    start, end = spans[-1]
    stop = _STATEMENT_END.search(text, end)
    later = _STATEMENT_END.split(text[stop.end():]) if stop else []
    if any(_PROSE_WORD.search(s) and not _POINTS_BACK.search(s) for s in later):
        return True
    begins = max((m.end() for m in _STATEMENT_END.finditer(text, 0, start)), default=0)
    statement = _ITEM.sub("", text[begins:stop.start() if stop else len(text)], count=1)
    if _SUPPOSES.match(statement) and not _concludes(statement):
        return True
    after = text[end:]
    relates = _RELATES.match(after) or (text[end - 1] == "%" or _PERCENT.match(after)) and _SHARE.match(after)
    return ", which" in text[begins:start] and relates is not None
