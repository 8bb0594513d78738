"""Reward routers: the directed graph of whose pseudo-label rewards whom.

A router returns, per agent, one 0/1 reward per completion (``rewards[agent][prompt][sample]``),
with the pseudo-labels each agent was rewarded against (``Routed.targets``: its peer's, a pool's,
the judge's). Label-free routers are never handed ground truth; ``ground_truth`` is the supervised
baseline and must be declared with ``run.supervised = true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from corl.context import Context, RegistryView
from corl.hookspecs import hookimpl
from corl.protocols import Aggregator, AnswerVerifier
from corl.types import NoConfig, PseudoLabel, Routed, Vote, VoteContext

Rewards = dict[str, list[list[float]]]


def match(votes: Sequence[Vote], target: Any, verifier: AnswerVerifier) -> list[float]:
    """1.0 for each vote whose answer is equivalent to ``target``; 0.0 otherwise or without a target."""
    if target is None:
        return [0.0] * len(votes)
    return [float(v.answer is not None and verifier.equivalent(v.answer, target)) for v in votes]


def _against(votes: Sequence[Sequence[Vote]], labels: Sequence[PseudoLabel], verifier: AnswerVerifier) -> list[list[float]]:
    return [match(vs, label.answer, verifier) for vs, label in zip(votes, labels)]


class RingRouter:
    """Agent i is rewarded against agent i+1's pseudo-label (recipe order, wrapping around)."""

    supervised = False
    min_agents = 2

    def __init__(self, config: NoConfig, ctx: Context | None = None):
        pass

    def route(self, votes: Mapping[str, Sequence[Sequence[Vote]]], labels: Mapping[str, Sequence[PseudoLabel]],
              verifier: AnswerVerifier, aggregator: Aggregator, truth=None) -> Routed:
        names = list(votes)
        peer = {name: labels[names[(i + 1) % len(names)]] for i, name in enumerate(names)}
        return Routed({name: _against(votes[name], peer[name], verifier) for name in names}, targets=peer)


@attrs.frozen
class AllPairsConfig:
    combine: Literal["vote", "mean"] = attrs.field(default="vote", metadata={
        "help": "vote: pool every peer's votes into one pseudo-label (through the run's aggregator); "
                "mean: average the 0/1 matches against each peer's own pseudo-label"})


class AllPairsRouter:
    """Agent i is rewarded by every other agent."""

    supervised = False
    min_agents = 2

    def __init__(self, config: AllPairsConfig, ctx: Context | None = None):
        self.config = config

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Routed:
        names = list(votes)
        out: Rewards = {}
        targets: dict[str, list[PseudoLabel | None]] = {}
        for name in names:
            peers = [p for p in names if p != name]
            if self.config.combine == "vote":
                pooled = [[v for p in peers for v in votes[p][i]] for i in range(len(votes[name]))]
                targets[name] = aggregator.aggregate(pooled, verifier, VoteContext("pooled", tuple(peers), rewarded=name))
                out[name] = _against(votes[name], targets[name], verifier)
            else:  # several labels per prompt: no one target
                targets[name] = [None] * len(votes[name])
                per_peer = [_against(votes[name], labels[p], verifier) for p in peers]
                out[name] = [[sum(r[i][s] for r in per_peer) / len(peers) for s in range(len(votes[name][i]))]
                             for i in range(len(votes[name]))]
        return Routed(out, targets=targets)


@attrs.frozen
class UpwardConfig:
    margin: float = attrs.field(default=0.05, validator=[attrs.validators.ge(0), attrs.validators.le(1)], metadata={
        "help": "a peer whose estimated accuracy is at most this much below an agent's still teaches it (so agents "
                "of similar accuracy pool every vote); a peer further below never does"})
    prior_strength: float = attrs.field(default=64.0, validator=attrs.validators.gt(0), metadata={
        "help": "pseudo-votes of the prior that every agent is as reliable as the cohort's mean (the estimate's "
                "shrinkage; as voting.type = \"reliability\")"})
    iterations: int = attrs.field(default=5, validator=attrs.validators.ge(1), metadata={
        "help": "EM iterations over the step's prompts"})


