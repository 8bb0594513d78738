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

    def __init__(self, config: NoConfig, ctx=None):
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

    def __init__(self, config: AllPairsConfig, ctx=None):
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


class SelfRouter:
    """Each agent against its own majority: the TTRL-style self-rewarding baseline."""

    supervised = False
    min_agents = 1

    def __init__(self, config: NoConfig, ctx=None):
        pass

    def route(self, votes, labels, verifier, aggregator, truth=None) -> Rewards:
        return {name: _against(votes[name], labels[name], verifier) for name in votes}


class GroundTruthRouter:
    """Every agent against the true answer: supervised RLVR, the ceiling label-free runs aim at."""

    supervised = True
    min_agents = 1

    def __init__(self, config: NoConfig, ctx=None):
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

    def __init__(self, config: JudgeConfig, ctx=None):
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
def corl_register_components(registry):
    registry.add("router", "judge", JudgeRouter, JudgeConfig, help="i <- a judge agent (judge-based baseline)")
    registry.add("router", "ring", RingRouter, NoConfig, help="i <- i+1")
    registry.add("router", "all_pairs", AllPairsRouter, AllPairsConfig, help="i <- every j != i, pooled or averaged")
    registry.add("router", "self", SelfRouter, NoConfig, help="i <- i (TTRL-style self-reward)")
    registry.add("router", "ground_truth", GroundTruthRouter, NoConfig, help="i <- labels (supervised baseline)")
