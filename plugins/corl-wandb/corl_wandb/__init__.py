"""corl plugin: the ``wandb`` observer, a Weights & Biases run per corl run.

It logs what corl's tensorboard observer logs, under the same names (``train/<agent>/<metric>``,
``train/step_seconds``, ``eval/<agent>/<metric>``, ``cohort/<matrix>/<a>-<b>``; see
:func:`corl.logs.step_scalars`), at the run's step; the resolved recipe (``recipe.json``) is the
run's config; the logged completions (``run.log_completions`` per agent) are a ``wandb.Table`` at
``samples/train`` and ``samples/eval``. A resumed corl run continues the same W&B run (its id is kept in
``OUTPUT_DIR/wandb.json``). The run summary holds each scalar's last value; a cohort value undefined
at the latest evaluation is removed from it rather than left from an earlier one. wandb is imported when the run starts, so ``corl plugins`` and
``corl validate`` work without it.
"""

from __future__ import annotations

import json
from typing import Literal

import attrs

import corl
from corl.logs import SAMPLE_COLUMNS, eval_scalars, sample_rows, step_scalars

ID_FILE = "wandb.json"


@attrs.frozen
class WandbConfig:
    project: str = attrs.field(default="corl", metadata={"help": "W&B project"})
    entity: str = attrs.field(default="", metadata={"help": "W&B entity (team or user); empty: your default"})
    name: str = attrs.field(default="", metadata={"help": "run name; empty: run.name"})
    group: str = attrs.field(default="", metadata={"help": "run group, e.g. one per corl compare"})
    tags: tuple[str, ...] = attrs.field(default=(), metadata={"help": "run tags"})
    mode: Literal["", "online", "offline", "disabled"] = attrs.field(default="", metadata={
        "help": "online, offline (a local run folder; `wandb sync` uploads it later) or disabled; "
                "empty: WANDB_MODE or wandb's default"})
    dir: str = attrs.field(default="", metadata={"help": "where wandb writes its wandb/ folder; empty: run.output_dir"})


class WandbObserver:
    """Scalars per step and per evaluation, the recipe as config, the summary at the end."""

    def __init__(self, config: WandbConfig, ctx=None):
        self.config, self.run = config, None

    @corl.hookimpl
    def corl_on_run_start(self, run):
        import wandb

        c = self.config
        ids = run.output_dir / ID_FILE
        resumed = run.start_step > 0 and ids.exists()
        self.run = wandb.init(
            project=c.project, entity=c.entity or None, name=c.name or run.spec.run.name, group=c.group or None,
            tags=list(c.tags) or None, mode=c.mode or None, dir=str(c.dir or run.output_dir),
            config=json.loads((run.output_dir / "recipe.json").read_text()),
            id=json.loads(ids.read_text())["id"] if resumed else None, resume="allow" if resumed else None)
        ids.write_text(json.dumps({"id": self.run.id, "project": c.project}))

    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics, outcome):
        self.run.log({**step_scalars(metrics), **self._table("train", outcome.samples)}, step=step)

    @corl.hookimpl
    def corl_on_eval_end(self, run, step, results, cohort, samples):
        scalars = eval_scalars(results, cohort)
        self.run.log({**scalars, **self._table("eval", samples)}, step=step)
        # A pair whose matrix entry is undefined at this evaluation (phi when one agent is always right) is
        # not logged, and W&B's summary would go on showing an earlier evaluation's value for it.
        for key in cohort_keys(cohort):
            if key not in scalars:
                del self.run.summary[key]

    def _table(self, kind: str, samples) -> dict:
        """The logged completions as a ``wandb.Table`` under ``samples/<kind>`` (none: nothing)."""
        import wandb

        rows = sample_rows(samples)
        if not rows:
            return {}
        columns = ["step", "agent", *SAMPLE_COLUMNS]
        show = lambda v: v if v is None or isinstance(v, (int, float, str)) else str(v)
        return {f"samples/{kind}": wandb.Table(columns=columns, data=[[show(r[c]) for c in columns] for r in rows])}

    @corl.hookimpl
    def corl_on_run_end(self, run, summary):
        for name, s in summary["agents"].items():
            for metric, value in s.get("after", {}).items():
                self.run.summary[f"final/{name}/{metric}"] = value
        self.run.summary["stop_reason"] = summary.get("stop_reason") or ""
        self.run.finish(exit_code=0)
        self.run = None

    @corl.hookimpl
    def corl_on_run_failed(self, run, error):
        if self.run is not None:
            self.run.finish(exit_code=1)
            self.run = None


def cohort_keys(cohort) -> list[str]:
    """Every ``cohort/<matrix>/<a>-<b>`` name an evaluation of these agents can log."""
    names = cohort["agents"]
    return [f"cohort/{matrix}/{a}-{b}" for matrix in ("agreement", "phi", "same_wrong")
            for i, a in enumerate(names) for b in names[i + 1:]]


@corl.hookimpl
def corl_register_components(registry):
    registry.add("observer", "wandb", WandbObserver, WandbConfig,
                 help="Weights & Biases: the tensorboard scalars and the recipe as config (corl-wandb)")
