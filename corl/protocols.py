"""The component contract. Every kind is a small Protocol; a run talks to components only
through these. Implementations are plain classes built from one frozen attrs config class.

The data they exchange is :mod:`corl.types`; what a factory is handed (the :class:`~corl.context.Context`)
and what hooks see of a run are :mod:`corl.context`; optional capabilities, declared as class
attributes of a factory, are :mod:`corl.traits`. A verifier that needs the prompts implements
:class:`BatchVerifier`; a component whose state a checkpoint must keep implements :class:`Stateful`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from corl.types import Prompt, PseudoLabel, Rollout, Routed, TokenBatch, Vote, VoteContext


@runtime_checkable
class AnswerVerifier(Protocol):
    """Turns completion text into answers and decides when two answers are one."""

    def extract(self, text: str) -> Hashable | None:
        """The canonical answer in ``text``, or None when there is none."""

    def equivalent(self, a: Hashable, b: Hashable) -> bool:
        """True when ``a`` and ``b`` are the same answer (``1/2`` and ``0.5``)."""


@runtime_checkable
class BatchVerifier(AnswerVerifier, Protocol):
    """A verifier that extracts a whole batch at once (a code verifier runs every program of the
    batch in one sandbox call, on each prompt's ``test_inputs``); the run then never calls
    ``extract`` one completion at a time."""

    def extract_batch(self, prompts: Sequence[Prompt], texts: Sequence[Sequence[str]]) -> list[list[Hashable | None]]:
        """``answers[p][s]`` for the completions ``texts[p][s]`` of ``prompts[p]``."""


@runtime_checkable
class Task(Protocol):
    """Prompts in splits: ``seed`` (labeled, warm-start), ``train`` (labels hidden) and ``eval``."""

    verifier: AnswerVerifier

    def split(self, name: str) -> Sequence[Prompt]: ...


@runtime_checkable
class LabelPathTask(Task, Protocol):
    """A task that says how it found each prompt's label (the ``jsonl`` task: the field path, or
    the extractor that read it out of a solution); ``corl data preview`` shows it."""

    label_paths: Mapping[str, str | None]  # prompt id -> how its label was found (None: not said)


@runtime_checkable
class Agent(Protocol):
    """A policy with its own parameters. Agents share nothing but answers and pseudo-labels.

    What the host and optimizers use: ``name``, ``parameters()``, ``token_logprobs`` of a
    :class:`TokenBatch` its sampler made, ``freeze_reference``, and the three ways to write or read
    weights. Order of life: the factory builds the agent; the optimizer's factory may call
    ``freeze_reference()`` (a KL reference is the *start* weights); only then does a resumed run call
    ``load_state`` with the checkpoint's weights. So ``freeze_reference`` always comes before
    ``load_state``, and a reference must be a copy, not a view, of the weights. Samplers of a kind
    read more of their agent (:class:`LanguageModelAgent`); an agent that may start from a warm-up
    says so (:class:`WarmStartedAgent`)."""

    name: str

    def parameters(self) -> Iterable[Any]:
        """The tensors an optimizer may update (those with ``requires_grad``)."""

    def token_logprobs(self, batch: TokenBatch, rows: Any, *, reference: bool = False) -> tuple[Any, Any]:
        """Per-token log-probs (with grad) and entropies, both ``[len(rows), T]``, of the completions in
        ``rows`` of ``batch`` at ``batch.temperature``: on the sampled weights they equal
        ``batch.old_logprobs`` (to ~1e-5 in float32). From the frozen reference copy when ``reference``."""

    def freeze_reference(self) -> None:
        """Keep a frozen copy of the current weights for ``token_logprobs(..., reference=True)``."""

    def save(self, path: str) -> None:
        """Export the agent's weights (and tokenizer) in its engine's native format. On several
        ranks every rank of the agent's group calls it; only ``ctx.group.rank == 0`` should write."""

    def save_state(self, path: str) -> None:
        """Write what a checkpoint needs to restore the trained weights exactly (safetensors). On
        several ranks every rank of the group calls it with the same ``path``: each writes what it
        alone holds (its shard) under a name of its own, or only group rank 0 writes."""

    def load_state(self, path: str) -> None:
        """Restore the weights written by ``save_state`` (every rank of the group)."""


