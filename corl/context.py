"""What a component's factory and a hook are handed: the :class:`Context` (the recipe as a
:class:`SpecView`, the task, the agent it serves, its :class:`GroupView` of ranks, the stop token,
what to release), the :class:`RegistryView` a plugin registers through, and the :class:`RunView`
hooks see a run through, never the run object itself.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from corl.errors import Stopping
from corl.protocols import Agent, Optimizer, Sampler, Task

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
    """An agent's ranks as its agent and optimizer see them (``ctx.group``): :class:`OneRank`
    on one rank, a process group over several (``corl.runtime.groups``), with the device mesh a
    sharding engine shards the agent over (see :class:`OneRank` for each member)."""

    @property
    def size(self) -> int: ...

    @property
    def rank(self) -> int: ...

    def sum(self, values: Sequence[float]) -> list[float]: ...

    def max(self, values: Sequence[float]) -> list[float]: ...

    def mesh(self, device_type: str) -> Any: ...


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


@attrs.frozen
class Context:
    """What a component factory may draw on: injected by the run, never looked up globally.

    Every factory is called as ``factory(config, ctx)``. ``spec`` is the validated recipe
    (:class:`SpecView`; None only for a context built by hand outside a run). ``agent`` is set for
    samplers and optimizers (the agent they serve); ``task`` once the task is built. ``group`` is
    the agent's ranks (:class:`GroupView`), with the device mesh a sharding engine shards the agent
    over. ``log`` writes one message of the run (:mod:`corl.logs`). ``stop`` is polled by long
    loops (:class:`StopToken`). A component that holds something to release (an
    engine's processes) registers it with :meth:`on_close`; the run calls it when it ends, whether
    it finished, failed or was stopped. A component that wraps another registered one (a sampler
    around the built-in ``hf``) builds it with :meth:`build`.
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
    builder: Callable[[str, str, Any, Context], Any] | None = attrs.field(default=None, eq=False, repr=False)

    def build(self, kind: str, name: str, config: Any = None) -> Any:
        """Build the registered component ``kind`` named ``name`` (``"sampler"``, ``"hf"``; a
        qualified ``"corl:hf"`` works too) with this context, as the run would build it from a
        recipe table: ``config`` is an instance of its config class, a mapping of its recipe keys
        (validated as a recipe's are), or None for its defaults. What is built is checked against
        its kind's protocol; a mistake in building it is one line naming the component that asked
        (the wrapper) and the one it wrapped. The wrapper answers for it from then on: the run
        names the wrapper for whatever the wrapped component does wrong."""
        if self.builder is None:
            raise RuntimeError(f"ctx.build({kind!r}, {name!r}): this context was built outside a run; "
                               "corl.testing.context() gives one that builds")
        return self.builder(kind, name, config, self)

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
# What a plugin registers through, and what hooks see of a run


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
    (the host's :class:`corl.registry.Registry` is one). A name may not hold ``:`` (a recipe can always
    write ``<distribution>:<name>``); one the plugin registers twice, an unknown kind, a non-attrs
    config class or a wrongly typed trait is a ``PluginError`` naming the plugin. A name a built-in or
    another distribution also registers keeps both, and the bare name becomes ambiguous."""

    def add(self, kind: str, name: str, factory: Callable[..., Any], config_cls: type, help: str = "") -> None:
        """Register ``factory`` (called as ``factory(config, ctx)``) as the ``kind`` named ``name``;
        ``config_cls`` is its frozen attrs config class (its fields are the recipe keys); ``help`` is
        the one line ``corl plugins`` shows. Traits are read off ``factory`` now (:func:`corl.traits.traits`)."""

    def add_fact(self, name: str, compute: Callable[[], Any]) -> None:
        """A fact ``corl env`` reports (``compute()`` returns JSON-able data; called only by ``corl env``)."""

    def add_section(self, name: str, config_cls: type, help: str = "") -> None:
        """Declare a top-level recipe section ``[name]`` validated against ``config_cls`` (its
        defaults apply when a recipe leaves it out); components read it as ``ctx.section(name)``."""
