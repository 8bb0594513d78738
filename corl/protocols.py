"""The component contract. Every kind is a small Protocol; a run talks to components only
through these. Implementations are plain classes built from one frozen attrs config class."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from corl.types import Prompt, PseudoLabel, Rollout, Vote


@runtime_checkable
class AnswerVerifier(Protocol):
    """Turns completion text into answers and decides when two answers are one."""

    def extract(self, text: str) -> Hashable | None:
        """The canonical answer in ``text``, or None when there is none."""

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        """True when ``a`` and ``b`` are the same answer (``1/2`` and ``0.5``)."""


@runtime_checkable
class Task(Protocol):
    """Prompts in splits: ``seed`` (labeled, warm-start), ``train`` (labels hidden) and ``eval``."""

    verifier: AnswerVerifier

    def split(self, name: str) -> Sequence[Prompt]: ...


@runtime_checkable
class Agent(Protocol):
    """A policy with its own parameters. Agents share nothing but answers and pseudo-labels."""

    name: str

    def parameters(self) -> Iterable[Any]: ...

    def token_logprobs(self, batch: Any, rows: Any, *, reference: bool = False) -> tuple[Any, Any]:
        """Per-token log-probs (with grad) and entropies of the completions in ``rows`` of a
        sampled ``batch``; from a frozen reference copy when ``reference``."""

    def freeze_reference(self) -> None:
        """Keep a frozen copy of the current weights for ``token_logprobs(..., reference=True)``."""

    def save(self, path: str) -> None:
        """Export the agent's weights (and tokenizer) in its engine's native format."""

    def save_state(self, path: str) -> None:
        """Write what a checkpoint needs to restore the trained weights exactly (safetensors)."""

    def load_state(self, path: str) -> None:
        """Restore the weights written by ``save_state``."""


@runtime_checkable
class Sampler(Protocol):
    """Draws completions from an agent's current policy."""

    def sample(self, agent: Agent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        """``n`` completions per prompt, with the sampling-time log-probs in ``Rollout.batch``."""

    def sync(self, agent: Agent) -> None:
        """Make the next ``sample`` use the agent's latest weights (a no-op when colocated)."""


@runtime_checkable
class Aggregator(Protocol):
    """Votes a prompt's answers into a pseudo-label."""

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier) -> list[PseudoLabel]: ...


@runtime_checkable
class RewardRouter(Protocol):
    """Decides whose pseudo-label rewards whom. ``supervised`` routers receive ground truth;
    label-free ones are never handed it."""

    supervised: bool

    def route(
        self,
        votes: Mapping[str, Sequence[Sequence[Vote]]],
        labels: Mapping[str, Sequence[PseudoLabel]],
        verifier: AnswerVerifier,
        aggregator: Aggregator,
        truth: Sequence[Any] | None = None,
    ) -> dict[str, list[list[float]]]:
        """Rewards per agent, prompt and completion (``rewards[agent][p][s]``, usually 0 or 1)."""


@runtime_checkable
class Optimizer(Protocol):
    """Updates one agent (bound at construction) from its rollout and per-completion rewards.

    ``rewards[p]`` covers the first ``len(rewards[p])`` samples of prompt ``p``: the ``n_train``
    trained samples out of the rollout's ``n_votes``."""

    def step(self, rollout: Rollout, rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        """One update. A non-finite loss or gradient must skip the update and report
        ``nonfinite = 1.0`` in the returned metrics (the run counts and acts on it)."""

    def save_state(self, path: str) -> None:
        """Write the optimizer's state (moments, step counts) for a checkpoint."""

    def load_state(self, path: str) -> None:
        """Restore the state written by ``save_state``."""
