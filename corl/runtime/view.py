"""What hooks see of a run: a read-mostly view (:class:`corl.context.RunView`), not the run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any


class RunView:
    """The run's recipe, output folder, agents, layout, evaluations and warnings, and one action:
    :meth:`request_stop`. Observers read through it and never reach the run's internals."""

    def __init__(self, run: Any):
        self._run = run

    @property
    def spec(self) -> Any:
        return self._run.spec

    @property
    def output_dir(self) -> Path:
        return self._run.output_dir

    @property
    def start_step(self) -> int:
        return self._run.start_step

    @property
    def agents(self) -> Sequence[Any]:
        return tuple(self._run.agents)

    @property
    def layout(self) -> Any:
        return self._run.layout

    @property
    def evals(self) -> Mapping[int, Mapping[str, Mapping[str, float]]]:
        return MappingProxyType(self._run.evals)

    @property
    def warnings(self) -> Sequence[str]:
        return tuple(self._run.warnings)

    def request_stop(self, reason: str) -> None:
        self._run.request_stop(reason)

    def __repr__(self) -> str:
        return f"RunView({self._run.spec.run.name!r}, output_dir={str(self.output_dir)!r})"
