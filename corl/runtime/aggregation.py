"""The run's aggregator as the step, the routers and the evaluations call it.

One object, :class:`BoundAggregator`, stands between the run and the aggregator a recipe (or an
embedding program) chose: every call goes through it, so every call is checked
(:func:`corl.runtime.boundary.check_labels`: one pseudo-label per prompt, in every evaluation too)
and an exception inside the aggregator is one line naming it. The step the labels serve is filled
into every :class:`~corl.types.VoteContext` here, so a router need not know it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from corl.errors import PluginError
from corl.protocols import AnswerVerifier, CohortAggregator, Stateful
from corl.runtime.boundary import agent_metrics, check_labels, guard
from corl.types import EVAL, LABEL, PseudoLabel, Vote, VoteContext


class BoundAggregator:
    """The run's aggregator: ``aggregate(votes, verifier, context)`` as routers call it, checked."""

    def __init__(self, inner: Any, who: str):
        self.inner, self.who = inner, who
        self.step = 0  # the training step the current labels serve (VoteContext.step)

    @property
    def cohort(self) -> bool:
        """The aggregator learns from the whole cohort (:class:`corl.protocols.CohortAggregator`)."""
        return isinstance(self.inner, CohortAggregator)

    @property
    def stateful(self) -> bool:
        return isinstance(self.inner, Stateful)

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext, *, agent: str | None = None) -> list[PseudoLabel]:
        if not isinstance(context, VoteContext):
            raise PluginError(f"{self.who} was called with context {context!r}; a router passes a corl.VoteContext, "
                              "e.g. VoteContext('pooled', voters, rewarded=agent)")
        context = attrs.evolve(context, step=self.step)  # (a router need not know the step)
        when = "in an evaluation" if context.purpose == EVAL else f"during step {context.step}"
        with guard(self.who, when):
            labels = self.inner.aggregate(votes, verifier, context)
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
