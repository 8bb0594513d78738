"""The component contract. Every kind is a small Protocol; a run talks to components only
through these. Implementations are plain classes built from one frozen attrs config class.

Optional capabilities are declared here too, never probed ad hoc: a component states its *traits*
as class attributes of its factory (a router's ``supervised`` / ``min_agents`` / ``check``, an
observer's ``every_rank``, a verifier's ``bounded``, a task's ``missing_split``, an agent's
``check``, a shaping term's ``needs_labels``), read once by :func:`traits` into the frozen
classes below; a verifier that extracts whole batches implements :class:`BatchVerifier`. A factory
is handed a :class:`Context` (the recipe as a :class:`SpecView`, the task, the agent it serves, its
:class:`GroupView` of ranks); a plugin registers through a :class:`RegistryView`. Hooks see a run
through :class:`RunView`, not the run object itself.

(Over 300 lines: the whole contract a plugin author reads, in one file.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from corl.types import Closers, OneRank, Prompt, PseudoLabel, Rollout, Routed, StopToken, Vote, VoteContext


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
class TokenBatch(Protocol):
    """The token-level payload a sampler hands an optimizer (``Rollout.batch``): what was sampled,
    token by token, with the behaviour policy's log-probs. A sampler that trains an agent builds one;
    an optimizer reads these fields and nothing else of it; the agent that sampled it scores it again
    (:meth:`Agent.token_logprobs`). The run itself only selects rows (:meth:`select`).

    Rows are prompt-major: row ``p * n + s`` is sample ``s`` of prompt ``p`` (``n`` = the rollout's
    samples per prompt), in the rollout's prompt order. Tensors are ``[R, T]``, ``T`` the longest
    completion; the built-in hf batch also carries the prompt tokens its agent reads."""

    completion_ids: Any  # [R, T] int64: the sampled tokens, padding after each row's end
    completion_mask: Any  # [R, T]: 1 on a row's own tokens, up to and including the EOS (or stop token) that ended it
    old_logprobs: Any  # [R, T] float32: sampling-time log-probs of completion_ids at `temperature` (0 outside the mask)
    temperature: float  # the temperature the tokens were drawn at; token_logprobs recomputes at it (ratio 1 on-policy)

    def select(self, rows: Sequence[int]) -> TokenBatch:
        """The batch of these rows, in this order (the run drops prompts a router skipped)."""


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
    read more of their agent (:class:`LanguageModelAgent`)."""

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
class LanguageModelAgent(Agent, Protocol):
    """The surface token samplers use (the ``hf`` sampler, the vLLM / SGLang engine bridge): a model,
    its tokenizer, where it computes, how prompts become token ids, and its weights by name."""

    model: Any  # the trainable model (a transformers PreTrainedModel for hf agents)
    tokenizer: Any  # pad and EOS tokens set; prompts are left-padded
    device: Any  # a torch.device

    def encode(self, prompts: Sequence[Any]) -> Any:
        """Token ids and attention mask of prompts (``Prompt`` objects or texts), left-padded, in the
        agent's own prompt format (chat template, few-shot template)."""

    def weights(self) -> Iterable[tuple[str, Any]]:
        """``(Hugging Face name, whole tensor)`` of every parameter, one at a time (for an engine)."""


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

    Aggregators written against the first API, ``aggregate(votes, verifier)``, still work (with a
    DeprecationWarning): the run wraps them. An aggregator that learns across agents and steps
    implements :class:`CohortAggregator`; one with state implements :class:`Stateful`."""

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
    (:class:`RouterTraits`) receives ground truth, in a run declared supervised; a label-free one
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
        ``aggregator.aggregate(pooled, verifier, VoteContext("pooled", voters, rewarded=agent, step=...))``
        (the context may be left out: the run's aggregator then assumes a pool)."""


