"""How a data-file task reads answers from completions, named by its ``answers`` key.

* ``math``: :class:`~corl.builtin.tasks.verifiers.MathVerifier`, every format a benchmark states an
  answer in (``<answer>`` tags, ``\\boxed{}``, ``#### N``, "The answer is", the answer alone, the
  last mathematics in the text), compared with math-verify;
* ``integer``: the whole completion is an integer (the tiny zoo models);
* ``tag:NAME``: only what the last ``<NAME>...</NAME>`` holds (a completion without it has not
  answered: the format is part of the task), then read and compared as ``math``;
* ``regex:PATTERN``: only what the last match of ``PATTERN`` captures (its first group, else the whole
  match), then read and compared as ``math``.

Labels (a data set's answer field) are read as ``math`` reads them for every extractor but
``integer``: the data's own format, not the one the model is asked to write.
"""

from __future__ import annotations

import re
from collections.abc import Hashable

from corl.builtin.tasks.extract import extract_label
from corl.builtin.tasks.verifiers import IntegerVerifier, MathVerifier

_TAG_NAME = re.compile(r"[A-Za-z_][\w.-]*")
HELP = ("how answers are read from completions: math (<answer> tags, \\boxed{}, '#### N', 'The answer is', else the "
        "answer alone or the last mathematics; compared with math-verify), integer (the whole completion is an "
        "integer), tag:NAME (only the last <NAME>...</NAME>, e.g. tag:answer), or regex:PATTERN (only the last "
        "match, its first group if it has one); labels are read as math reads them (integer: as integers)")


def check(instance, attribute, value: str) -> None:
    """attrs validator of an ``answers`` key: one of the forms above, with a usable tag or pattern (messages
    hold no ': ', where the recipe's error line would cut them)."""
    if value in ("math", "integer"):
        return
    kind, sep, arg = value.partition(":")
    if sep and kind == "tag":
        if not _TAG_NAME.fullmatch(arg):
            raise ValueError(f"a tag name is letters, digits, '_', '-' or '.' (got {arg!r}), e.g. tag:answer")
        return
    if sep and kind == "regex":
        try:
            pattern = re.compile(arg)
        except re.error as exc:
            raise ValueError(f"{arg!r} is not a regular expression ({exc})") from None
        if pattern.groups > 1:
            raise ValueError(f"{arg!r} has {pattern.groups} groups; give one group around the answer "
                             "(or none: the whole match), (?:...) for the others")
        if pattern.match(""):
            raise ValueError(f"{arg!r} matches the empty text; it must match where the answer is")
        return
    raise ValueError("valid are 'math', 'integer', 'tag:NAME' (e.g. 'tag:answer') or 'regex:PATTERN'")


class _Captured(MathVerifier):
    """A math verifier whose completions state their answer only in one place (:meth:`captured`)."""

    def captured(self, text: str) -> str | None:
        raise NotImplementedError

    def extract(self, text: str) -> Hashable | None:
        inner = self.captured(text)
        return None if inner is None else extract_label(inner, self._seconds())  # words count here


class TagVerifier(_Captured):
    """``tag:NAME``: the last ``<NAME>...</NAME>`` of a completion."""

    def __init__(self, name: str, timeout: int = 2):
        super().__init__(timeout)
        self.pattern = re.compile(rf"<{re.escape(name)}\s*>(.*?)</{re.escape(name)}\s*>", re.IGNORECASE | re.DOTALL)

    def captured(self, text: str) -> str | None:
        found = self.pattern.findall(text)
        return found[-1] if found else None


class RegexVerifier(_Captured):
    """``regex:PATTERN``: the last match in a completion (its group, or the whole match)."""

    def __init__(self, pattern: str, timeout: int = 2):
        super().__init__(timeout)
        self.pattern = re.compile(pattern)

    def captured(self, text: str) -> str | None:
        matches = list(self.pattern.finditer(text))
        if not matches:
            return None
        return matches[-1].group(1) if self.pattern.groups else matches[-1].group(0)


def verifier_for(answers: str) -> MathVerifier | IntegerVerifier:
    """The verifier an ``answers`` key names (validated by :func:`check`); each reads labels with
    ``label_path`` too (the data task records how each label was found)."""
    if answers == "math":
        return MathVerifier()
    if answers == "integer":
        return IntegerVerifier()
    kind, _, arg = answers.partition(":")
    return TagVerifier(arg) if kind == "tag" else RegexVerifier(arg)
