"""Built-in task: arithmetic word problems with numeric answers, for real pretrained models.

A seeded generator writes short stories of one to four operations (add, subtract, multiply,
divide exactly) over several templates; answers are read from free text ("Answer: 42",
"#### 42", ``\\boxed{42}``, the last number) and compared with math-verify, so "42", "42.0" and
"$42" are one vote. ``corl data generate word_problems OUT`` writes the splits as data files to
inspect (or to feed the ``jsonl`` task: fields ``question`` and ``answer``).
"""

from __future__ import annotations

import random

import attrs

from corl.builtin.tasks.extract import _NUMBER, _clean, _rational, extract_answer
from corl.builtin.tasks.generated import GeneratedTask, instructed
from corl.builtin.tasks.splits import Splits, cut_pool, sizes
from corl.builtin.tasks.verifiers import MathVerifier
from corl.context import RegistryView
from corl.errors import ConfigError
from corl.hookspecs import hookimpl

v = attrs.validators

# (who, unit, start sentence, {op: sentence}, question); {n} is the operand, {x} the unit.
TEMPLATES = (
    ("Maya", "apples", "{who} has {n} {x}.",
     {"add": "She picks {n} more {x}.", "sub": "She gives {n} {x} to a friend.",
      "mul": "Then the number of {x} she has becomes {n} times as large.",
      "div": "She shares her {x} equally among {n} baskets and keeps one basket."},
     "How many {x} does {who} have now?"),
    ("Omar", "dollars", "{who} has {n} {x} in his wallet.",
     {"add": "He earns {n} {x} washing cars.", "sub": "He spends {n} {x} on lunch.",
      "mul": "His savings then grow to {n} times that amount.",
      "div": "He splits his money equally into {n} envelopes and keeps one envelope."},
     "How many {x} does {who} have now?"),
    ("A library", "books", "{who} has {n} {x} on a shelf.",
     {"add": "It receives {n} new {x}.", "sub": "Readers borrow {n} {x}.",
      "mul": "A donation makes the shelf hold {n} times as many {x}.",
      "div": "The {x} are divided equally among {n} rooms; one room's share stays on the shelf."},
     "How many {x} are on the shelf now?"),
    ("A farmer", "eggs", "{who} collects {n} {x} in the morning.",
     {"add": "In the afternoon {n} more {x} are collected.", "sub": "{n} {x} break.",
      "mul": "By evening the farmer has {n} times as many {x}.",
      "div": "The {x} are packed equally into {n} boxes, and the farmer keeps one box."},
     "How many {x} does the farmer keep?"),
    ("Lena", "pages", "{who} reads {n} {x} on Monday.",
     {"add": "On Tuesday she reads {n} more {x}.", "sub": "She finds that {n} of those {x} were read twice and subtracts them.",
      "mul": "Her total for the week ends up {n} times what she had read.",
      "div": "She notes the total split evenly over {n} chapters and counts one chapter."},
     "How many {x} is the count now?"),
    ("A bus", "passengers", "{who} starts with {n} {x}.",
     {"add": "At the first stop {n} {x} get on.", "sub": "At the next stop {n} {x} get off.",
      "mul": "At the terminal a train arrives carrying {n} times as many {x} as the bus; they are the ones counted now.",
      "div": "The {x} split equally into {n} groups, and one group stays."},
     "How many {x} are counted now?"),
)
OPS = ("add", "sub", "mul", "div")


def make_problem(rng: random.Random, n_ops: int, max_start: int = 50) -> tuple[str, int]:
    """One problem of ``n_ops`` operations and its integer answer (always >= 0, divisions exact)."""
    who, unit, start, sentences, question = rng.choice(TEMPLATES)
    value = rng.randint(2, max_start)
    parts = [start.format(who=who, n=value, x=unit)]
    for _ in range(n_ops):
        choices = [op for op in OPS
                   if not (op == "sub" and value < 2)
                   and not (op == "mul" and value > 200)
                   and not (op == "div" and not _divisors(value))]
        op = rng.choice(choices)
        if op == "add":
            n = rng.randint(1, 40)
            value += n
        elif op == "sub":
            n = rng.randint(1, value - 1)
            value -= n
        elif op == "mul":
            n = rng.randint(2, 5)
            value *= n
        else:
            n = rng.choice(_divisors(value))
            value //= n
        parts.append(sentences[op].format(who=who, n=n, x=unit))
    parts.append(question.format(who=who, x=unit))
    return " ".join(p[0].upper() + p[1:] for p in parts), value