@runtime_checkable
class RewardShaping(Protocol):
    """An extra reward term beside the peer reward (a format reward, a length penalty), as TRL's
    ``reward_funcs`` and verl's custom rewards are. The run adds ``weight`` times each term's
    value to the router's reward of every completion; the peer reward stays the label-free core.

    A term that reads ground truth declares ``needs_labels = True`` (:class:`ShapingTraits`): a
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


# ---------------------------------------------------------------------------------------------
# Traits: optional capabilities, declared as class attributes of a component's factory


@attrs.frozen
class RouterTraits:
    """``supervised``: the router reads ground-truth labels (a supervised baseline; the recipe must
    declare ``run.supervised = true``, and only then is it handed the labels). ``min_agents``: the
    fewest agents it can route between. ``check(config, agents)``: the router's own cross-checks of
    a validated recipe's agents, returning one message per problem; ``config`` is its recipe table,
    or for a router object handed to ``corl.run`` its ``config`` attribute (a router that declares
    ``check`` keeps its config there)."""

    supervised: bool = False
    min_agents: int = 1
    check: Callable[[Any, Sequence[Any]], Iterable[str]] | None = None


@attrs.frozen
class TaskTraits:
    """``missing_split(config, split)``: None when a task built from ``config`` will hold prompts in
    ``split``, else what to set so that it does (e.g. ``'task.seed = "FILE"'``), read at validation
    by components that need a split (a zoo model warm-starts on the labeled ``seed`` split).
    ``check_data(config, source, rows)``: open the task's data (relative paths against ``source``,
    the recipe file) and read at most ``rows`` rows of each file, returning one line per problem,
    worded as building the task would word it (``corl validate``); it imports no torch and loads
    no model."""

    missing_split: Callable[[Any, str], str | None] | None = None
    check_data: Callable[[Any, str, int], Sequence[str]] | None = None


@attrs.frozen
class RecipeFacts:
    """What an agent's validation cross-check (:class:`AgentTraits`) sees of the rest of the recipe:
    ``missing_split(split)`` is the task's :class:`TaskTraits` answer for its config (always None
    when the task declares nothing); ``sections`` are the validated plugin sections (``[zoo]``)."""

    task_type: str
    missing_split: Callable[[str], str | None]
    sections: Mapping[str, Any]


@attrs.frozen
class ModelFacts:
    """What an agent's config says about its model (:class:`AgentTraits` ``describe``), so that the
    host never reads an agent type's own keys: ``model``, what it loads, for messages
    (``"zoo:llama-tiny"``, a folder; ``""`` when it names none), and ``device``, where its weights
    live (``"cpu"``, ``"cuda"``, ``"cuda:1"``): the ranks of an agent on a CUDA device reduce over
    NCCL, others over gloo."""

    model: str = ""
    device: str = "cpu"


@attrs.frozen
class AgentTraits:
    """``check(config, facts)``: the agent's own cross-checks of a validated recipe
    (:class:`RecipeFacts`), yielding ``(key, message)`` pairs, the key relative to the agent's table
    (``("model", "zoo:llama-tiny needs a labeled seed split ...")``). ``preview(config, ctx, prompts)``:
    the exact strings the agent would tokenize for ``prompts`` (its chat template applied), from its
    tokenizer alone, no model weights loaded (``corl data preview``; ``ctx`` as for the factory).
    ``describe(config)``: its :class:`ModelFacts` (``corl validate``, ``corl eval`` and placement
    read them; an agent that declares none shows its type and is placed as a CPU agent).
    ``model_key``: the key of the agent's table that names what it loads (the hf agents':
    ``"model"``), which ``corl eval`` sets to a run's exported weights (``checkpoints/final/NAME``,
    what ``Agent.save`` wrote) or to ``--model NAME=MODEL``; ``""``: it names none, and is evaluated
    as its recipe builds it."""

    check: Callable[[Any, RecipeFacts], Iterable[tuple[str, str]]] | None = None
    preview: Callable[[Any, Any, Sequence[Any]], Sequence[str]] | None = None
    describe: Callable[[Any], ModelFacts] | None = None
    model_key: str = ""


@attrs.frozen
class ObserverTraits:
    """``every_rank``: in a several-process run, attach the observer on every rank (the final
    export, the early stop), not only on the rank that writes the run's files."""

    every_rank: bool = False


@attrs.frozen
class VerifierTraits:
    """``bounded``: fast by construction (a regex over a short string, or a sandbox with its own
    limits), so the run puts no time bound around its calls."""

    bounded: bool = False


