"""Built-in code tasks: programs voted on by behaviour (see corl/code.py and docs/how-to/code-tasks.md).

``expressions``: find a one-line expression of ``x`` from three input/output examples, judged on
held-out inputs; small enough for the tiny zoo models (their tokenizer grows to printable ASCII).
``python_functions``: "write a Python function f(...) that ..." from templates, for real models.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

import attrs

from corl.builtin.tasks.code import CodeVerifier
from corl.builtin.tasks.generated import GeneratedTask
from corl.builtin.tasks.splits import Splits, cut_pool
from corl.context import RegistryView
from corl.hookspecs import hookimpl
from corl.sandbox import Limits, canonical
from corl.types import Prompt


def _sandbox_fields():
    return {
        "wall_seconds": attrs.field(default=2.0, validator=attrs.validators.gt(0), metadata={
            "help": "wall-clock seconds one program may take over all its test inputs (sandbox)"}),
        "memory_mb": attrs.field(default=512, validator=attrs.validators.ge(64), metadata={
            "help": "address space one program may use, MiB (sandbox)"}),
        "unsafe_run_as_root": attrs.field(default=False, metadata={
            "help": "UNSAFE: where the sandbox cannot give each program a uid of its own (root, no bubblewrap, and "
                    "no view of its own in the fallback), run the programs as root anyway instead of refusing to "
                    "start (docs/how-to/code-tasks.md, 'What it does not protect against')"}),
    }


def _verifier(mode, config) -> CodeVerifier:
    """The task's verifier, its sandbox set from the task's keys; refuses here, before any model loads,
    where programs would run as root unasked."""
    limits = Limits(wall_seconds=config.wall_seconds, memory_mb=config.memory_mb)
    verifier = CodeVerifier(mode, "f", limits, unsafe_run_as_root=config.unsafe_run_as_root)
    verifier.sandbox.check()
    return verifier


class _CodeTask(GeneratedTask):
    """A code task: its verifier runs programs in the sandbox its keys set; its pool of problems
    (prompts whose ids the split gives) is shuffled by the task's seed and cut."""

    generates_data = False  # a data file holds no test inputs
    mode: Literal["expression", "function"]  # what a completion is (corl.sandbox.Program)

    def make_verifier(self, config) -> CodeVerifier:
        return _verifier(self.mode, config)

    def _cut(self, pool: list[Prompt], config, kind_names) -> Splits:
        return cut_pool(config, pool, lambda id, prompt: attrs.evolve(prompt, id=id), shuffle=True,
                        what=f"problems of kinds {list(kind_names)}")


# -- expressions of x --------------------------------------------------------------------------

@attrs.frozen
class ExpressionsConfig:
    kinds: tuple[Literal["linear", "square"], ...] = attrs.field(default=("linear", "square"), metadata={
        "help": "linear: a*x+b (a 1..19, b -19..29); square: x*x+a*x+b (a -5..9, b -9..29)"})
    seed_size: int = attrs.field(default=900, validator=attrs.validators.ge(0),
                                 metadata={"help": "labeled problems (with a reference expression) for warm-starting"})
    train_size: int = attrs.field(default=300, validator=attrs.validators.ge(1),
                                  metadata={"help": "unlabeled Co-RL problems (expected outputs kept hidden)"})
    eval_size: int = attrs.field(default=300, validator=attrs.validators.ge(0),
                                 metadata={"help": "held-out labeled problems for evaluation"})
    shown: tuple[int, ...] = attrs.field(default=(0, 1, 2), metadata={
        "help": "inputs whose outputs the prompt shows"})
    test_inputs: tuple[int, ...] = attrs.field(default=(3, 5, 10, -2), metadata={
        "help": "held-out inputs each program runs on: its signature, and what it is judged on"})
    seed: int = attrs.field(default=1234, metadata={"help": "which problems fall in which split"})
    wall_seconds: float = _sandbox_fields()["wall_seconds"]
    memory_mb: int = _sandbox_fields()["memory_mb"]
    unsafe_run_as_root: bool = _sandbox_fields()["unsafe_run_as_root"]


def _term(coef: int, body: str) -> str:
    """``+3*x`` / ``-x`` / ``+x``: a signed term, for writing expressions by hand."""
    if coef == 0:
        return ""
    mag = "" if abs(coef) == 1 and body else f"{abs(coef)}{'*' if body else ''}"
    return f"{'+' if coef > 0 else '-'}{mag}{body}"


def _linear_forms(a: int, b: int) -> list[str]:
    ax = f"{a}*x" if a != 1 else "x"
    forms = [ax + _term(b, ""), ("x" if a == 1 else f"x*{a}") + _term(b, "")]
    if b > 0:
        forms.append(f"{b}+{ax}")
    return forms


def _square_forms(a: int, b: int) -> list[str]:
    forms = [f"x*x{_term(a, 'x')}{_term(b, '')}", f"x**2{_term(a, 'x')}{_term(b, '')}"]
    if a:
        forms.append(f"x*(x{_term(a, '')}){_term(b, '')}")
    return forms


