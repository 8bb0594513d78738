"""The completions a run logs (``run.log_completions`` per agent, each training step and each
evaluation): what the model wrote, the answer taken from it, the label it was scored against, its
reward and the hidden label, so a run whose reward is 0 can be read without writing code.

The first ``k`` prompts of the step (or of the evaluation) are logged, sample 0 of each: the same
prompts every time the step's prompts repeat, a deterministic choice that costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corl.types import Completion, Prompt, PseudoLabel, Routed, Vote


def step_samples(step: int, prompts: Sequence[Prompt], texts: Mapping[str, Mapping[int, str]],
                 votes: Mapping[str, Sequence[Sequence[Vote]]], routed: Routed, k: int) -> tuple[Completion, ...]:
    """Sample 0 of each of the first ``k`` prompts, per agent (``texts[agent][p]``: its completion)."""
    out = []
    for name, by_prompt in texts.items():
        for p in sorted(by_prompt)[:k]:
            target: PseudoLabel | None = routed.targets[name][p]
            out.append(Completion(agent=name, step=step, kind="train", prompt_id=prompts[p].id,
                                  prompt=prompts[p].text, completion=by_prompt[p], answer=votes[name][p][0].answer,
                                  label=None if target is None else target.answer,
                                  reward=float(routed.rewards[name][p][0]), truth=prompts[p].label))
    return tuple(out)


def eval_samples(agent: str, step: int, prompts: Sequence[Prompt], texts: Sequence[Sequence[str]],
                 votes: Sequence[Sequence[Vote]], labels: Sequence[PseudoLabel], k: int) -> list[Completion]:
    """An evaluation's first ``k`` prompts, one sampled completion each; ``label`` is the agent's maj@k."""
    return [Completion(agent=agent, step=step, kind="eval", prompt_id=p.id, prompt=p.text, completion=row[0],
                       answer=vs[0].answer, label=lab.answer, reward=None, truth=p.label)
            for p, row, vs, lab in list(zip(prompts, texts, votes, labels))[:k]]


def as_json(samples: Sequence[Completion]) -> list[dict[str, Any]]:
    return [s.to_json() for s in samples]
