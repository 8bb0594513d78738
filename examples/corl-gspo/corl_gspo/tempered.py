"""Sampler `tempered`: a temperature schedule around another registered sampler (by default the
built-in `hf`), the way to compose built-ins: `ctx.build(kind, name, config)` builds the wrapped one,
and the schedule's position is checkpointed (`corl.Stateful`), so a resumed run samples as an
uninterrupted one would.

Training samples at `start`, moving linearly to `end` over `steps` calls; evaluations ask for their
own temperature (or greedy decoding) and get exactly that.

This module is a plugin of its own, not behind the package's entry point: pass it in
(`corl.run(..., plugins=[corl_gspo.tempered])`, `run_tiny(..., plugins=[tempered])`), or name it in an
entry point of the `corl` group to install it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

import corl


@attrs.frozen
class TemperedConfig:
    start: float = attrs.field(default=1.2, validator=attrs.validators.gt(0),
                               metadata={"help": "the training temperature at the first step"})
    end: float = attrs.field(default=0.8, validator=attrs.validators.gt(0),
                             metadata={"help": "the training temperature from `steps` calls on"})
    steps: int = attrs.field(default=100, validator=attrs.validators.ge(1),
                             metadata={"help": "training calls over which the temperature moves from start to end"})
    inner: str = attrs.field(default="hf", metadata={"help": "the registered sampler it wraps"})
    inner_config: Any = attrs.field(factory=dict, metadata={"help": "the wrapped sampler's own keys (a table)"})


class TemperedSampler:
    """A :class:`corl.Sampler` and :class:`corl.Stateful`: the schedule's position is its state."""

    def __init__(self, config: TemperedConfig, ctx: corl.Context):
        self.config, self.calls = config, 0
        self.inner = ctx.build("sampler", config.inner, config.inner_config)

    def temperature(self) -> float:
        c = self.config
        return c.start + (c.end - c.start) * min(self.calls, c.steps) / c.steps

    def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
        if greedy or temperature is not None:  # an evaluation says how it samples
            return self.inner.sample(agent, prompts, n, greedy=greedy, temperature=temperature)
        rollout = self.inner.sample(agent, prompts, n, temperature=self.temperature())
        self.calls += 1
        return rollout

    def sync(self, agent) -> None:
        self.inner.sync(agent)

    def save_state(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "schedule.json").write_text(json.dumps({"calls": self.calls}))

    def load_state(self, path: str) -> None:
        self.calls = json.loads((Path(path) / "schedule.json").read_text())["calls"]


@corl.hookimpl
def corl_register_components(registry):
    registry.add("sampler", "tempered", TemperedSampler, TemperedConfig,
                 help="a temperature schedule around another sampler (hf by default), checkpointed")