class ExpressionsTask(_CodeTask):
    """Prompts ``3,5,7=`` (the outputs at the ``shown`` inputs, 0, 1 and 2 by default: short, for
    the tiny models' 64 positions and the CPU); a completion is an expression of ``x``. Seed
    problems carry a reference expression, written in one of several equivalent forms at random
    (so the models learn that behaviour, not spelling, is what counts)."""

    name, Config, mode = "expressions", ExpressionsConfig, "expression"
    help = "code: an expression of x from three examples, judged by its outputs on held-out inputs"

    def make_splits(self, config: ExpressionsConfig) -> Splits:
        rng = random.Random(config.seed)
        functions: list[tuple[Callable[[int], int], list[str]]] = []
        for kind in dict.fromkeys(config.kinds):
            if kind == "linear":
                functions += [((lambda x, a=a, b=b: a * x + b), _linear_forms(a, b))
                              for a in range(1, 20) for b in range(-19, 30)]
            else:
                functions += [((lambda x, a=a, b=b: x * x + a * x + b), _square_forms(a, b))
                              for a in range(-5, 10) for b in range(-9, 30)]
        pool = []
        for fn, forms in functions:
            text = ",".join(str(fn(x)) for x in config.shown) + "="
            pool.append(Prompt(id="", text=text, label=tuple(canonical(fn(x)) for x in config.test_inputs),
                               test_inputs=tuple(config.test_inputs), solution=rng.choice(forms)))
        return self._cut(pool, config, config.kinds)


# -- write a Python function ------------------------------------------------------------------

#: (name, spec with {k}, reference source with {k}, parameter values, test inputs as argument tuples)
_NUMBERS = ((0,), (1,), (7,), (12,), (25,), (100,), (-3,))
_TEMPLATES: tuple[tuple[str, str, str, tuple, tuple], ...] = (
    ("multiple", "returns n multiplied by {k}", "def f(n):\n    return n * {k}", range(2, 13), _NUMBERS),
    ("divisible", "returns True when n is divisible by {k}, else False", "def f(n):\n    return n % {k} == 0",
     range(2, 13), _NUMBERS),
    ("power", "returns n to the power {k}", "def f(n):\n    return n ** {k}", range(2, 6), _NUMBERS),
    ("digits_sum", "returns the sum of the decimal digits of abs(n), plus {k}",
     "def f(n):\n    return sum(int(c) for c in str(abs(n))) + {k}", range(0, 6), _NUMBERS),
    ("multiples_sum", "returns the sum of the multiples of {k} from 0 up to and including n (0 when n < 0)",
     "def f(n):\n    return sum(range(0, n + 1, {k}))", range(2, 10), _NUMBERS),
    ("count_above", "takes a list of integers xs and returns how many of them are greater than {k}",
     "def f(xs):\n    return sum(1 for v in xs if v > {k})", range(0, 10),
     (([],), ([1, 5, 9],), ([10, 0, 3, 3],), ([-1, 7, 8, 2, 6],))),
    ("repeat", "takes a string s and returns s repeated {k} times", "def f(s):\n    return s * {k}", range(2, 6),
     (("",), ("ab",), ("xyz",))),
    ("clamp", "returns n clamped to the range 0 to {k} (0 if n < 0, {k} if n > {k})",
     "def f(n):\n    return max(0, min({k}, n))", range(5, 30, 5), _NUMBERS),
)


def _known_templates(instance, attribute, value) -> None:
    unknown = sorted(set(value) - {t[0] for t in _TEMPLATES})
    if unknown:
        raise ValueError(f"unknown templates {unknown}; available: {', '.join(t[0] for t in _TEMPLATES)}")


@attrs.frozen
class PythonFunctionsConfig:
    templates: tuple[str, ...] = attrs.field(default=tuple(t[0] for t in _TEMPLATES), validator=_known_templates, metadata={
        "help": f"which templates to draw from: {', '.join(t[0] for t in _TEMPLATES)}"})
    seed_size: int = attrs.field(default=0, validator=attrs.validators.ge(0),
                                 metadata={"help": "labeled problems with a reference solution"})
    train_size: int = attrs.field(default=36, validator=attrs.validators.ge(1),
                                  metadata={"help": "unlabeled Co-RL problems (expected outputs kept hidden)"})
    eval_size: int = attrs.field(default=20, validator=attrs.validators.ge(0),
                                 metadata={"help": "held-out labeled problems for evaluation"})
    seed: int = attrs.field(default=1234, metadata={"help": "which problems fall in which split"})
    wall_seconds: float = _sandbox_fields()["wall_seconds"]
    memory_mb: int = _sandbox_fields()["memory_mb"]
    unsafe_run_as_root: bool = _sandbox_fields()["unsafe_run_as_root"]


def reference_outputs(source: str, inputs: tuple) -> tuple[str, ...]:
    """The expected signature of a trusted reference solution (run in this process)."""
    namespace: dict = {}
    exec(source, namespace)
    return tuple(canonical(namespace["f"](*args)) for args in inputs)


class PythonFunctionsTask(_CodeTask):
    """Prompts ask for ``f`` in a fenced Python block; the signature is ``f``'s outputs on the
    template's test inputs. Expected outputs come from the reference solutions."""

    name, Config, mode = "python_functions", PythonFunctionsConfig, "function"
    help = "code: write a Python function from a templated spec, judged by its outputs on test inputs"

    def make_splits(self, config: PythonFunctionsConfig) -> Splits:
        pool = []
        for name, spec, source, values, inputs in _TEMPLATES:
            if name not in config.templates:
                continue
            for k in values:
                arg = "xs" if "xs" in spec else "s" if "string s" in spec else "n"
                text = (f"Write a Python function `f({arg})` that {spec.format(k=k)}. Answer with the function in a "
                        "```python code block.")
                reference = source.format(k=k)
                pool.append(Prompt(id="", text=text, label=reference_outputs(reference, inputs), test_inputs=inputs,
                                   solution=f"```python\n{reference}\n```"))
        return self._cut(pool, config, config.templates)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    ExpressionsTask.register(registry)
    PythonFunctionsTask.register(registry)
