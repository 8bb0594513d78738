"""Plain data that flows through a Co-RL step, and the run-side objects a component's context holds
(its group of ranks, the stop token, what to release). No torch here: this is the contract."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from corl.errors import Stopping


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


@attrs.frozen
class Rollout:
    """An agent's samples for a batch of prompts, prompt-major: ``texts[p][s]``.

    ``batch`` is the token-level payload the agent and its optimizer read, a
    :class:`corl.protocols.TokenBatch` (token ids, mask, sampling-time log-probs; rows prompt-major,
    ``p * n + s``); the run only selects its rows (:meth:`select`).
    """

    agent: str
    prompts: tuple[Prompt, ...]
    texts: tuple[tuple[str, ...], ...]
    lengths: tuple[tuple[int, ...], ...]  # completion tokens, EOS included
    confidences: tuple[tuple[float, ...], ...]  # mean sampling-time log-prob per completion
    batch: Any = None  # a corl.protocols.TokenBatch (types imports nothing of the contract)

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

    # Until 0.3: a built-in router's route() returned the plain {agent: rewards} mapping, and a
    # router that wraps one may still index its result; read .rewards instead.
    def _legacy(self) -> Mapping[str, Sequence[Sequence[float]]]:
        import warnings

        warnings.warn("a router's route() returns corl.Routed: read its .rewards (indexing it directly is "
                      "deprecated and goes in corl 0.3)", DeprecationWarning, stacklevel=3)
        return self.rewards

    def __getitem__(self, agent: str) -> Sequence[Sequence[float]]:
        return self._legacy()[agent]

    def __iter__(self) -> Iterator[str]:
        return iter(self._legacy())

    def __len__(self) -> int:
        return len(self._legacy())

    def keys(self):
        return self._legacy().keys()

    def items(self):
        return self._legacy().items()


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


class OneRank:
    """The ranks that hold an agent, as its agent and optimizer see them (``ctx.group``): here one,
    nothing to reduce. Several ranks get a real group from the run (corl.runtime.groups).

    An agent on several ranks is sharded by a sharding engine over :meth:`mesh` (the ``hf`` agent:
    PyTorch FSDP2), which reduces its gradients; the optimizer adds up token counts with :meth:`sum`
    and agrees on loop counts with :meth:`max` (a sharded model's forward and backward passes are
    collective: every rank of the group runs as many as the others)."""

    size = 1
    rank = 0  # this process's position in the group (0 writes the files the group shares)

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of small per-rank numbers over the group."""
        return [float(v) for v in values]

    def max(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum of small per-rank numbers over the group."""
        return [float(v) for v in values]

    def mesh(self, device_type: str) -> Any:
        """A torch ``DeviceMesh`` over the group's ranks for a sharding engine (``"cpu"`` or
        ``"cuda"``); None outside a run, which builds none."""
        return None


class StopToken:
    """How a run asks its components to stop early, on SIGINT or SIGTERM (``ctx.stop``).

    A component's long loops (a warm-start's steps, a sampler's batches and decode steps) call
    :meth:`check` between units of work. While the run is in work it can abandon (building its
    agents, an evaluation), a requested stop raises :class:`corl.errors.Stopping` there and the run
    saves its last completed step; elsewhere (a training step, a checkpoint write) ``check`` returns
    and the run stops at its next safe point. Components must let ``Stopping`` pass.
    """

    def __init__(self) -> None:
        self.signal: int | None = None  # the first signal asked for
        self.count = 0  # signals received
        self._abandonable = False

    def request(self, signum: int) -> None:
        """Ask for a stop (the run's signal handler calls this)."""
        self.count += 1
        if self.signal is None:
            self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def check(self) -> None:
        """Raise :class:`corl.errors.Stopping` if a stop was asked for and the work may be abandoned."""
        if self.signal is not None and self._abandonable:
            raise Stopping(self.signal)

    @contextlib.contextmanager
    def abandonable(self, allowed: bool = True) -> Iterator[None]:
        """The run's side: work in this block may be abandoned at a :meth:`check` (when ``allowed``)."""
        before, self._abandonable = self._abandonable, allowed
        try:
            yield
        finally:
            self._abandonable = before


class Closers:
    """What a run releases when it ends (:meth:`Context.on_close`): engine processes, open files."""

    def __init__(self) -> None:
        self._fns: list[Any] = []

    def add(self, fn: Any) -> None:
        self._fns.append(fn)

    def close(self, log: Any = None) -> None:
        """Call each function once, the last added first; one that raises is logged, not fatal: the
        others still run, and the error that ended the run (if any) stays the one reported."""
        while self._fns:
            fn = self._fns.pop()
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - releasing must not hide the run's own outcome
                (log or logging.getLogger("corl").warning)(f"while closing {getattr(fn, '__qualname__', fn)}: "
                                                           f"{type(exc).__name__}: {exc}")


def __getattr__(name: str) -> Any:
    """``corl.types.Context``, a deprecated name: the Context moved to :mod:`corl.protocols`, whose
    protocols type its fields. That module imports this one, so the old name is looked up lazily
    (an import here would be a cycle in the contract) and warns."""
    if name == "Context":
        import importlib
        import warnings

        warnings.warn("corl.types.Context moved to corl.protocols.Context; import corl.Context",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("corl.protocols").Context
    raise AttributeError(f"module 'corl.types' has no attribute {name!r}")