@attrs.frozen
class ShapingTraits:
    """``needs_labels``: the term reads ground-truth labels (``truth``), so only a run declared
    supervised may use it; a label-free recipe that names it is refused at validation."""

    needs_labels: bool = False


#: the protocol each component kind must satisfy (observers are hook plugins instead)
PROTOCOLS: dict[str, type] = {}  # filled below, once every protocol is defined

TRAITS: dict[str, type] = {"router": RouterTraits, "observer": ObserverTraits, "verifier": VerifierTraits,
                           "task": TaskTraits, "agent": AgentTraits, "shaping": ShapingTraits}


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (what a one-line error should name)."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base.__module__ in ("typing", "builtins") or not getattr(base, "_is_protocol", False):
            continue
        names |= {n for n in (*vars(base), *getattr(base, "__annotations__", {})) if not n.startswith("_")}
    return sorted(n for n in names if not hasattr(obj, n))


def declared_config(factory: Any) -> type | None:
    """The attrs config class a factory named by import path declares as its ``Config`` class
    attribute (``type = "package.module:Factory"``); None when it declares none."""
    return getattr(factory, "Config", None)  # a declaration, read like the traits below


def traits(kind: str, declared_on: Any) -> Any:
    """The traits a factory (or a component object) declares for ``kind``, as a frozen instance of
    its traits class; undeclared ones take their defaults. Raises ``TypeError`` (one line, naming
    the attribute) when a declaration has the wrong type."""
    cls = TRAITS.get(kind)
    if cls is None:
        return None
    values = {}
    for field in attrs.fields(cls):
        if not hasattr(declared_on, field.name):
            continue
        value = getattr(declared_on, field.name)
        if field.default is None:  # a function the trait's docstring describes
            if value is not None and not callable(value):
                raise TypeError(f"{field.name} must be a function (see corl.protocols.{cls.__name__}), got {value!r}")
        elif type(value) is not type(field.default):  # bool is not int here: min_agents = True is a mistake
            raise TypeError(f"{field.name} must be {type(field.default).__name__}, got {value!r}")
        values[field.name] = value
    return cls(**values)


# ---------------------------------------------------------------------------------------------
# What a component's factory is handed: ``factory(config, ctx)``


@runtime_checkable
class RunSettings(Protocol):
    """The recipe's ``[run]`` table as components read it (``ctx.spec.run``)."""

    @property
    def name(self) -> str: ...

    @property
    def steps(self) -> int:
        """Training steps of the run (an lr schedule spans them)."""

    @property
    def seed(self) -> int: ...

    @property
    def prompts_per_step(self) -> int: ...

    @property
    def threads(self) -> int:
        """CPU threads the run uses (0: all cores)."""

    @property
    def supervised(self) -> bool: ...


@runtime_checkable
class AgentSettings(Protocol):
    """One ``[[agents]]`` entry as components read it (``ctx.spec.agents``)."""

    @property
    def name(self) -> str: ...

    @property
    def frozen(self) -> bool: ...


@runtime_checkable
class SpecView(Protocol):
    """The validated recipe as components and hooks read it (:class:`corl.recipe.RunSpec` is one):
    the ``[run]`` settings, the agents in recipe order, the plugin sections by name, and ``source``,
    the recipe file that relative data paths resolve against (``"<recipe>"`` for a table)."""

    @property
    def run(self) -> RunSettings: ...

    @property
    def agents(self) -> Sequence[AgentSettings]: ...

    @property
    def sections(self) -> Mapping[str, Any]: ...

    @property
    def source(self) -> str: ...


@runtime_checkable
class GroupView(Protocol):
    """An agent's ranks as its agent and optimizer see them (``ctx.group``): :class:`corl.types.OneRank`
    on one rank, a process group over several (``corl.runtime.groups``), with the device mesh a
    sharding engine shards the agent over (see :class:`~corl.types.OneRank` for each member)."""

    @property
    def size(self) -> int: ...

    @property
    def rank(self) -> int: ...

    def sum(self, values: Sequence[float]) -> list[float]: ...

    def max(self, values: Sequence[float]) -> list[float]: ...

    def mesh(self, device_type: str) -> Any: ...


