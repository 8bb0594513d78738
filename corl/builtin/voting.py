"""Aggregators: majority and weighted voting over equivalence-grouped answers."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

import attrs

from corl.hookspecs import hookimpl
from corl.protocols import AnswerVerifier, Context
from corl.types import PseudoLabel, Vote

TieBreak = Literal["random", "none"]


def group_answers(votes: Sequence[Vote], verifier: AnswerVerifier) -> list[tuple[Hashable, list[int]]]:
    """Group equivalent answers: ``[(representative, [vote indices])]`` in first-seen order.

    Exact duplicates are merged by hash first; the verifier's (possibly slow) equivalence is
    only asked between distinct representatives.
    """
    groups: list[tuple[Hashable, list[int]]] = []
    by_value: dict[Hashable, int] = {}
    for i, vote in enumerate(votes):
        if vote.answer is None:
            continue
        g = by_value.get(vote.answer)
        if g is None:
            g = next((j for j, (rep, _) in enumerate(groups) if verifier.equivalent(rep, vote.answer)), None)
            if g is None:
                groups.append((vote.answer, []))
                g = len(groups) - 1
            by_value[vote.answer] = g
        groups[g][1].append(i)
    return groups


def weighted_label(votes: Sequence[Vote], weights: Sequence[float], verifier: AnswerVerifier,
                   tie_break: TieBreak, seed: int, min_share: float = 0.0) -> PseudoLabel:
    groups = group_answers(votes, verifier)
    counts = {rep: float(sum(weights[i] for i in members)) for rep, members in groups}
    total = sum(counts.values())
    if not counts or total <= 0:
        return PseudoLabel(None, 0.0, counts)
    top = max(counts.values())
    tied = [rep for rep, c in counts.items() if math.isclose(c, top, rel_tol=1e-9, abs_tol=1e-12)]
    if len(tied) > 1:
        if tie_break == "none":
            return PseudoLabel(None, 0.0, counts)
        # Seeded and content-addressed: deterministic, and blind to the answers' values
        # (a "smallest answer" rule favours round numbers and drives collapse).
        key = f"{seed}|{[repr(v.answer) for v in votes]}".encode()
        tied.sort(key=lambda rep: hashlib.sha256(key + repr(rep).encode()).digest())
    # Confidence gate: a label backed by too few of all votes (no-answers included) rewards nothing.
    if min_share > 0 and top / sum(weights) < min_share:
        return PseudoLabel(None, top / total, counts)
    return PseudoLabel(tied[0], top / total, counts)


_MIN_SHARE_HELP = ("confidence gate: no pseudo-label (so no reward and no update for that prompt) unless the "
                   "winning answer holds at least this share of all votes, no-answers included (0: off)")


@attrs.frozen
class MajorityConfig:
    tie_break: TieBreak = attrs.field(default="random", metadata={
        "help": "random: a seeded, deterministic pick among tied answers; none: no pseudo-label on a tie"})
    min_share: float = attrs.field(default=0.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)],
                                   metadata={"help": _MIN_SHARE_HELP})


class MajorityVote:
    """One completion, one vote; the pseudo-label is the most common equivalent answer."""

    def __init__(self, config: MajorityConfig, ctx: Context | None = None):
        self.config, self.seed = config, ctx.seed if ctx is not None else 0  # ties break by the run's seed

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier) -> list[PseudoLabel]:
        return [weighted_label(vs, [1.0] * len(vs), verifier, self.config.tie_break, self.seed, self.config.min_share)
                for vs in votes]


@attrs.frozen
class WeightedConfig(MajorityConfig):
    weight: Literal["confidence", "self_consistency", "uniform"] = attrs.field(default="confidence", metadata={
        "help": "confidence: exp(mean token log-prob) of the completion; self_consistency: the voting agent's "
                "mean top-answer share over the batch (matters when several agents' votes are pooled); "
                "uniform: equal weights (= majority)"})


class WeightedVote:
    """Each vote counts with a weight; with equal weights this is exactly majority voting."""

    def __init__(self, config: WeightedConfig, ctx: Context | None = None):
        self.config, self.seed = config, ctx.seed if ctx is not None else 0

    def _weights(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier) -> list[list[float]]:
        if self.config.weight == "uniform":
            return [[1.0] * len(vs) for vs in votes]
        if self.config.weight == "confidence":
            return [[math.exp(v.confidence) for v in vs] for vs in votes]
        shares: dict[str, list[float]] = defaultdict(list)
        for vs in votes:
            for agent in {v.agent for v in vs}:
                own = [v for v in vs if v.agent == agent]
                groups = group_answers(own, verifier)
                shares[agent].append(max((len(m) for _, m in groups), default=0) / len(own))
        consistency = {a: sum(s) / len(s) for a, s in shares.items()}
        return [[consistency[v.agent] for v in vs] for vs in votes]

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier) -> list[PseudoLabel]:
        weights = self._weights(votes, verifier)
        return [weighted_label(vs, ws, verifier, self.config.tie_break, self.seed, self.config.min_share)
                for vs, ws in zip(votes, weights)]


@hookimpl
def corl_register_components(registry):
    registry.add("aggregator", "majority", MajorityVote, MajorityConfig, help="most common equivalent answer")
    registry.add("aggregator", "weighted", WeightedVote, WeightedConfig,
                 help="votes weighted by sequence confidence or by the agent's self-consistency")
