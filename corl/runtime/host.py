"""What one training step reads off its run: the host the step's stages (:mod:`corl.runtime.step`)
and shaping (:mod:`corl.runtime.shaping`) receive, typed, so a reader sees what they use and a
test can hand them something smaller than a whole :class:`~corl.runtime.loop.Run`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from corl.protocols import RewardRouter
    from corl.recipe import RunSpec
    from corl.runtime.aggregation import BoundAggregator
    from corl.runtime.build import AgentSlot, ShapingSlot
    from corl.runtime.distributed import Layout
    from corl.runtime.state import RunState
    from corl.runtime.verify import BoundedVerifier
    from corl.types import Prompt


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
