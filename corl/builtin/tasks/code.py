"""Code answers: a completion's program is its *behaviour*, the tuple of its outputs on the
prompt's test inputs. Two programs are one vote when they behave the same, however they are written.

``CodeVerifier`` is the answer verifier every code task uses: ``extract_batch`` pulls the program
out of each completion (the last fenced block, else the bare text), runs the whole batch in one
:class:`corl.sandbox.Sandbox` call and returns each program's signature, or None (no vote) for a
program that does not parse, fails on every input, or hits a limit (time, memory, output, a
forbidden operation): such results say more about the machine than about the program.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Literal

from corl.sandbox import RESOURCE_ERRORS, Limits, Outcome, Program, Sandbox
from corl.types import Prompt

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)

Signature = tuple[str, ...]


def extract_program(text: str) -> str:
    """The program in a completion: the last fenced code block (an unclosed one counts), else the
    whole text, stripped."""
    blocks = _FENCE.findall(text)
    return (blocks[-1] if blocks else text).strip()


def signature(outcomes: Sequence[Outcome]) -> Signature | None:
    """The behaviour of one program: per input its output, or ``!kind`` for an error it raised
    (a ``ZeroDivisionError`` on one input is behaviour too). None when it never parsed, failed on
    every input, or hit a resource limit on any."""
    if not outcomes or all(not o.ok for o in outcomes):
        return None
    if any(o.error in RESOURCE_ERRORS for o in outcomes):
        return None
    return tuple(o.output if o.ok else f"!{o.error}" for o in outcomes)


class CodeVerifier:
    """Answers are behaviour signatures; two are one answer when they are equal.

    A prompt's ``label`` (when known) is the expected signature: the reference's outputs.
    """

    bounded = True  # the sandbox enforces its own limits; no SIGALRM around it

    def __init__(self, mode: Literal["expression", "function"] = "expression", entry: str = "f",
                 limits: Limits | None = None, *, isolate: bool = True, unsafe_run_as_root: bool = False):
        self.mode, self.entry = mode, entry
        self.sandbox = Sandbox(limits or Limits(), isolate=isolate, unsafe_run_as_root=unsafe_run_as_root)
        self.programs_run = 0

    def extract(self, text: str) -> Hashable | None:
        raise TypeError("a code verifier needs each prompt's test inputs: use extract_batch(prompts, texts) "
                        "(corl.runtime.verify.extract_all)")

    def extract_batch(self, prompts: Sequence[Prompt], texts: Sequence[Sequence[str]]) -> list[list[Signature | None]]:
        """Signatures of every completion, ``[p][s]``; identical programs of one prompt run once."""
        jobs: dict[tuple[str, str], int] = {}
        inputs_of: dict[str, tuple] = {}
        keys = []
        for prompt, row in zip(prompts, texts):
            keys.append([])
            for text in row:
                source = extract_program(text)
                inputs_of.setdefault(repr(prompt.test_inputs), prompt.test_inputs)
                key = (source, repr(prompt.test_inputs))
                keys[-1].append(key if source else None)
                if source:
                    jobs.setdefault(key, len(jobs))
        outcomes = self.sandbox.run([Program(src, inputs_of[inputs], self.mode, self.entry) for src, inputs in jobs])
        self.programs_run += len(jobs)
        sigs = [signature(o) for o in outcomes]
        return [[None if k is None else sigs[jobs[k]] for k in row] for row in keys]

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        return a == b
