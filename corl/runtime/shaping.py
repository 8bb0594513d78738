"""Reward shaping in a step (``[[shaping]]``): each term scores an agent's completions where they
were sampled, its values are checked there (:func:`corl.runtime.boundary.check_shaping`) and
exchanged with the votes, and after routing every completion's reward becomes

    reward = peer reward (the router's) + sum over terms of weight * value

or, with ``run.peer_reward = false``, the sum over terms alone (then ``reward_mean`` and the health
checks read that reward, since nothing else is paid).

The peer reward stays the label-free core: the label-free metrics and health checks read it
(``reward_mean``, ``reward_std``, ``reward_accuracy``), the optimizer trains on the sum, reported
as ``shaped_reward_mean`` / ``shaped_reward_std`` beside each term's mean (``shaping/<name>``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corl.runtime.boundary import check_shaping, guard
from corl.types import Rollout, Vote

if TYPE_CHECKING:
    from corl.runtime.host import StepHost

Grid = list[list[float]]


def score(run: StepHost, rollout: Rollout, votes: Sequence[Sequence[Vote]]) -> dict[str, Grid]:
    """Every term's values for one agent's completions (this rank's shard of the prompts)."""
    if not run.shaping:
        return {}
    answers = [[v.answer for v in row] for row in votes]
    out = {}
    for slot in run.shaping:
        # ground truth only for a term that declares it reads labels (validation allows one only in a supervised run)
        truth = [p.label for p in rollout.prompts] if slot.needs_labels and run.spec.run.supervised else None
        with guard(slot.who, f"for agent {rollout.agent!r}'s completions"):
            values = slot.term.score(rollout, answers, run.verifier, truth)
        out[slot.spec.name] = check_shaping(values, rollout, slot.who)
    return out


def add(rewards: Mapping[str, Sequence[Sequence[float]]], terms: Mapping[str, Mapping[str, Grid]],
        weights: Mapping[str, float], *, peer: bool = True) -> dict[str, Grid]:
    """The router's rewards plus each term's values times its weight, per agent, prompt and sample;
    without ``peer`` (``run.peer_reward = false``) the weighted terms alone."""
    if not weights:
        return {name: [list(row) for row in rows] for name, rows in rewards.items()}
    return {name: [[(r if peer else 0.0) + sum(w * terms[name][term][p][s] for term, w in weights.items())
                    for s, r in enumerate(row)]
                   for p, row in enumerate(rows)]
            for name, rows in rewards.items()}


def metrics(terms: Mapping[str, Grid], total: Sequence[Sequence[float]], n_train: int) -> dict[str, Any]:
    """One agent's shaping metrics over its trained samples (none without shaping)."""
    if not terms:
        return {}
    out = {f"shaping/{name}": statistics.fmean(x for row in grid for x in row[:n_train]) for name, grid in terms.items()}
    flat = [x for row in total for x in row[:n_train] if math.isfinite(x)]
    if flat:  # no finite total (the update was skipped): left out, not NaN
        out["shaped_reward_mean"], out["shaped_reward_std"] = statistics.fmean(flat), statistics.pstdev(flat)
    return out
