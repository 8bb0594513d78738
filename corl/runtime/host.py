"""What the runtime's helpers read off their run, typed, so a reader sees what they use and a test
can hand them something smaller than a whole :class:`~corl.runtime.loop.Run`: :class:`StepHost` for
one training step's stages (:mod:`corl.runtime.step`) and shaping (:mod:`corl.runtime.shaping`),
:class:`RunHost` for the life cycle's (evaluation, snapshots, the folder, interrupts, the summary)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from corl.context import StopToken
    from corl.protocols import RewardRouter, Task
    from corl.recipe import RunSpec
    from corl.runtime.aggregation import BoundAggregator
    from corl.runtime.build import AgentSlot, ShapingSlot
    from corl.runtime.distributed import Layout
    from corl.runtime.rng import AgentStreams
    from corl.runtime.state import RunState
    from corl.runtime.verify import BoundedVerifier
    from corl.types import Completion, Prompt


class StepHost(Protocol):
    """A built run, as one step sees it (:class:`~corl.runtime.loop.Run` is one)."""

    spec: RunSpec
    layout: Layout
    state: RunState  # the data order, the history, health streaks
    train: list[Prompt]  # the prompts steps draw from
    agents: list[AgentSlot]  # the agents this process holds
    verifier: BoundedVerifier
    aggregator: BoundAggregator
    router: RewardRouter
    shaping: list[ShapingSlot]  # [[shaping]] terms

    @property
    def checkpoint_root(self) -> Path: ...

    def stream(self, name: str) -> AbstractContextManager[Any]:
        """Agent ``name``'s own RNG stream, for what it draws."""

    def who(self, kind: str, agent: str = "") -> str:
        """How messages name a component (kind, type, plugin)."""

    def warn(self, message: str) -> None: ...

    def notify(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call a hook on every plugin with the run's view."""


class RunHost(StepHost, Protocol):
    """A built run as the life cycle's helpers see it (:class:`~corl.runtime.loop.Run` is one)."""

    task: Task
    eval_prompts: list[Prompt]  # the held-out prompts evaluations score
    eval_samples: dict[int, tuple[Completion, ...]]  # step -> logged completions
    observers: list[tuple[str, Any]]  # (name, observer) attached to this process
    streams: AgentStreams  # every agent's RNG streams
    output_dir: Path
    resume: bool
    resume_from: str | None
    force: bool
    stop: StopToken  # SIGINT / SIGTERM
    stop_reason: str | None  # set by an early stop
    stopped_at: int | None
    phase: str  # where the run is, for messages ("during step 3")
    completed: int  # steps done
    checkpointed_step: int  # the last step saved (-1: none)

    @property
    def evals(self) -> dict[int, dict[str, dict[str, float]]]: ...

    @property
    def warnings(self) -> list[str]: ...

    def log(self, message: str) -> None: ...

    def checkpoint(self, step: int) -> Path: ...