def _divisors(value: int) -> list[int]:
    return [d for d in range(2, 11) if value % d == 0 and value // d >= 1]


def generate(count: int, seed: int, min_ops: int = 1, max_ops: int = 4) -> list[tuple[str, int]]:
    """``count`` distinct problems, the same for the same arguments."""
    rng, seen, out = random.Random(seed), set(), []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ConfigError(f"task: cannot draw {count} distinct word problems of {min_ops}-{max_ops} operations")
        text, answer = make_problem(rng, rng.randint(min_ops, max_ops))
        if text not in seen:
            seen.add(text)
            out.append((text, answer))
    return out


class NumberVerifier(MathVerifier):
    """Numeric answers: what :func:`~corl.builtin.tasks.extract.extract_answer` finds (which reads "Answer: 42
    pens, since 12+30 is 42" as 42 already), an equation as its last side ("14 + 17 = 31" -> 31), else cut to
    its first number; compared with math-verify."""

    def extract(self, text: str):
        answer = extract_answer(text)
        if answer is None or _rational(answer) is not None:
            return answer
        side = answer.split("=")[-1].strip()
        if _rational(side) is not None:
            return side
        first = _NUMBER.search(answer)
        return _clean(first.group(0)) if first else answer


def _instruction(instance, attribute, value: str) -> None:
    if "{" in value or "}" in value:
        raise ValueError("plain text only (no braces)")


@attrs.frozen
class WordProblemsConfig:
    train_size: int = attrs.field(default=512, validator=v.ge(1), metadata={
        "help": "unlabeled Co-RL prompts (labels kept hidden, for monitoring)"})
    eval_size: int = attrs.field(default=200, validator=v.ge(0), metadata={"help": "held-out labeled prompts"})
    seed_size: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "labeled examples for warm-starting zoo models (real models need none)"})
    min_ops: int = attrs.field(default=1, validator=[v.ge(1), v.le(4)], metadata={"help": "fewest operations"})
    max_ops: int = attrs.field(default=4, validator=[v.ge(1), v.le(4)], metadata={"help": "most operations"})
    instruction: str = attrs.field(default="End with 'Answer: <number>'.", validator=_instruction, metadata={
        "help": "sentence appended to every problem (what every agent is asked)"})
    seed: int = attrs.field(default=1234, metadata={"help": "generator seed: which problems fall in which split"})

    def __attrs_post_init__(self):
        if self.min_ops > self.max_ops:
            raise ValueError(f"min_ops ({self.min_ops}) exceeds max_ops ({self.max_ops})")


class FreeTextTask(GeneratedTask):
    """A generated task of problems with numeric answers written in free text (``word_problems``,
    ``drills``): ``problems(config)`` draws ``(text, answer)`` pairs, each prompt is a problem with the
    config's ``instruction`` appended, and :class:`NumberVerifier` reads the answers."""

    def make_verifier(self, config) -> NumberVerifier:
        return NumberVerifier()

    def make_splits(self, config) -> Splits:
        return cut_pool(config, self.problems(config), lambda id, problem: instructed(id, problem, config.instruction))

    def problems(self, config) -> list[tuple[str, int]]:
        raise NotImplementedError


class WordProblemsTask(FreeTextTask):
    """Disjoint seed / train / eval splits of generated word problems; math-verify answers."""

    name, Config = "word_problems", WordProblemsConfig
    help = "generated arithmetic word problems (1-4 operations), free-text answers via math-verify"

    def problems(self, config: WordProblemsConfig) -> list[tuple[str, int]]:
        return generate(sum(sizes(config).values()), config.seed, config.min_ops, config.max_ops)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    WordProblemsTask.register(registry)
