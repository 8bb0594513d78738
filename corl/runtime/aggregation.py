"""The run's aggregator as the step, the routers and the evaluations call it.

One object, :class:`BoundAggregator`, stands between the run and the aggregator a recipe (or an
embedding program) chose: every call goes through it, so every call is checked
(:func:`corl.runtime.boundary.check_labels`: one pseudo-label per prompt, in every evaluation too)
and an exception inside the aggregator is one line naming it. It also keeps the first API working:
an aggregator written as ``aggregate(votes, verifier)`` is called without the context (with a
DeprecationWarning), and a router written before contexts that calls ``aggregate(pooled,
verifier)`` gets a pool's context filled in.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from corl.errors import PluginError
from corl.protocols import AnswerVerifier, CohortAggregator, Stateful
from corl.runtime.boundary import agent_metrics, check_labels, guard
from corl.types import EVAL, LABEL, POOLED, PseudoLabel, Vote, VoteContext


def takes_context(aggregator: Any) -> bool:
    """False for an aggregator of the first API: its ``aggregate`` binds ``(votes, verifier)`` but not
    a third argument (read once, when the run is built, for the deprecation path)."""
    try:
        signature = inspect.signature(aggregator.aggregate)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind([], None, None)
    except TypeError:
        return False
    return True


class BoundAggregator:
    """The run's aggregator: ``aggregate(votes, verifier, context=None)`` as routers call it, checked."""

    def __init__(self, inner: Any, who: str):
        self.inner, self.who = inner, who
        self.step = 0  # the training step the current labels serve (VoteContext.step)
        self.legacy = not takes_context(inner)
        if self.legacy:
            warnings.warn(f"{who}: aggregate(votes, verifier) is the first aggregator API; add a third parameter, "
                          "context (corl.VoteContext), to see what the labels are for (docs/how-to/plugins.md)",
                          DeprecationWarning, stacklevel=2)

    @property
    def cohort(self) -> bool:
        """The aggregator learns from the whole cohort (:class:`corl.protocols.CohortAggregator`)."""
        return isinstance(self.inner, CohortAggregator)

    @property
    def stateful(self) -> bool:
        return isinstance(self.inner, Stateful)

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext | None = None, *, agent: str | None = None) -> list[PseudoLabel]:
        if context is None:  # a router of the first API pooling votes
            context = VoteContext(POOLED, tuple(sorted({v.agent for vs in votes for v in vs})))
        context = attrs.evolve(context, step=self.step)  # (a router need not know the step)
        when = "in an evaluation" if context.purpose == EVAL else f"during step {context.step}"
        with guard(self.who, when):
            labels = self.inner.aggregate(votes, verifier) if self.legacy else \
                self.inner.aggregate(votes, verifier, context)
        check_labels(labels, votes, agent or "+".join(context.voters) or "?", self.who)
        return labels

    def own_labels(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier, agent: str) -> list[PseudoLabel]:
        """An agent's own pseudo-labels in a training step."""
        return self.aggregate(votes, verifier, VoteContext(LABEL, (agent,), step=self.step), agent=agent)

    def maj(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier, agent: str) -> list[PseudoLabel]:
        """An evaluation's maj@k of one agent."""
        return self.aggregate(votes, verifier, VoteContext(EVAL, (agent,), step=self.step), agent=agent)

    def observe(self, cohort: Mapping[str, Sequence[Sequence[Vote]]], verifier: AnswerVerifier,
                step: int) -> dict[str, dict[str, float]]:
        """Before the step's labels: a cohort aggregator updates its state (others: nothing); its
        metrics per agent of the cohort."""
        self.step = step
        if not self.cohort:
            return {}
        with guard(self.who, f"during step {step}"):
            metrics = self.inner.observe(cohort, verifier, step)
        if not agent_metrics(metrics, cohort):
            raise PluginError(f"{self.who} returned {type(metrics).__name__} from observe(); expected "
                              f"{{agent: {{metric: number}}}} for agents of the cohort ({sorted(cohort)})")
        return {name: {k: float(v) for k, v in m.items()} for name, m in metrics.items()}

    def save_state(self, path: str) -> None:
        with guard(self.who, "while writing a checkpoint"):
            self.inner.save_state(path)

    def load_state(self, path: str) -> None:
        with guard(self.who, "while restoring a checkpoint"):
            self.inner.load_state(path)
