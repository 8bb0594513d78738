"""Early stop on the label-free collusion signal, keeping the last checkpoint before it.

Label-free RL on a weak base fails in a recognisable way: agents converge on shared wrong
answers, so the reward they earn *rises* while the vote's agreement rises and the number of
distinct answers per prompt falls (FINDINGS, "Three agents, three training seeds"). None of
the three needs a label. The observer compares each trained agent's mean of the last
``window`` steps with the ``window`` before; when reward, agreement and diversity all move that
way by the stated margins, it rolls every trained agent back to its weights from before the
compared stretch (``restore``) and asks the run to stop (:meth:`corl.runtime.Run.request_stop`).

Note that honest sharpening moves the same three numbers, more slowly: the thresholds decide
how fast a trend must be to count as collusion (docs/results/claims.md measures both regimes).
Recipe: ``[observers.early_stop]`` with the keys of :class:`EarlyStopConfig`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from corl.context import Context, RegistryView
from corl.hookspecs import hookimpl

v = attrs.validators

#: the label-free series the signal reads from each step's metrics
SERIES = ("reward_mean", "label_share", "distinct_answers")


@attrs.frozen
class EarlyStopConfig:
    window: int = attrs.field(default=5, validator=v.ge(1), metadata={
        "help": "steps per window: the last window's means are compared with the window before"})
    min_reward_rise: float = attrs.field(default=0.02, validator=v.ge(0), metadata={
        "help": "mean reward must rise at least this much (absolute) between the two windows"})
    min_agreement_rise: float = attrs.field(default=0.02, validator=v.ge(0), metadata={
        "help": "the pseudo-label's vote share must rise at least this much (absolute)"})
    min_diversity_drop: float = attrs.field(default=0.05, validator=[v.ge(0), v.le(1)], metadata={
        "help": "distinct answers per prompt must fall at least this fraction"})
    restore: bool = attrs.field(default=True, metadata={
        "help": "roll trained agents back to their weights from before the two windows when it fires"})


def collusion(history: Sequence[Mapping[str, float]], config: EarlyStopConfig) -> str | None:
    """Why ``history`` (one agent's per-step metrics, oldest first) shows the collusion signal,
    or None. Needs ``2 * window`` steps."""
    w = config.window
    if len(history) < 2 * w:
        return None
    before = {k: statistics.fmean(m[k] for m in history[-2 * w: -w]) for k in SERIES}
    last = {k: statistics.fmean(m[k] for m in history[-w:]) for k in SERIES}
    rise = last["reward_mean"] - before["reward_mean"]
    agree = last["label_share"] - before["label_share"]
    drop = 1 - last["distinct_answers"] / before["distinct_answers"] if before["distinct_answers"] > 0 else 0.0
    if rise >= config.min_reward_rise and agree >= config.min_agreement_rise and drop >= config.min_diversity_drop:
        return (f"reward {before['reward_mean']:.2f} -> {last['reward_mean']:.2f}, agreement "
                f"{before['label_share']:.2f} -> {last['label_share']:.2f}, distinct answers per prompt "
                f"{before['distinct_answers']:.2f} -> {last['distinct_answers']:.2f} over the last {2 * w} steps")
    return None


class EarlyStop:
    """The observer. Every rank runs it (the metrics it reads are the same on every rank), so
    each rank rolls back the agents it holds and all of them stop after the same step."""

    every_rank = True

    def __init__(self, config: EarlyStopConfig | None = None, ctx: Context | None = None):
        self.config = config or EarlyStopConfig()
        self.history: dict[str, list[dict[str, float]]] = {}
        self.snapshots: dict[int, Path] = {}
        self.tmp: Path | None = None
        self.fired: dict[str, object] | None = None

    def _trained(self, run):
        return [slot for slot in run.agents if slot.optimizer is not None]

    def _snapshot(self, run, step: int) -> None:
        if not self.config.restore:
            return
        folder = self.tmp / f"step{step}"
        for slot in self._trained(run):
            slot.agent.save_state(str(folder / slot.name))
        self.snapshots[step] = folder
        for old in [s for s in self.snapshots if s < step - 2 * self.config.window]:
            shutil.rmtree(self.snapshots.pop(old), ignore_errors=True)

    @hookimpl
    def corl_on_run_start(self, run):
        self.tmp = Path(tempfile.mkdtemp(prefix="corl-early-stop-"))
        self._snapshot(run, run.start_step)

    @hookimpl
    def corl_on_step_end(self, run, step, metrics):
        trained = {a.name for a in run.spec.agents if not a.frozen}
        reason = None
        for name, m in metrics.agents.items():
            if name not in trained or not all(k in m for k in SERIES):
                continue
            self.history.setdefault(name, []).append({k: m[k] for k in SERIES})
            found = collusion(self.history[name], self.config)
            if found and reason is None:
                reason = f"collusion signal for agent {name!r}: {found}"
        if reason is None:
            self._snapshot(run, step)
            return
        target = step - 2 * self.config.window
        if self.config.restore and target in self.snapshots:
            for slot in self._trained(run):
                slot.agent.load_state(str(self.snapshots[target] / slot.name))
                slot.sampler.sync(slot.agent)
            reason += f"; agents rolled back to their step-{target} weights"
        self.fired = {"step": step, "restored_to": target if self.config.restore else None, "reason": reason}
        run.request_stop(reason)

    def _cleanup(self):
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    @hookimpl
    def corl_on_run_end(self, run, summary):
        self._cleanup()

    @hookimpl
    def corl_on_run_failed(self, run, error):
        self._cleanup()


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("observer", "early_stop", EarlyStop, EarlyStopConfig,
                 help="stop (and roll back) when reward rises while agreement rises and answer diversity falls")
