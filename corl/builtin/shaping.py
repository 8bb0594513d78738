"""Built-in reward shaping: terms the run adds, each times its weight, to the peer reward of every
completion (``[[shaping]]`` in a recipe; :class:`corl.protocols.RewardShaping`).

* ``boxed``: 1 when the completion states its answer in a closed ``\\boxed{...}``, else 0;
* ``regex``: 1 when the completion matches a pattern (a format: ``<think>...</think>``), else 0;
* ``length_penalty``: DAPO's soft overlong punishment, 0 up to ``max_tokens - buffer`` tokens,
  falling linearly to -1 at ``max_tokens``, and -1 beyond;
and, registered by the hf backend, ``reward_model``: a learned reward model's score
(:mod:`corl.builtin.hf.reward_model`).

None of them reads labels; a term that does declares ``needs_labels = True``.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from corl.context import RegistryView
from corl.hookspecs import hookimpl
from corl.types import NoConfig, Rollout

v = attrs.validators
_BOXED = re.compile(r"\\boxed\s*\{")


def _closed_box(text: str) -> bool:
    """A ``\\boxed{`` whose braces close around something (a truncated one is no answer)."""
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\":
                i += 2  # \{ and \} are literal braces
                continue
            depth += (c == "{") - (c == "}")
            i += 1
        if depth == 0 and text[m.end(): i - 1].strip():
            return True
    return False


class Boxed:
    """1.0 for a completion with a closed, non-empty ``\\boxed{}``, else 0.0."""

    def __init__(self, config: NoConfig, ctx: Any = None):
        pass

    def score(self, rollout: Rollout, answers, verifier, truth=None) -> list[list[float]]:
        return [[float(_closed_box(text)) for text in row] for row in rollout.texts]


def _pattern(instance, attribute, value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None


@attrs.frozen
class RegexConfig:
    pattern: str = attrs.field(validator=_pattern, metadata={
        "help": "a Python regular expression, e.g. '<think>.*?</think>\\\\s*<answer>.*?</answer>'"})
    full: bool = attrs.field(default=False, metadata={
        "help": "the whole completion must match (as TRL's format rewards do); false: anywhere in it"})
    dotall: bool = attrs.field(default=True, metadata={"help": "'.' matches new lines too"})


class Regex:
    """1.0 for a completion that matches ``pattern``, else 0.0."""

    def __init__(self, config: RegexConfig, ctx: Any = None):
        self.regex = re.compile(config.pattern, re.DOTALL if config.dotall else 0)
        self.match = self.regex.fullmatch if config.full else self.regex.search

    def score(self, rollout: Rollout, answers, verifier, truth=None) -> list[list[float]]:
        return [[float(self.match(text) is not None) for text in row] for row in rollout.texts]


@attrs.frozen
class LengthConfig:
    max_tokens: int = attrs.field(validator=v.ge(1), metadata={
        "help": "completions longer than this get -1 (set it to the sampler's max_new_tokens to punish truncation)"})
    buffer: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "the last `buffer` tokens before max_tokens fall linearly from 0 to -1 (DAPO's L_cache)"})

    def __attrs_post_init__(self):
        if self.buffer >= self.max_tokens:
            raise ValueError(f"buffer ({self.buffer}) must be below max_tokens ({self.max_tokens})")


class LengthPenalty:
    """DAPO's soft overlong punishment on completion lengths in tokens (EOS included)."""

    def __init__(self, config: LengthConfig, ctx: Any = None):
        self.config = config

    def value(self, length: int) -> float:
        limit, buffer = self.config.max_tokens, self.config.buffer
        if length > limit:
            return -1.0
        start = limit - buffer
        return 0.0 if length <= start else (start - length) / buffer

    def score(self, rollout: Rollout, answers, verifier, truth=None) -> list[list[float]]:
        return [[self.value(n) for n in row] for row in rollout.lengths]


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("shaping", "boxed", Boxed, NoConfig,
                 help="format reward: 1 when the completion boxes its answer in a closed \\boxed{}, else 0")
    registry.add("shaping", "regex", Regex, RegexConfig,
                 help="format reward: 1 when the completion matches `pattern`, else 0")
    registry.add("shaping", "length_penalty", LengthPenalty, LengthConfig,
                 help="DAPO's soft overlong punishment: 0, then down to -1 over the last `buffer` tokens before "
                      "max_tokens, -1 beyond")