@attrs.frozen
class Context:
    """What a component factory may draw on: injected by the run, never looked up globally.

    Every factory is called as ``factory(config, ctx)``. ``spec`` is the validated recipe
    (:class:`SpecView`; None only for a context built by hand outside a run). ``agent`` is set for
    samplers and optimizers (the agent they serve); ``task`` once the task is built. ``group`` is
    the agent's ranks (:class:`GroupView`), with the device mesh a sharding engine shards the agent
    over. ``log`` writes one message of the run (:mod:`corl.logs`). ``stop`` is polled by long
    loops (:class:`~corl.types.StopToken`). A component that holds something to release (an
    engine's processes) registers it with :meth:`on_close`; the run calls it when it ends, whether
    it finished, failed or was stopped.
    """

    spec: SpecView | None
    seed: int
    log: Callable[[str], None] = attrs.field(factory=lambda: logging.getLogger("corl").info)
    task: Task | None = None
    agent: Agent | None = None
    agent_name: str = ""
    group: GroupView = attrs.field(factory=OneRank)
    stop: StopToken = attrs.field(factory=StopToken)
    closers: Closers = attrs.field(factory=Closers, eq=False, repr=False)

    def on_close(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` once when the run ends (success, error or signal), the last registered first."""
        self.closers.add(fn)

    def section(self, name: str) -> Any:
        """The validated config of recipe section ``[name]`` that a plugin declared
        (``registry.add_section``), e.g. the hf backend's ``[zoo]``."""
        if self.spec is None:
            raise KeyError(f"section [{name}]: this context was built outside a run, with no recipe")
        return self.spec.sections[name]


# ---------------------------------------------------------------------------------------------
# What hooks see of a run


class AgentView(Protocol):
    """One agent this process holds, with what serves it (``optimizer`` is None when frozen)."""

    name: str
    agent: Agent
    sampler: Sampler
    optimizer: Optimizer | None


class LayoutView(Protocol):
    """Where agents run (one process, or ranks of a launch)."""

    rank: int
    is_writer: bool  # this process writes the run's files (rank 0)

    def leads(self, name: str) -> bool:
        """True on the first rank of agent ``name``'s group (it evaluates and exports the agent)."""


@runtime_checkable
class RunView(Protocol):
    """The run as hooks and observers see it: read-mostly. ``request_stop`` is the one action."""

    spec: SpecView  # the validated recipe (corl.recipe.RunSpec)
    output_dir: Path
    start_step: int  # 0, or the checkpoint's step when resumed
    agents: Sequence[AgentView]  # the agents this process holds
    layout: LayoutView
    evals: Mapping[int, Mapping[str, Mapping[str, float]]]  # step -> agent -> metric
    warnings: Sequence[str]

    def request_stop(self, reason: str) -> None:
        """End the run after the current step (an observer's early stop); it evaluates and ends as
        if that step were the last, and the summary records the step and ``reason``."""


@runtime_checkable
class RegistryView(Protocol):
    """What ``corl_register_components`` is handed: where a plugin adds its components and sections
    (the host's :class:`corl.plugins.Registry` is one). Registering the same kind and name twice,
    an unknown kind, a non-attrs config class or a wrongly typed trait is a ``PluginError`` naming
    the plugin."""

    def add(self, kind: str, name: str, factory: Callable[..., Any], config_cls: type, help: str = "") -> None:
        """Register ``factory`` (called as ``factory(config, ctx)``) as the ``kind`` named ``name``;
        ``config_cls`` is its frozen attrs config class (its fields are the recipe keys); ``help`` is
        the one line ``corl plugins`` shows. Traits are read off ``factory`` now (:func:`traits`)."""

    def add_section(self, name: str, config_cls: type, help: str = "") -> None:
        """Declare a top-level recipe section ``[name]`` validated against ``config_cls`` (its
        defaults apply when a recipe leaves it out); components read it as ``ctx.section(name)``."""


PROTOCOLS.update(task=Task, agent=Agent, sampler=Sampler, aggregator=Aggregator, router=RewardRouter,
                 optimizer=Optimizer, shaping=RewardShaping)
