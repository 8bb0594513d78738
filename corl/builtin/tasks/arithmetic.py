"""Built-in tasks: synthetic arithmetic with exact integer answers (the embedded default)."""

from __future__ import annotations

from typing import Literal

import attrs

from corl.builtin.tasks.generated import GeneratedTask
from corl.builtin.tasks.splits import Splits, cut_pool
from corl.builtin.tasks.verifiers import IntegerVerifier
from corl.context import RegistryView
from corl.hookspecs import hookimpl
from corl.types import Prompt


@attrs.frozen
class ArithmeticConfig:
    kinds: tuple[Literal["add", "muladd"], ...] = attrs.field(
        default=("add", "muladd"), metadata={"help": "problem kinds: add is a+b (0-99), muladd is a*b+c (a, b 0-9, c 0-99)"})
    seed_size: int = attrs.field(default=4000, validator=attrs.validators.ge(0),
                                 metadata={"help": "labeled examples for warm-starting zoo models"})
    train_size: int = attrs.field(default=2048, validator=attrs.validators.ge(1),
                                  metadata={"help": "unlabeled Co-RL prompts (labels kept hidden, for monitoring)"})
    eval_size: int = attrs.field(default=1000, validator=attrs.validators.ge(0),
                                 metadata={"help": "held-out labeled prompts for evaluation"})
    seed: int = attrs.field(default=1234, metadata={"help": "which problems fall in which split"})


def _problems(kind: str) -> list[tuple[str, int]]:
    if kind == "add":
        return [(f"{a}+{b}=", a + b) for a in range(100) for b in range(100)]
    return [(f"{a}*{b}+{c}=", a * b + c) for a in range(10) for b in range(10) for c in range(100)]


class ArithmeticTask(GeneratedTask):
    """Disjoint seed / train / eval splits drawn from every problem of the chosen kinds."""

    name, Config = "arithmetic", ArithmeticConfig
    help = "synthetic a+b and a*b+c with exact answers; seed / train / eval splits"
    verifier = IntegerVerifier()

    def make_splits(self, config: ArithmeticConfig) -> Splits:
        pool = [p for kind in dict.fromkeys(config.kinds) for p in _problems(kind)]
        return cut_pool(config, pool, lambda id, problem: Prompt(id=id, text=problem[0], label=problem[1]),
                        shuffle=True, what=f"problems of kinds {list(config.kinds)}")


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    ArithmeticTask.register(registry)
