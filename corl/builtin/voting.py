"""Aggregators: majority and weighted voting over equivalence-grouped answers."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

import attrs

from corl.context import Context, RegistryView
from corl.hookspecs import hookimpl
from corl.protocols import AnswerVerifier
from corl.types import PseudoLabel, Vote, VoteContext

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
                   tie_break: TieBreak, seed: int, min_share: float = 0.0,
                   groups: list[tuple[Hashable, list[int]]] | None = None) -> PseudoLabel:
    """The weighted vote's label; ``groups``: :func:`group_answers` of ``votes`` where the caller has them."""
    groups = group_answers(votes, verifier) if groups is None else groups
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

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext) -> list[PseudoLabel]:
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

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext) -> list[PseudoLabel]:
        weights = self._weights(votes, verifier)
        return [weighted_label(vs, ws, verifier, self.config.tie_break, self.seed, self.config.min_share)
                for vs, ws in zip(votes, weights)]


@attrs.frozen
class ReliabilityConfig(MajorityConfig):
    prior_strength: float = attrs.field(default=64.0, validator=attrs.validators.gt(0), metadata={
        "help": "pseudo-votes of the prior that every agent is as reliable as the cohort's mean: until an agent's "
                "votes outweigh it, its weight stays near the others'"})
    iterations: int = attrs.field(default=5, validator=attrs.validators.ge(1), metadata={
        "help": "EM iterations over each step's prompts"})


