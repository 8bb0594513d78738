"""What a run carries from step to step, as attrs classes that a checkpoint writes as plain JSON."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import attrs

from corl.runtime.checkpoint import jsonable, tuples
from corl.runtime.health import Health


@attrs.define
class DataOrder:
    """Unlabeled prompts in a seeded shuffle, epoch by epoch."""

    rng: random.Random
    cursor: int = 0
    epoch: list[int] = attrs.field(factory=list)

    @classmethod
    def seeded(cls, seed: int) -> DataOrder:
        return cls(random.Random(seed))

    def take(self, n: int, size: int) -> list[int]:
        """The next ``n`` indices into a split of ``size`` prompts."""
        out = []
        while len(out) < n:
            if self.cursor >= len(self.epoch):
                self.epoch = list(range(size))
                self.rng.shuffle(self.epoch)
                self.cursor = 0
            out.append(self.epoch[self.cursor])
            self.cursor += 1
        return out


@attrs.define
class RunState:
    """Data order, per-step history, evaluations and health: everything but the components'."""

    order: DataOrder
    health: Health = attrs.field(factory=Health)
    history: list[dict[str, Any]] = attrs.field(factory=list)  # one record per step
    evals: dict[int, dict[str, dict[str, float]]] = attrs.field(factory=dict)  # step -> agent -> metric
    cohorts: dict[int, dict[str, Any]] = attrs.field(factory=dict)  # step -> pairwise matrices

    def to_json(self, step: int) -> dict[str, Any]:
        return {"step": step, "cursor": self.order.cursor, "epoch_order": self.order.epoch,
                "order_rng": jsonable(self.order.rng.getstate()), "history": self.history,
                "evals": {str(k): v for k, v in self.evals.items()}, "nonfinite": self.health.nonfinite,
                "health": self.health.to_json()}

    def load_json(self, state: Mapping[str, Any]) -> int:
        """Restore from :meth:`to_json`'s output; returns its step."""
        self.order.rng.setstate(tuples(state["order_rng"]))
        self.order.cursor, self.order.epoch = state["cursor"], list(state["epoch_order"])
        self.history = list(state["history"])
        self.evals = {int(k): v for k, v in state["evals"].items()}
        self.health = Health.from_json(state["health"], state["nonfinite"])
        return state["step"]
