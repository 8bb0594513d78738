"""The ``addition`` task: n-digit addition whose answer a tiny model can compute, column by column.

A prompt is ``123+459=``: two operands zero-padded to ``digits`` digits. With ``order = "reversed"``
(the default) the answer is written least-significant digit first and zero-padded to ``digits + 1``
digits, ``2850`` for 582, so each output digit is one column of schoolbook addition (its two
digits and the carry from the digit just written): a 0.15M-parameter model learns to *compute*
it, where the plain order asks for the carry before the digits that cause it. ``plain`` writes
the sum as usual (``582``). Either way the verifier reads the *number*: votes group equal sums.

This is the embedded testbed of docs/results/claims.md; the shipped zoo models ``zoo:llama-add3``,
``zoo:qwen2-add3`` and ``zoo:neox-add3`` were warm-started on its default seed split.
"""

from __future__ import annotations

import random
import re
from collections.abc import Hashable
from typing import Literal

import attrs

from corl.builtin.tasks.generated import GeneratedTask
from corl.builtin.tasks.splits import Splits, cut_pool
from corl.context import RegistryView
from corl.errors import ConfigError
from corl.hookspecs import hookimpl
from corl.types import Prompt

_NUMBER = re.compile(r"\s*(\d+)\s*")


def answer_text(a: int, b: int, digits: int, order: str) -> str:
    """What a model should write for ``a + b`` (the warm-start target)."""
    return str(a + b).zfill(digits + 1)[::-1] if order == "reversed" else str(a + b)


class AdditionVerifier:
    """The whole completion must be digits; read in the task's order, they are the sum."""

    bounded = True  # a regex over a short string

    def __init__(self, order: str = "reversed"):
        self.order = order

    def extract(self, text: str) -> Hashable | None:
        m = _NUMBER.fullmatch(text)
        if not m:
            return None
        return int(m.group(1)[::-1] if self.order == "reversed" else m.group(1))

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        return a == b


@attrs.frozen
class AdditionConfig:
    digits: int = attrs.field(default=3, validator=[attrs.validators.ge(1), attrs.validators.le(9)], metadata={
        "help": "digits per operand (operands are zero-padded to this width)"})
    order: Literal["reversed", "plain"] = attrs.field(default="reversed", metadata={
        "help": "reversed: the sum zero-padded to digits + 1 and written least-significant digit first (one "
                "column per output digit, what tiny models compute); plain: the sum as usual"})
    seed_size: int = attrs.field(default=20000, validator=attrs.validators.ge(0),
                                 metadata={"help": "labeled examples for warm-starting zoo models"})
    train_size: int = attrs.field(default=2048, validator=attrs.validators.ge(1),
                                  metadata={"help": "unlabeled Co-RL prompts (labels kept hidden, for monitoring)"})
    eval_size: int = attrs.field(default=1000, validator=attrs.validators.ge(0),
                                 metadata={"help": "held-out labeled prompts for evaluation"})
    seed: int = attrs.field(default=1234, metadata={"help": "which problems fall in which split"})


def problems(config: AdditionConfig) -> list[tuple[int, int]]:
    """Distinct operand pairs, seed split first, then train, then eval."""
    need = config.seed_size + config.train_size + config.eval_size
    if need > 10 ** (2 * config.digits) // 2:  # drawing distinct pairs slows down as the pool runs out
        raise ConfigError(f"task: seed_size + train_size + eval_size = {need} is more than half the "
                          f"{10 ** (2 * config.digits)} distinct {config.digits}-digit problems; give task.digits more")
    rng, seen, out = random.Random(config.seed), set(), []
    while len(out) < need:
        # the width draw (always `digits`) keeps the generator's stream as the shipped zoo models' seed split saw it
        width = rng.randint(config.digits, config.digits)
        pair = (rng.randrange(10 ** width), rng.randrange(10 ** width))
        if pair not in seen:
            seen.add(pair)
            out.append(pair)
    return out


class AdditionTask(GeneratedTask):
    """Disjoint seed / train / eval splits of distinct operand pairs."""

    name, Config = "addition", AdditionConfig
    help = ("n-digit addition, answer least-significant digit first (the embedded testbed); "
            "seed / train / eval splits")

    def make_verifier(self, config: AdditionConfig) -> AdditionVerifier:
        return AdditionVerifier(config.order)

    def make_splits(self, config: AdditionConfig) -> Splits:
        d = config.digits
        return cut_pool(config, problems(config), lambda id, pair: Prompt(
            id=id, text=f"{pair[0]:0{d}d}+{pair[1]:0{d}d}=", label=sum(pair),
            solution=answer_text(*pair, d, config.order)))


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    AdditionTask.register(registry)