class ReliabilityVote:
    """A label-free reliability-weighted vote: a one-coin Dawid-Skene model (1979) over the agents.

    Each vote of agent ``a`` is right with an unknown probability ``pi_a``, and wrong otherwise, spread
    over the other answers; given the true answer, votes are independent. The posterior of the true
    answer of a prompt is then ``P(y) ~ exp(sum over votes for y of w_a)`` with the log-odds weight
    ``w_a = log(pi_a (K - 1) / (1 - pi_a))`` (``K``: the prompt's distinct answers; never below 0, so a
    weak agent's answer is discounted, not voted against). ``pi_a`` is estimated from agreement alone
    by EM (started from the plain majority): every training step the cohort's votes (:meth:`observe`)
    refine it, on top of what earlier steps found (each agent's expected right votes and votes cast,
    accumulated: the state a checkpoint keeps), shrunk to the cohort's mean by a prior of
    ``prior_strength`` pseudo-votes, so with no evidence, or with equal agents, the vote is majority.

    Only a pool of several agents' votes is weighted (``all_pairs`` with ``combine = "vote"``); an
    agent's own label and an evaluation's maj@k, one agent's votes, are plain majority."""

    def __init__(self, config: ReliabilityConfig, ctx: Context | None = None):
        self.config, self.seed = config, ctx.seed if ctx is not None else 0
        self.right: dict[str, float] = {}  # expected right answers per agent, over the steps observed
        self.answered: dict[str, float] = {}  # answers per agent (vote shares summed), over the steps observed

    def reliability(self, right: Mapping[str, float] | None = None,
                    answered: Mapping[str, float] | None = None) -> dict[str, float]:
        """Each agent's estimated accuracy ``pi_a``: its (expected) right answers over its answers, those of
        the steps observed plus ``right`` / ``answered`` of the step at hand, shrunk to the cohort's mean
        by the prior."""
        right = {a: self.right[a] + (right or {}).get(a, 0.0) for a in self.right}
        answered = {a: self.answered[a] + (answered or {}).get(a, 0.0) for a in self.answered}
        total = sum(answered.values())
        mean = min(max(sum(right.values()) / total, 1e-3), 1 - 1e-3) if total > 0 else 0.5
        alpha = self.config.prior_strength
        return {a: (alpha * mean + right[a]) / (alpha + answered[a]) for a in answered}

    def _weight(self, pi: float, k: int) -> float:
        pi = min(max(pi, 1e-6), 1 - 1e-6)
        return max(0.0, math.log(pi * max(k - 1, 1) / (1 - pi)))

    def observe(self, cohort: Mapping[str, Sequence[Sequence[Vote]]], verifier: AnswerVerifier,
                step: int) -> dict[str, dict[str, float]]:
        """One step of online EM over the step's prompts: the posterior of each prompt's answer under the
        current reliabilities, then each agent's share of right answers, a few times; then add the step's
        expectations to what earlier steps found."""
        names = list(cohort)
        for a in names:
            self.right.setdefault(a, 0.0)
            self.answered.setdefault(a, 0.0)
        prompts = []
        for p in range(len(cohort[names[0]])):
            pooled = [v for a in names for v in cohort[a][p]]
            groups = group_answers(pooled, verifier)
            index = {i: g for g, (_, members) in enumerate(groups) for i in members}
            shares = {a: [0.0] * len(groups) for a in names}  # each agent's votes per answer group
            offset = 0
            for a in names:
                n = len(cohort[a][p])
                for s in range(n):
                    if offset + s in index:
                        shares[a][index[offset + s]] += 1.0
                offset += n
            if groups:
                prompts.append((len(groups), shares))
        answered = {a: sum(sum(q[a]) for _, q in prompts) for a in names}
        # E-step first from what earlier steps found (on the first step, with no evidence yet, from the
        # plain majority, as EM for Dawid-Skene starts), then refined with this step's own expectations
        pi = self.reliability() if any(self.answered.values()) else None
        for _ in range(self.config.iterations):
            right = dict.fromkeys(names, 0.0)
            for k, q in prompts:
                w = {a: 1.0 if pi is None else self._weight(pi[a], k) for a in names}
                score = [sum(w[a] * q[a][g] for a in names) for g in range(k)]
                top = max(score)
                if pi is None:  # the majority, taken as right (ties shared), not a soft vote
                    post = [float(math.isclose(x, top)) for x in score]
                else:
                    post = [math.exp(x - top) for x in score]
                total = sum(post)
                for a in names:
                    right[a] += sum(post[g] / total * q[a][g] for g in range(k))
            pi = self.reliability(right, answered)
        for a in names:
            self.right[a] += right[a]
            self.answered[a] += answered[a]
        pi = self.reliability()
        typical = max(2, round(statistics.fmean(k for k, _ in prompts))) if prompts else 2
        return {a: {"reliability": pi[a], "reliability_weight": self._weight(pi[a], typical)} for a in names}

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext) -> list[PseudoLabel]:
        pi = self.reliability()
        out = []
        for vs in votes:
            agents, groups = {v.agent for v in vs}, group_answers(vs, verifier)
            if len(agents) < 2 or not pi:  # one agent's votes: nothing to weigh between
                weights = [1.0] * len(vs)
            else:
                k = max(2, len(groups))
                weight = {a: self._weight(pi.get(a, 0.5), k) for a in agents}
                mean = sum(weight.values()) / len(agents)
                # each vote weighs its agent's weight relative to the others' (equal weights: one vote each, the
                # majority exactly); nobody above chance: no weight to go by
                weight = {a: w / mean for a, w in weight.items()} if mean > 0 else dict.fromkeys(agents, 1.0)
                weights = [weight[v.agent] for v in vs]
            out.append(weighted_label(vs, weights, verifier, self.config.tie_break, self.seed, self.config.min_share,
                                      groups))
        return out

    def save_state(self, path: str) -> None:
        from pathlib import Path

        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "reliability.json").write_text(json.dumps({"right": self.right, "answered": self.answered}))

    def load_state(self, path: str) -> None:
        from pathlib import Path

        state = json.loads((Path(path) / "reliability.json").read_text())
        self.right, self.answered = dict(state["right"]), dict(state["answered"])


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("aggregator", "majority", MajorityVote, MajorityConfig, help="most common equivalent answer")
    registry.add("aggregator", "weighted", WeightedVote, WeightedConfig,
                 help="votes weighted by sequence confidence or by the agent's self-consistency")
    registry.add("aggregator", "reliability", ReliabilityVote, ReliabilityConfig,
                 help="pooled votes weighted by each agent's reliability, learned label-free (one-coin Dawid-Skene EM)")
