"""Final answers in free-form completions and in data sets' answer fields: find them the way
benchmarks state them.

``extract_answer`` (a completion) and ``extract_label`` (a data set's answer field) read the text
after a reasoning model's last ``</think>`` (when anything follows it), then try, in order: the
last ``<answer>...</answer>``, the last ``\\boxed{...}`` / ``\\fbox{...}``, GSM8K's ``#### 42``,
"The answer is ..." / "Answer: ...". Without any marker, a text that is an answer on its own is taken whole (MATH-500's
``\\frac{1}{2}``, ``(3, 4)``, ``[2, 5)``, ``\\{1, 2\\}``, ``2^{10}``; for a label also a word or
short phrase, ``Evelyn``); otherwise the last stretch of mathematics in the prose (``we get
2\\sqrt{3}.`` -> ``2\\sqrt{3}``; of a completion, only where it ends on it as a result: not a list of
options, a supposition, ...): the *fallback* (:mod:`corl.builtin.tasks.fallback`), which
:func:`extract_label_path` names so that a data set's doubtful labels can be reported. Plain numbers
take an exact fast path; anything else must parse with math-verify. A number's units and currency go
(``42 dollars``, ``USD 42``, ``€42``: ``42``); a percent stays for math-verify, which takes ``42%``
as 42 and as 0.42. Non-answers (``N/A``, ``I do not know``, ``See solution``) are never answers or
labels; nor are markup and placeholders after a marker (``Answer: </strong>``, an echoed ``Answer:
<number>``) or, in a completion, a word alone (``Answer: the``): an earlier marker or the fallback is
read instead. A marker's number followed by units or a clause is that number (``Answer: 21 (as Bob
gave away 4 stickers)`` -> ``21``; :func:`_stated`). Comparing answers is
:mod:`corl.builtin.tasks.verifiers`'.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

from corl.builtin.tasks.fallback import MATHS, cut_off, last_equation_side, last_maths, states_no_result

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE = re.compile(r"\\boxed +([^\s$]+)")  # MATH sometimes writes \boxed 5
_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(r"(?:\bthe\s+(?:final\s+)?answer\s+is\b\s*:?|\banswer\s*:)", re.IGNORECASE)
# The answer named before the marker: "The number 6 is the answer", "so 21 is the final answer".
_IS_THE_ANSWER = re.compile(r"(?:^|(?<=[\s(]))(\S+(?:[ \t]+\S+)?)[ \t]+is[ \t]+the[ \t]+"
                            r"(?:final[ \t]+|correct[ \t]+)?answer\b", re.IGNORECASE)
# Up to the end of the line or of the sentence: a period that ends a sentence is followed by
# white space or the end, which keeps the point of "3.5".
_SENTENCE = re.compile(r"\s*(.*?)(?:\.(?=\s|$)|\n|$)")
# A minus right after a word or ")" is subtraction ("10-3"), not a sign.
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+/\d+|\d*\.\d+|\d+)")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_DECIMAL = re.compile(r"-?(?:\d+\.?\d*|\.\d+)")
_SLASH = re.compile(r"(-?\d+)/(\d+)")
_FRAC = re.compile(r"(-?)\\[dt]?frac\s*(?:\{\s*(-?\d+)\s*\}|(\d))\s*(?:\{\s*(-?\d+)\s*\}|(\d))")
_DELIMITED = re.compile(r"\\\((.*)\\\)|\\\[(.*)\\\]", re.DOTALL)  # \( ... \) and \[ ... \] around a whole answer
# What is not prose in an answer: LaTeX commands (with a word argument: \begin{pmatrix}) and \text{} groups.
_COMMAND = re.compile(r"\\(?:text\w*|mbox|mathrm|operatorname)\s*\{[^{}]*\}|\\[A-Za-z]+(?:\{[A-Za-z*]+\})?")
_WORD = re.compile(r"[A-Za-z]{2,}")
# A text answer: a word or a few, no digits or mathematics ("Evelyn", "New York").
_PHRASE = re.compile(r"[A-Za-z][A-Za-z'-]*(?: [A-Za-z][A-Za-z'-]*){0,5}")
_THINK_END = re.compile(r"</think\s*>", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer\s*>(.*?)</answer\s*>", re.IGNORECASE | re.DOTALL)
_ANSWER_OPEN = re.compile(r"<answer\s*>", re.IGNORECASE)
# A number with its currency and units: "$42", "USD 42", "42 dollars", "42 square feet", "€ 1,000.50".
_CURRENCY = r"(?:\\?\$|€|£|¥|₹|(?:USD|EUR|GBP|US\$)\s?)"
_UNIT_WORD = r"[A-Za-z]{2,}\.?"
_WITH_UNITS = re.compile(rf"{_CURRENCY}?\s*(?P<number>-?(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|-?\.\d+)\s*"
                         rf"(?P<units>{_UNIT_WORD}(?:[\s-]+{_UNIT_WORD}){{0,3}})?")
# Words after a number that are mathematics, not units: "2 pi", "3 sqrt 2"
_MATH_WORDS = {"pi", "sqrt", "times", "over", "plus", "minus", "squared", "cubed", "and", "or", "to", "of", "mod",
               "divided", "by", "is", "are", "equals", "degrees"}
_PERCENT_WORDS = ("percent", "per cent", "pct")
# Not answers: HTML-ish markup (</strong>, <br>) and placeholders an instruction writes ("<number>",
# "[your answer]", "{answer}"), which a model that echoes its instruction writes back.
# (Not "x<y and y>z": a placeholder's words are of two letters or more, its first of three.)
_MARKUP = re.compile(r"</?(?:strong|b|i|em|u|br|p|span|div|sup|sub|code|h[1-6]|li|ul|ol)\b[^<>\n]*>"
                     r"|<[A-Za-z]{3,}(?:[ _-][A-Za-z]{2,}){0,3}>|\[[A-Za-z]{2,}(?:[ _-][A-Za-z]{2,}){0,3}\]"
                     r"|(?<![\\\w}])\{(?:your[ _])?(?:final[ _])?(?:number|answer|value|result|integer)\}",
                     re.IGNORECASE)
# A number that leads a stated answer, its currency, units and whatever clause follows aside:
# "21 (as Bob gave away 4 stickers)", "21 apples (10 + 11)", "$21.", "21, since ...".
_LEADING = re.compile(rf"\s*{_CURRENCY}?\s*(?P<number>-?(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:/\d+)?%?)"
                      r"(?P<rest>.*)", re.DOTALL)
# What continues a leading number as mathematics (then the number alone is not the answer): an operator
# before a term ("2 + 3 = 5", "5 x 4"), a LaTeX command other than a unit's \text{}, an exponent or index,
# a word of mathematics ("2 pi").
_CONTINUES = re.compile(r"\s*(?:[-+*/×÷=<>:x]\s*[\d(\\A-Za-z]|\\(?!text|mbox|mathrm|,|;|!|quad)|[\^_!]|\.\d"
                        r"|(?:pi|sqrt|times|over|plus|minus|squared|cubed|divided|mod)\b)", re.IGNORECASE)
# Where a stated answer's explanation begins: "17 apples, because ...", "17 (since ...)".
_EXPLAINS = re.compile(r"\s*(?:\(|\[|;|,?\s+(?:because|since|as|which|given|from|after|by|using|when|where)\b)",
                       re.IGNORECASE)
#: what a data set or a model writes for "no answer here": never an answer, never a label
NON_ANSWERS = {"n/a", "na", "none given", "no answer", "not applicable", "unknown", "unanswerable", "i do not know",
               "i don't know", "i dont know", "idk", "see solution", "see the solution", "see above", "see below",
               "see explanation", "tbd", "?", "-", "--", "..."}


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
    m = _DELIMITED.fullmatch(s)
    if m:
        s = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
    m = _TEXT.fullmatch(s)
    if m:  # \text{(B)} on its own; a unit after a number ("5\text{ cm}") is left alone
        s = m.group(1).strip()
    s = _without_units(s)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def _without_units(s: str) -> str:
    """``42 dollars``, ``USD 42``, ``€42``: the number alone; ``42 percent`` is ``42%``. Words that are
    mathematics (``2 pi``) stay, as does anything that is not a number with units."""
    m = _WITH_UNITS.fullmatch(s)
    if m is None or m.group(0).strip() == m.group("number"):
        return s
    units = (m.group("units") or "").lower()
    if units in _PERCENT_WORDS:
        return m.group("number") + "%"
    if any(w.rstrip(".") in _MATH_WORDS for w in re.split(r"[\s-]+", units) if w):
        return s
    return m.group("number")


def is_non_answer(text: str) -> bool:
    """``N/A``, ``I do not know``, ``See solution``: a text that says there is no answer."""
    return " ".join(text.strip().strip(".!*").split()).casefold() in NON_ANSWERS


def _final_part(text: str) -> str:
    """What a reasoning model states after its thinking: the text after the last ``</think>`` when
    anything follows it (else the whole text: the thinking is all there is)."""
    ends = list(_THINK_END.finditer(text))
    if ends and text[ends[-1].end():].strip():
        return text[ends[-1].end():]
    return text


def _marked(text: str):
    """What each marker states, with its path, in order of trust; later ones only matter when earlier
    ones fail. The last item is the text left to search when no marker gave an answer (a truncated
    ``\\boxed{`` and everything after it removed)."""
    boxed = [(m.start(), m.group(1)) for m in _BOXED_BARE.finditer(text)]
    for m in _BOXED.finditer(text):
        inner = _braced(text, m.end() - 1)
        if inner is not None:
            boxed.append((m.start(), inner))
        elif not boxed or m.start() > max(boxed)[0]:
            # A truncated completion: what it began to box is no answer, nor are the numbers in it.
            text = text[: m.start()]
            break
    found = bool(boxed)
    if boxed:
        yield max(boxed)[1], "boxed"
    hashes = _HASHES.findall(text)
    if hashes:
        found = True
        yield hashes[-1], "hashes"
    # the last anchor first ("Answer: the final answer is 7"); an earlier one where a later one states
    # nothing (an echoed instruction)
    anchors = [(m.start(), _SENTENCE.match(text, m.end()).group(1)) for m in _ANSWER_IS.finditer(text)]
    anchors += [(m.start(), m.group(1)) for m in _IS_THE_ANSWER.finditer(text)]
    if anchors:
        found = True
    for _, stated in sorted(anchors, reverse=True):
        yield stated, "answer_is"
    yield found, text


def _is_answer_alone(s: str, words: bool) -> bool:
    """True when ``s`` (cleaned) is an answer on its own rather than prose: one short line whose
    only words are LaTeX commands (``\\frac``, ``\\text{ cm}``), or, where ``words``, a short phrase."""
    if len(s) > 200 or "\n" in s or not any(c.isalnum() for c in s):
        return False
    if not _WORD.search(_COMMAND.sub(" ", s)):
        return True
    return words and _PHRASE.fullmatch(s) is not None


def _parses(answer: str, seconds: int | None) -> bool:
    """math-verify reads ``answer`` as mathematics (a sympy object, not only its string fallback)."""
    return any(not isinstance(x, str) for x in _parse(answer, seconds))


def _confirmed(answer: str, seconds: int | None) -> str | None:
    """``answer`` if it is a plain number (exact, fast) or math-verify parses it; else the last
    plain number in it (what the text states most plainly), else None."""
    if not answer:
        return None
    if _rational(answer) is not None or _parses(answer, seconds):
        return answer
    numbers = _NUMBER.findall(answer)
    return _clean(numbers[-1]) if numbers else None


#: How an answer was found (:func:`extract_label_path`): a marker, the text alone, or the fallback.
PATHS = {"tag": "<answer> tag", "boxed": "\\boxed{}", "hashes": "#### line", "answer_is": '"The answer is" / "Answer:"',
         "whole": "the text alone", "fallback": "fallback: the last mathematics in the text",
         "none": "no answer: the text says there is none (N/A, I do not know, See solution)"}


def _stated(candidate: str, words: bool, seconds: int | None) -> str | None:
    """The answer a marker states (what follows "Answer:", a box's contents), or None where it states none.

    Markup and placeholders go (``</strong>``, an echoed ``<number>``). Then: the text whole when it is
    an answer on its own (a number, mathematics that math-verify reads, ``\\text{Evelyn}``; for a label
    also a word or phrase); else the number it begins with, when no mathematics continues it (``21
    (as Bob gave away 4 stickers)``, ``21 apples (10 + 11)``: ``21``; ``2 + 3 = 5`` is not ``2``); else
    the last mathematics before any explanation (``the total is 12 + 5 = 17 apples, because ...``:
    ``17``). A word alone after a marker of a completion is no answer (``Answer: the``).
    """
    bare = _MARKUP.sub(" ", candidate)
    answer = _clean(bare)
    if not answer or not any(c.isalnum() for c in answer):
        return None
    explicit_text = _TEXT.fullmatch(bare.strip().strip("$*").strip().rstrip(".").strip()) is not None
    if _rational(answer) is not None or (words or explicit_text) and _is_answer_alone(answer, True):
        return answer
    words_in = _WORD.findall(_COMMAND.sub(" ", answer))
    maths_words = MATHS.search(answer) and all(w.lower() in _MATH_WORDS for w in words_in)  # "2 pi"
    if (maths_words or _is_answer_alone(answer, False)) and _parses(answer, seconds):
        return answer
    lead = _LEADING.match(bare.replace("\\$", "$").replace("**", ""))
    if lead and not _CONTINUES.match(lead.group("rest")):
        return _clean(lead.group("number"))
    claim = bare[:m.start()] if (m := _EXPLAINS.search(bare)) and _NUMBER.search(bare[:m.start()]) else bare
    span = last_maths(claim)
    return _confirmed(_clean(span), seconds) if span else None


def _extract(text: str, words: bool, seconds: int | None) -> tuple[str | None, str | None]:
    """The answer and the path that found it (a key of :data:`PATHS`), ``(None, "none")`` for a text
    that says there is no answer, else ``(None, None)``."""
    text = _final_part(text)
    tags = _ANSWER_TAG.findall(text)
    if tags:  # a stated answer: words count ("<answer>Paris</answer>"); markers inside it still apply
        answer, path = _extract(tags[-1], True, seconds)
        return (answer, "tag") if answer is not None else (None, path)
    opened = _ANSWER_OPEN.search(text)
    if opened:  # truncated inside its answer tag: what it began to answer is no answer
        text = text[: opened.start()]
    text = _MARKUP.sub(" ", text)  # "<strong>Answer</strong>: 6"; "End with 'Answer: <number>'"
    if is_non_answer(text):
        return None, "none"
    *marked, (found, rest) = _marked(text)
    for candidate, path in marked:
        if is_non_answer(candidate):
            return None, "none"
        answer = _stated(candidate, words, seconds)
        if answer:
            return answer, path
    if not words and cut_off(rest):
        return None, None
    whole = _clean(rest)
    if not found and _is_answer_alone(whole, words):
        if words and _PHRASE.fullmatch(whole) and _WORD.search(whole):
            return (None, "none") if is_non_answer(whole) else (whole, "whole")  # a text answer ("Evelyn")
        if words:
            return whole, "whole"
        side = last_equation_side(whole)
        answer = _confirmed(side, seconds)
        return answer, (None if answer is None else "whole" if answer == side else "fallback")
    if not words and states_no_result(rest):
        return None, None
    span = last_maths(rest)
    answer = _confirmed(_clean(span), seconds) if span else None
    return answer, (None if answer is None else "fallback")


def extract_answer(text: str, timeout: int | None = 2) -> str | None:
    """The answer a completion states, normalized (see the module doc for the formats), or None.
    ``timeout``: seconds per math-verify parse (None: no bound; off the main thread it must be None)."""
    return _extract(text, False, timeout)[0]


def extract_label(text: str, timeout: int | None = 2) -> str | None:
    """The reference answer a data set's answer field holds: a worked solution with a marker, or
    the answer alone (``\\frac{1}{2}``, ``(3, 4)``, ``\\text{Evelyn}``, ``Evelyn``), taken whole."""
    return _extract(text, True, timeout)[0]


def extract_label_path(text: str, timeout: int | None = 2) -> tuple[str | None, str | None]:
    """:func:`extract_label` and how it was found: a key of :data:`PATHS` (``"fallback"`` when no
    marker stated it and the text was not an answer on its own), ``(None, "none")`` for a text that
    says there is no answer, else ``(None, None)``."""
    return _extract(text, True, timeout)


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



@functools.lru_cache(maxsize=8192)
def _parse(answer: str, seconds: int | None) -> list:
    """math-verify's parse of one answer, cached: voting compares the same answers many times."""
    from math_verify import parse

    try:
        return parse(f"${answer}$", parsing_timeout=seconds, raise_on_error=False)
    except Exception:
        return []
