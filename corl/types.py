"""Plain data that flows through a Co-RL step: prompts, votes, pseudo-labels, rollouts and the token
batch they carry, what a router and a step decide. The bottom of the contract: it imports nothing
else of corl, and no torch."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs


@attrs.frozen
class NoConfig:
    """The config class of a component that has no options."""


@attrs.frozen
class Prompt:
    """One task prompt. ``label`` is the hidden ground truth (None when the data has none).

    The run keeps labels aside for monitoring and evaluation; a label-free router never sees them.
    ``test_inputs``: inputs a code task runs each program on (its label is then the expected
    outputs on them); ``solution``: a reference completion, the warm-start target where the label
    is not the text to write (a program, not its outputs).
    ``images`` (PIL images or image file paths) go with the text to a vision-language agent
    (``corl.builtin.hf.vision``); text tasks leave it empty. ``origin`` says where the prompt came
    from, for messages (a data file and line, ``data/train.jsonl:17``); None: its id says it.
    ``messages``: a conversational row's own turns, ``(role, content)`` pairs up to its last user
    turn (system turns kept), which a chat-format agent renders with its chat template as they are
    (as TRL does); ``text`` is then that conversation flattened (system turns, then the last user
    turn), for agents without a chat template. Empty for a plain-text prompt.
    """

    id: str
    text: str
    label: Any = None
    test_inputs: tuple[Any, ...] = ()
    solution: str | None = None
    images: tuple[Any, ...] = ()
    origin: str | None = attrs.field(default=None, eq=False)
    messages: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Vote:
    """One completion's say in a vote: its extracted answer (None = no answer), who cast it and
    how confident the sampler was (mean token log-prob)."""

    answer: Hashable | None
    agent: str
    confidence: float = 0.0


@attrs.frozen
class PseudoLabel:
    """The result of a vote over one prompt's answers. ``answer`` is None when nobody answered,
    on a tie the aggregator declines to break, or when a confidence gate withholds the label."""

    answer: Hashable | None
    share: float  # the top answer's weight / total weight of valid votes (0 when nobody answered)
    counts: Mapping[Hashable, float]  # weight per answer group, keyed by each group's representative


@runtime_checkable
class TokenBatch(Protocol):
    """The token-level payload a sampler hands an optimizer (``Rollout.batch``): what was sampled,
    token by token, with the behaviour policy's log-probs. A sampler that trains an agent builds one;
    an optimizer reads these fields and nothing else of it; the agent that sampled it scores it again
    (:meth:`corl.protocols.Agent.token_logprobs`). The run itself only selects rows (:meth:`select`).

    Rows are prompt-major: row ``p * n + s`` is sample ``s`` of prompt ``p`` (``n`` = the rollout's
    samples per prompt), in the rollout's prompt order. Tensors are ``[R, T]``, ``T`` the longest
    completion; the built-in hf batch also carries the prompt tokens its agent reads."""

    completion_ids: Any  # [R, T] int64: the sampled tokens, padding after each row's end
    completion_mask: Any  # [R, T]: 1 on a row's own tokens, up to and including the EOS (or stop token) that ended it
    old_logprobs: Any  # [R, T] float32: sampling-time log-probs of completion_ids at `temperature` (0 outside the mask)
    temperature: float  # the temperature the tokens were drawn at; token_logprobs recomputes at it (ratio 1 on-policy)
    truncated: Any  # [R] bool: the row reached max_new_tokens without an EOS or stop token (cut off, not ended)
    max_new_tokens: int  # the sampler's cap on a row's completion tokens (an overlong penalty reads it)

    def select(self, rows: Sequence[int]) -> TokenBatch:
        """The batch of these rows, in this order (the run drops prompts a router skipped)."""


@attrs.frozen
class Rollout:
    """An agent's samples for a batch of prompts, prompt-major: ``texts[p][s]``.

    ``batch`` is the token-level payload the agent and its optimizer read, a :class:`TokenBatch`
    (token ids, mask, sampling-time log-probs; rows prompt-major, ``p * n + s``); the run only
    selects its rows (:meth:`select`). None for a sampler that trains nothing (a frozen judge's).
    """

    agent: str
    prompts: tuple[Prompt, ...]
    texts: tuple[tuple[str, ...], ...]
    lengths: tuple[tuple[int, ...], ...]  # completion tokens, EOS included
    confidences: tuple[tuple[float, ...], ...]  # mean sampling-time log-prob per completion
    batch: TokenBatch | None = None

    @property
    def n(self) -> int:
        return len(self.texts[0]) if self.texts else 0

    def select(self, prompts: Sequence[int]) -> Rollout:
        """The rollout of these prompts (their indices, in this order), every sample of each."""
        n = self.n
        rows = [p * n + s for p in prompts for s in range(n)]
        pick = lambda grid: tuple(grid[p] for p in prompts)
        return Rollout(agent=self.agent, prompts=pick(self.prompts), texts=pick(self.texts), lengths=pick(self.lengths),
                       confidences=pick(self.confidences), batch=None if self.batch is None else self.batch.select(rows))


#: why an aggregator is asked for pseudo-labels (VoteContext.purpose)
LABEL, POOLED, EVAL = "label", "pooled", "eval"


@attrs.frozen
class VoteContext:
    """The call an aggregation serves (the third argument of ``Aggregator.aggregate``).

    ``purpose``: ``"label"``, one agent's own pseudo-labels in a training step (what routers hand
    out); ``"pooled"``, several agents' votes pooled into one label by a router (``rewarded``: the
    agent that label will reward); ``"eval"``, an evaluation's maj@k of one agent, which must not
    change the aggregator's state. ``voters``: the agents whose votes are in the call. ``step``: the
    training step (0 before the first one)."""

    purpose: str
    voters: tuple[str, ...] = ()
    rewarded: str | None = None
    step: int = 0


@attrs.frozen
class Routed:
    """What a router may return instead of a plain ``{agent: rewards[p][s]}``.

    ``rewards[agent][p][s]`` as always. ``targets[agent][p]``: the pseudo-label agent was rewarded
    against on prompt ``p`` (None: several, or none), so ``label_share`` and ``label_accuracy`` describe
    the label it was paid by; an agent left out is taken to be rewarded by its own labels.
    ``skipped[agent][p]``: True where the router withholds judgement on purpose (a confidence gate):
    that prompt is left out of the agent's update and of its reward statistics, so deliberate gating
    never reads as a collapse. ``metrics[agent]``: extra numbers to log for that agent."""

    rewards: Mapping[str, Sequence[Sequence[float]]]
    targets: Mapping[str, Sequence[PseudoLabel | None]] = attrs.field(factory=dict)
    skipped: Mapping[str, Sequence[bool]] = attrs.field(factory=dict)
    metrics: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)


@attrs.frozen
class Completion:
    """One logged completion (``samples.jsonl``, tensorboard text, trackers' tables): what the model
    wrote, the answer extracted from it, the label it was scored against and what it got. In a
    training step ``label`` is the pseudo-label the agent was rewarded against and ``reward`` its
    reward; in an evaluation ``label`` is the agent's maj@k and ``reward`` is None. ``truth`` is the
    hidden label (monitoring only; None where the data has none)."""

    agent: str
    step: int
    kind: str  # "train" or "eval"
    prompt_id: str
    prompt: str
    completion: str
    answer: Any
    label: Any
    reward: float | None
    truth: Any = None

    def to_json(self) -> dict[str, Any]:
        show = lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else repr(v)
        return {"kind": self.kind, "step": self.step, "agent": self.agent, "prompt_id": self.prompt_id,
                "prompt": self.prompt, "completion": self.completion, "answer": show(self.answer),
                "label": show(self.label), "reward": self.reward, "truth": show(self.truth)}


@attrs.frozen
class StepOutcome:
    """What a training step decided, for observers (``corl_on_step_end``'s ``outcome``): each
    agent's votes and own pseudo-labels, the labels it was rewarded against (``targets``), its peer
    rewards (``rewards[agent][p][s]``, every voting sample), the prompts its router skipped, and a
    bounded sample of completions (``run.log_completions`` per agent). ``prompts`` carry their hidden
    labels: observers monitor, they never route."""

    prompts: tuple[Prompt, ...]
    votes: Mapping[str, Sequence[Sequence[Vote]]]
    labels: Mapping[str, Sequence[PseudoLabel]]
    targets: Mapping[str, Sequence[PseudoLabel | None]]
    rewards: Mapping[str, Sequence[Sequence[float]]]
    skipped: Mapping[str, Sequence[bool]]
    samples: tuple[Completion, ...] = ()


@attrs.frozen
class StepMetrics:
    """Metrics of one step: ``agents[name][metric] = value`` plus run-level values."""

    step: int
    agents: Mapping[str, Mapping[str, float]]
    seconds: float