class UpwardRouter:
    """Agent i is rewarded by the reliability-weighted vote of itself and every peer it does not outperform.

    Each step, each agent's accuracy ``pi_a`` is estimated label-free from that step's votes alone (the
    one-coin Dawid-Skene EM of the built-in ``reliability`` vote: agreement, not labels).
    Agent i's teachers are i and every peer with ``pi_j >= pi_i - margin``; their votes are pooled, each
    weighted by its agent's log-odds reliability, into i's pseudo-label. So a weak agent learns from the
    stronger ones, agents of similar accuracy pool every vote (as ``all_pairs``), and the strongest agent
    is never paid by a peer it outperforms: alone above the rest, it is rewarded by its own majority
    (self-reward, which a strong base's majority makes a good label). Stateless: nothing to checkpoint."""

    supervised = False
    min_agents = 2

    def __init__(self, config: UpwardConfig, ctx: Context | None = None):
        self.config, self.ctx = config, ctx

    def estimate(self, votes: Mapping[str, Sequence[Sequence[Vote]]], verifier: AnswerVerifier) -> Any:
        """The built-in reliability vote (built through the run, ``ctx.build``), its estimate this step's
        cohort of votes: a fresh one every step."""
        if self.ctx is None:
            raise TypeError("UpwardRouter needs the context its factory is handed (ctx.build makes its estimator)")
        estimator = self.ctx.build("aggregator", "corl:reliability", {"prior_strength": self.config.prior_strength,
                                                                     "iterations": self.config.iterations})
        estimator.observe(votes, verifier, 0)
        return estimator

    def teachers(self, reliability: Mapping[str, float]) -> dict[str, list[str]]:
        """Each agent -> the agents whose votes make its label (itself first, then peers in recipe order)."""
        return {a: [a, *(p for p in reliability if p != a and reliability[p] >= reliability[a] - self.config.margin)]
                for a in reliability}

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Routed:
        estimator = self.estimate(votes, verifier)
        pi = estimator.reliability()
        out: Rewards = {}
        targets: dict[str, list[PseudoLabel | None]] = {}
        metrics = {}
        for name, teachers in self.teachers(pi).items():
            pooled = [[v for t in teachers for v in votes[t][i]] for i in range(len(votes[name]))]
            # one agent's votes alone: plain majority
            targets[name] = estimator.aggregate(pooled, verifier, VoteContext("pooled", tuple(teachers), rewarded=name))
            out[name] = _against(votes[name], targets[name], verifier)
            metrics[name] = {"reliability": pi[name], "teachers": float(len(teachers) - 1)}
        return Routed(out, targets=targets, metrics=metrics)


class SelfRouter:
    """Each agent against its own majority: the TTRL-style self-rewarding baseline."""

    supervised = False
    min_agents = 1

    def __init__(self, config: NoConfig, ctx: Context | None = None):
        pass

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Rewards:
        return {name: _against(votes[name], labels[name], verifier) for name in votes}


class GroundTruthRouter:
    """Every agent against the true answer: supervised RLVR, the ceiling label-free runs aim at."""

    supervised = True
    min_agents = 1

    def __init__(self, config: NoConfig, ctx: Context | None = None):
        pass

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Routed:
        if truth is None:
            raise ValueError("ground_truth router needs labels; the task's train split has none")
        given = [PseudoLabel(t, 1.0, {}) for t in truth]
        return Routed({name: [match(vs, t, verifier) for vs, t in zip(votes[name], truth)] for name in votes},
                      targets={name: given for name in votes})


@attrs.frozen
class JudgeConfig:
    judge: str = attrs.field(metadata={"help": "name of the (frozen) agent whose pseudo-label rewards every other agent"})


class JudgeRouter:
    """Every agent against one judge agent's pseudo-label: the judge-based baseline (a third model
    that judges). Declare the judge ``frozen = true`` to keep it fixed."""

    supervised = False
    min_agents = 2

    def __init__(self, config: JudgeConfig, ctx: Context | None = None):
        self.judge = config.judge

    @staticmethod
    def check(config: JudgeConfig, agents) -> list[str]:
        names = [a.name for a in agents]
        if config.judge not in names:
            return [f"judge {config.judge!r} is not an agent; agents: {', '.join(names)}"]
        return []

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Routed:
        return Routed({name: _against(votes[name], labels[self.judge], verifier) for name in votes},
                      targets={name: labels[self.judge] for name in votes})


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("router", "judge", JudgeRouter, JudgeConfig, help="i <- a judge agent (judge-based baseline)")
    registry.add("router", "ring", RingRouter, NoConfig, help="i <- i+1")
    registry.add("router", "all_pairs", AllPairsRouter, AllPairsConfig, help="i <- every j != i, pooled or averaged")
    registry.add("router", "upward", UpwardRouter, UpwardConfig,
                 help="i <- the reliability-weighted vote of i and every peer it does not outperform (label-free)")
    registry.add("router", "self", SelfRouter, NoConfig, help="i <- i (TTRL-style self-reward)")
    registry.add("router", "ground_truth", GroundTruthRouter, NoConfig, help="i <- labels (supervised baseline)")
