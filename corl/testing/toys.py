"""Stand-ins for calling a component or an observer by hand, outside a run: :class:`ToyAgent`, an
agent whose token log-probs are its own parameters, and :func:`run_view`, the run as a hook sees it
(:class:`corl.context.RunView`), with the stops an observer asks for recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl.context import AgentView, LayoutView, SpecView
from corl.recipe.schema import RunSection


class ToyAgent:
    """An agent whose every completion token's log-prob is its own parameter ``theta[row, t]`` (all
    0 at first): an optimizer's gradient on it shows exactly how each token was weighted. Its state
    is ``theta``, written and read back as a checkpoint does, so an observer that restores weights
    (a roll-back) can be tested on it. ``reference=True`` reads the copy ``freeze_reference`` kept."""

    def __init__(self, rows: int = 1, width: int = 1, name: str = "toy"):
        import torch

        self.name = name
        self.theta = torch.zeros(rows, width, requires_grad=True)
        self.reference = None

    def parameters(self) -> list[Any]:
        return [self.theta]

    def token_logprobs(self, batch: Any, rows: Any, *, reference: bool = False) -> tuple[Any, Any]:
        import torch

        theta = self.theta if not reference or self.reference is None else self.reference
        return theta[rows], torch.zeros(len(rows), theta.shape[1])

    def freeze_reference(self) -> None:
        self.reference = self.theta.detach().clone()

    def save(self, path: str) -> None:
        self.save_state(path)

    def save_state(self, path: str) -> None:
        from safetensors.torch import save_file

        Path(path).mkdir(parents=True, exist_ok=True)
        save_file({"theta": self.theta.detach().contiguous()}, str(Path(path) / "model.safetensors"))

    def load_state(self, path: str) -> None:
        import torch
        from safetensors.torch import load_file

        with torch.no_grad():  # the same parameter: an optimizer built before the restore keeps holding it
            self.theta.copy_(load_file(str(Path(path) / "model.safetensors"))["theta"])


@attrs.frozen
class ToyAgentView:
    """One agent of a :func:`run_view` (:class:`corl.context.AgentView`); ``optimizer`` None: frozen."""

    name: str
    agent: Any
    sampler: Any = None
    optimizer: Any = None


@attrs.frozen
class _AgentSettings:
    name: str
    frozen: bool


@attrs.frozen
class _Spec:
    run: RunSection
    agents: tuple[_AgentSettings, ...]
    sections: Mapping[str, Any] = attrs.field(factory=dict)
    source: str = "<recipe>"

    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]


class _OneProcess:
    """A :class:`corl.context.LayoutView` of one process: it holds, leads and writes for every agent."""

    rank, is_writer = 0, True

    def leads(self, name: str) -> bool:
        return True


@attrs.define
class ToyRunView:
    """A :class:`corl.context.RunView` built by :func:`run_view`; ``stops`` holds the reasons
    ``request_stop`` was called with, in order."""

    spec: SpecView
    output_dir: Path
    start_step: int = 0
    agents: tuple[AgentView, ...] = ()
    layout: LayoutView = attrs.field(factory=_OneProcess)
    evals: dict[int, dict[str, dict[str, float]]] = attrs.field(factory=dict)
    warnings: list[str] = attrs.field(factory=list)
    stops: list[str] = attrs.field(factory=list)

    def request_stop(self, reason: str) -> None:
        self.stops.append(reason)


def run_view(output_dir: str | Path = ".", *, agents: Sequence[AgentView] = (), start_step: int = 0,
             sections: Mapping[str, Any] | None = None, **run: Any) -> ToyRunView:
    """The run an observer's hooks are handed, for calling them by hand
    (``obs.corl_on_step_end(run=view, step=1, metrics=...)``): its recipe's ``[run]`` table is the
    defaults changed by ``run`` (``name="t"``), its agents ``agents`` (:class:`ToyAgentView`, or
    any :class:`corl.context.AgentView`; one without an optimizer is frozen in the recipe too), one
    process. ``view.stops`` records what the observer asked to stop for."""
    spec = _Spec(RunSection(**run), tuple(_AgentSettings(a.name, a.optimizer is None) for a in agents),
                 dict(sections or {}))
    return ToyRunView(spec, Path(output_dir), start_step, tuple(agents))