@runtime_checkable
class LanguageModelAgent(Protocol):
    """What a token sampler reads of the agent it samples for, beyond :class:`Agent` (the vLLM /
    SGLang engine bridge, ``corl.builtin.hf.engines``: the ``hf`` agent has all of it): the
    transformers model the trainer updates, its tokenizer (EOS and padding), the device it computes
    on, prompts encoded as the agent encodes them, and its weights by name to push to an engine."""

    name: str
    model: Any  # the trainable model (a transformers model: ``name_or_path`` / ``config`` say where it came from)
    tokenizer: Any  # pad and EOS tokens set; prompts are left-padded
    device: Any  # a torch.device

    def encode(self, prompts: Sequence[Any]) -> Any:
        """Token ids and attention mask of prompts (``Prompt`` objects or texts), left-padded, in the
        agent's own prompt format (chat template, few-shot template)."""

    def weights(self) -> Iterable[tuple[str, Any]]:
        """``(Hugging Face name, whole tensor)`` of every parameter, one at a time (for an engine's
        ``load_weights``)."""


@runtime_checkable
class WarmStartedAgent(Protocol):
    """An agent that may start from a supervised warm-up (the ``hf`` agent's ``warm_up`` keys): its
    record (base and warm-up fingerprints, settings; None when it had none) goes into the run's
    ``summary.json`` under ``warm_ups``."""

    warm_up: Mapping[str, Any] | None


