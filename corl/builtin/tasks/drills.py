"""Built-in task: short number drills for small real models (arithmetic of a few forms, the largest
of a list, counting), generated with exact integer answers.

Made to find a task that small pretrained models (SmolLM2-135M-Instruct, Gemma 3 270M) solve part
of the time: Co-RL needs bases that are right often enough for a majority to carry signal, yet not
always (docs/results/real-models.md has the screen of every form on both models). Answers are read from free
text as in ``word_problems`` ("Answer: 42", the last number, ...). ``corl data generate drills OUT --set
'forms=["add", "mul"]'`` writes the splits as data files to inspect (fields ``question`` / ``answer``).
"""

from __future__ import annotations

import random
from typing import Literal

import attrs

from corl.builtin.tasks.splits import sizes
from corl.builtin.tasks.word_problems import FreeTextTask, _instruction
from corl.context import RegistryView
from corl.errors import ConfigError
from corl.hookspecs import hookimpl

v = attrs.validators
Form = Literal["add0", "add1", "add", "add3d", "sub", "mul", "sum3", "max", "max2", "next", "count", "word"]
WORDS = ("cat", "dog", "bird", "fish", "cow", "fox", "owl", "bee")


def _add0(r):
    a, b = r.randint(1, 9), r.randint(1, 9)
    return f"What is {a} + {b}?", a + b


def _add1(r):
    a, b = r.randint(2, 9), r.randint(10, 49)
    a, b = (a, b) if r.random() < 0.5 else (b, a)
    return f"What is {a} + {b}?", a + b


def _add(r):
    a, b = r.randint(10, 99), r.randint(10, 99)
    return f"What is {a} + {b}?", a + b


def _add3d(r):
    a, b = r.randint(100, 999), r.randint(100, 999)
    return f"What is {a} + {b}?", a + b


def _sub(r):
    a, b = sorted((r.randint(10, 99), r.randint(10, 99)), reverse=True)
    return f"What is {a} - {b}?", a - b


def _mul(r):
    a, b = r.randint(3, 9), r.randint(12, 99)
    return f"What is {a} * {b}?", a * b


def _sum3(r):
    a, b, c = (r.randint(10, 99) for _ in range(3))
    return f"What is {a} + {b} + {c}?", a + b + c


def _max(r):
    numbers = r.sample(range(10, 100), 5)
    return f"Which is the largest of {', '.join(map(str, numbers))}?", max(numbers)


def _max2(r):
    a, b = r.sample(range(10, 100), 2)
    return f"Which is larger, {a} or {b}?", max(a, b)


def _next(r):
    a = r.randint(10, 998)
    return f"What number comes right after {a}?", a + 1


def _count(r):
    word, others = r.choice(WORDS), [w for w in WORDS]
    n = r.randint(2, 6)
    items = [word] * n + [r.choice([w for w in others if w != word]) for _ in range(r.randint(3, 7))]
    r.shuffle(items)
    return f"How many times does the word '{word}' appear in this list: {' '.join(items)}?", n


NAMES = ("Sam", "Ana", "Tom", "Mia", "Ben", "Eva")
THINGS = ("apples", "pens", "books", "cards", "shells", "coins")


def _word(r):
    name, things, a, b = r.choice(NAMES), r.choice(THINGS), r.randint(5, 30), r.randint(2, 20)
    if r.random() < 0.5:
        return f"{name} has {a} {things} and gets {b} more. How many {things} does {name} have now?", a + b
    a = a + b  # take away no more than there is
    return f"{name} has {a} {things} and gives away {b}. How many {things} does {name} have now?", a - b


FORMS = {"add0": _add0, "add1": _add1, "add": _add, "add3d": _add3d, "sub": _sub, "mul": _mul, "sum3": _sum3, "max": _max,
         "max2": _max2, "next": _next, "count": _count, "word": _word}
HELP = ("add0: a + b (one digit each, 81 distinct problems); add1: a one-digit and a two-digit number added (2-9 and 10-49); add: a + b (two digits each); "
        "add3d: a + b (three digits each); sub: a - b >= 0 (two digits); "
        "mul: a * b (a 3-9, b 12-99); sum3: a + b + c (two digits each); max: the largest of five "
        "two-digit numbers; max2: the larger of two two-digit numbers; next: the number after n (10-998); count: how often a word occurs in a list of 5-13 animal words; word: a one-step "
        "word problem (gets b more / gives away b, numbers under 51)")


def generate(count: int, seed: int, forms) -> list[tuple[str, int]]:
    """``count`` distinct problems drawn from ``forms`` in turn at random, the same for the same arguments."""
    rng, seen, out = random.Random(seed), set(), []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ConfigError(f"task: cannot draw {count} distinct drills of forms {list(forms)}")
        text, answer = FORMS[rng.choice(list(forms))](rng)
        if text not in seen:
            seen.add(text)
            out.append((text, answer))
    return out


def _forms(instance, attribute, value) -> None:
    if not value:
        raise ValueError("name at least one form")


@attrs.frozen
class DrillsConfig:
    forms: tuple[Form, ...] = attrs.field(default=("add",), converter=tuple, validator=_forms,
                                          metadata={"help": HELP})
    train_size: int = attrs.field(default=512, validator=v.ge(1), metadata={
        "help": "unlabeled Co-RL prompts (labels kept hidden, for monitoring)"})
    eval_size: int = attrs.field(default=200, validator=v.ge(0), metadata={"help": "held-out labeled prompts"})
    seed_size: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "labeled examples for warm-starting zoo models (real models need none)"})
    instruction: str = attrs.field(default="End with 'Answer: <number>'.", validator=_instruction, metadata={
        "help": "sentence appended to every problem (what every agent is asked)"})
    seed: int = attrs.field(default=1234, metadata={"help": "generator seed: which problems fall in which split"})


class DrillsTask(FreeTextTask):
    """Disjoint seed / train / eval splits of generated drills; numeric answers compared with math-verify."""

    name, Config = "drills", DrillsConfig
    help = "generated number drills (arithmetic forms, largest of a list, counting), exact integer answers"

    def problems(self, config: DrillsConfig) -> list[tuple[str, int]]:
        return generate(sum(sizes(config).values()), config.seed, config.forms)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    DrillsTask.register(registry)
