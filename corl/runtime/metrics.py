"""A step's metrics per agent, from the exchanged votes, pseudo-labels and rewards.

Everything here is computed the same on every rank. Hidden labels give monitoring metrics only
(``label_accuracy``, ``reward_accuracy``, ``train_accuracy``); they never reach a label-free router.
A metric that was not measured in a step is left out of its record, never written as 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corl.protocols import AnswerVerifier, WarmStartedAgent
from corl.types import PseudoLabel, Vote

if TYPE_CHECKING:
    from corl.runtime.host import RunHost

#: per-rank metrics that add up over an agent's ranks (the rest are averaged)
SUMMED_METRICS = ("verify_timeouts",)


def vote_metrics(votes: Sequence[Sequence[Vote]], labels: Sequence[PseudoLabel],
                 targets: Sequence[PseudoLabel | None], skipped: Sequence[bool], rewards: Sequence[Sequence[float]],
                 truth: Sequence[Any], verifier: AnswerVerifier, n_train: int) -> dict[str, float]:
    """One agent's label-free metrics (and, where every prompt has a label, monitoring ones).

    ``labels`` are the agent's own pseudo-labels (``label_mode_share``: collusion); ``targets`` the
    ones it was rewarded against (``label_share``, ``label_accuracy``: its peer's under a ring). The
    prompts its router skipped count in no reward statistic: deliberate gating is not a collapse."""
    kept = [p for p, skip in enumerate(skipped) if not skip]
    train_rewards = [rewards[p][:n_train] for p in kept]
    flat = [x for r in train_rewards for x in r]
    finite = [x for x in flat if math.isfinite(x)]
    given = [(p, t) for p, t in enumerate(targets) if t is not None and not skipped[p]]
    m = {
        "answered": statistics.fmean(v.answer is not None for vs in votes for v in vs),
        # label-free answer diversity: distinct answers per prompt (falls when sampling collapses)
        "distinct_answers": statistics.fmean(len({v.answer for v in vs if v.answer is not None}) for vs in votes),
        "label_mode_share": mode_share([lab.answer for lab in labels]),
    }
    if given:
        m["label_share"] = statistics.fmean(t.share for _, t in given)
    if len(kept) < len(skipped):
        m["skipped_prompts"] = (len(skipped) - len(kept)) / len(skipped)
    if finite:  # no finite reward (the update was skipped): no reward statistics
        m["reward_mean"], m["reward_std"] = statistics.fmean(finite), statistics.pstdev(finite)
    if truth and all(t is not None for t in truth):
        if given:
            m["label_accuracy"] = statistics.fmean(t.answer is not None and verifier.equivalent(t.answer, truth[p])
                                                   for p, t in given)
        correct = [[float(v.answer is not None and verifier.equivalent(v.answer, truth[p])) for v in votes[p][:n_train]]
                   for p in kept]
        # With no sample rewarded, "every reward agrees with correctness" only says every answer was wrong
        # and nothing was paid: the reward told the agent nothing, so its accuracy is not reported (not 100%).
        if any(r > 0 for r in finite):
            m["reward_accuracy"] = statistics.fmean(float(r == c) for rs, cs in zip(train_rewards, correct)
                                                    for r, c in zip(rs, cs))
        m["train_accuracy"] = statistics.fmean(float(v.answer is not None and verifier.equivalent(v.answer, t))
                                               for vs, t in zip(votes, truth) for v in vs[:n_train])
    return m


def merge_ranks(per_rank: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One agent's metrics from the ranks of its group (one rank: unchanged)."""
    if len(per_rank) == 1:
        return dict(per_rank[0])
    # a metric some ranks did not measure (no token of theirs went backward) is combined over those that did
    keys = dict.fromkeys(k for m in per_rank for k in m)
    return {k: (sum if k in SUMMED_METRICS else statistics.fmean)([m[k] for m in per_rank if k in m]) for k in keys}


def mode_share(answers: Sequence[Any]) -> float:
    """Share of prompts whose pseudo-label is the batch's most common one (exact match)."""
    counts: dict[Any, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    return max(counts.values(), default=0) / max(len(answers), 1)


def run_summary(run: RunHost, seconds: float) -> dict[str, Any]:
    """What ``summary.json`` holds: each agent's scores before, after and at its best evaluation."""
    agents: dict[str, Any] = {}
    evals, steps = run.evals, sorted(run.evals)
    for name in run.spec.agent_names():  # every agent, wherever it ran
        if not steps:
            agents[name] = {}
            continue
        best = max(steps, key=lambda s: (evals[s][name].get("pass@1", 0.0), -s))
        agents[name] = {"before": evals[steps[0]][name], "after": evals[steps[-1]][name],
                        "best": evals[best][name], "best_step": best}
    return {"name": run.spec.run.name, "steps": run.spec.run.steps, "seconds": round(seconds, 2),
            "stopped_at": run.stopped_at, "stop_reason": run.stop_reason,
            "eval_prompts": len(run.eval_prompts), "eval_k": run.spec.eval.k, "agents": agents,
            "warnings": run.warnings, "warm_ups": warm_ups(run)}


def warm_ups(run: RunHost) -> dict[str, Any]:
    """The supervised warm-up each agent (of this process) started from: its record (base and warm-up
    fingerprints, settings), for agents that had one (:class:`~corl.protocols.WarmStartedAgent`)."""
    return {slot.name: slot.agent.warm_up for slot in run.agents
            if isinstance(slot.agent, WarmStartedAgent) and slot.agent.warm_up}