@runtime_checkable
class Sampler(Protocol):
    """Draws completions from an agent's current policy."""

    def sample(self, agent: Agent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        """``n`` completions per prompt (``greedy``: argmax decoding), the batch a :class:`TokenBatch`
        with the sampling-time log-probs. Long loops call ``ctx.stop.check()`` between units of work
        (a batch, a decode step), so a Ctrl-C during an evaluation stops within seconds."""

    def sync(self, agent: Agent) -> None:
        """Make the next ``sample`` use the agent's latest weights (a no-op when colocated)."""


@runtime_checkable
class Aggregator(Protocol):
    """Votes a prompt's answers into a pseudo-label.

    ``votes[p]`` are the votes on prompt ``p`` of the agents in ``context.voters`` (each vote names
    its agent); ``context`` (:class:`corl.types.VoteContext`) says what the labels are for: an agent's
    own labels in a training step, a pool of several agents' votes a router asked for, or an
    evaluation's maj@k. Return one :class:`~corl.types.PseudoLabel` per prompt; its ``answer`` may be
    None (no answer, a tie declined, a confidence gate). The run checks what comes back.

    ``context`` is always passed. An aggregator that learns across agents and steps implements :class:`CohortAggregator`; one with state implements :class:`Stateful`."""

    def aggregate(self, votes: Sequence[Sequence[Vote]], verifier: AnswerVerifier,
                  context: VoteContext) -> list[PseudoLabel]: ...


@runtime_checkable
class CohortAggregator(Aggregator, Protocol):
    """An aggregator that sees the whole cohort before it labels anything: in every training step
    the run calls :meth:`observe` once, with every agent's votes on the step's prompts, and only then
    asks for labels. A label-free reliability estimate (which agents' votes to trust, learned from
    their agreement across prompts and steps) lives here. Evaluations never call ``observe``."""

    def observe(self, cohort: Mapping[str, Sequence[Sequence[Vote]]], verifier: AnswerVerifier,
                step: int) -> Mapping[str, Mapping[str, float]]:
        """Update the aggregator's state from ``cohort[agent][p][s]``; return numbers to log for the
        step, per agent (``{"llama": {"reliability": 0.8}}``: logged as ``train/llama/reliability``)."""


@runtime_checkable
class Stateful(Protocol):
    """A component (an aggregator, a router, a shaping term) whose state a checkpoint must keep: the
    run saves it beside the agents' and restores it on resume, so a resumed run equals an
    uninterrupted one bit for bit. Write plain files (JSON, safetensors) under ``path``."""

    def save_state(self, path: str) -> None: ...

    def load_state(self, path: str) -> None: ...


@runtime_checkable
class RewardRouter(Protocol):
    """Decides whose pseudo-label rewards whom. A router that declares ``supervised = True``
    (:class:`corl.traits.RouterTraits`) receives ground truth, in a run declared supervised; a label-free one
    is never handed it."""

    def route(
        self,
        votes: Mapping[str, Sequence[Sequence[Vote]]],
        labels: Mapping[str, Sequence[PseudoLabel]],
        verifier: AnswerVerifier,
        aggregator: Aggregator,
        truth: Sequence[Any] | None = None,
    ) -> Mapping[str, Sequence[Sequence[float]]] | Routed:
        """Rewards per agent, prompt and completion (``rewards[agent][p][s]``, usually 0 or 1), or a
        :class:`~corl.types.Routed` with them and, per agent, the labels it was rewarded against, the
        prompts it skips (no update on them) and extra metrics. To pool votes, call
        ``aggregator.aggregate(pooled, verifier, VoteContext("pooled", voters, rewarded=agent))`` (the run's
        aggregator fills in the step)."""


@runtime_checkable
class RewardShaping(Protocol):
    """An extra reward term beside the peer reward (a format reward, a length penalty), as TRL's
    ``reward_funcs`` and verl's custom rewards are. The run adds ``weight`` times each term's
    value to the router's reward of every completion; the peer reward stays the label-free core.

    A term that reads ground truth declares ``needs_labels = True`` (:class:`corl.traits.ShapingTraits`): a
    label-free recipe refuses it at validation, and only a term that declares it is handed ``truth``.
    Like a router, a term must not read ``Prompt.label`` itself."""

    def score(self, rollout: Rollout, answers: Sequence[Sequence[Hashable | None]], verifier: AnswerVerifier,
              truth: Sequence[Any] | None = None) -> list[list[float]]:
        """One finite number per completion, ``values[p][s]`` for ``rollout.texts[p][s]``;
        ``answers[p][s]`` is the answer the task's verifier extracted (None: none)."""


@runtime_checkable
class Optimizer(Protocol):
    """Updates one agent (bound at construction, ``ctx.agent``) from its rollout and per-completion
    rewards. It reads the rollout's :class:`TokenBatch` and scores it with the agent's
    ``token_logprobs``; a KL reference is asked for in the factory (``agent.freeze_reference()``).

    ``rewards[p]`` covers the first ``len(rewards[p])`` samples of prompt ``p``: the ``n_train``
    trained samples out of the rollout's ``n_votes`` (rows ``p * rollout.n + s`` of the batch). A
    prompt a router skipped is not in the rollout the optimizer gets; with every prompt skipped,
    ``step`` is not called.

    The metrics ``step`` returns go to every log under their names. The host reads these by name:

    * ``nonfinite`` (1.0: the update was skipped for a non-finite loss or gradient; the run counts
      consecutive ones and stops after ``run.max_nonfinite``);
    * ``entropy`` (mean token entropy of the trained samples: the health check warns when it stays
      under 0.02, a collapsed policy);
    * ``optimizer_reward_std`` (the spread of the rewards it trained on, its own terms added, e.g. an
      overlong penalty): when present, the collapse warning reads it instead of the router's
      ``reward_std``, and says which it measured;
    * ``active_fraction`` (share of trained samples with a learning signal), ``loss``, ``kl``,
      ``grad_norm``, ``clip_frac``, ``lr``: plotted by ``corl report`` when present.

    Any other name is logged as it is."""

    def step(self, rollout: Rollout, rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        """One update. A non-finite loss or gradient must skip the update and report
        ``nonfinite = 1.0`` in the returned metrics (the run counts and acts on it). Return only
        what was measured: a metric the step did not measure (no loss or entropy when no sample
        went through the update, no gradient norm when no optimizer step was taken) is left out,
        never reported as 0, so logs and health checks do not read a collapse that never happened."""

    def save_state(self, path: str) -> None:
        """Write the optimizer's state (moments, step counts) for a checkpoint (every rank of the
        agent's group, as :meth:`Agent.save_state`)."""

    def load_state(self, path: str) -> None:
        """Restore the state written by ``save_state``."""


#: the protocol each component kind must satisfy (observers are hook plugins instead)
PROTOCOLS: dict[str, type] = {"task": Task, "agent": Agent, "sampler": Sampler, "aggregator": Aggregator,
                              "router": RewardRouter, "optimizer": Optimizer, "shaping": RewardShaping}


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (what a one-line error should name)."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base.__module__ in ("typing", "builtins") or not getattr(base, "_is_protocol", False):
            continue
        names |= {n for n in (*vars(base), *getattr(base, "__annotations__", {})) if not n.startswith("_")}
    return sorted(n for n in names if not hasattr(obj, n))
