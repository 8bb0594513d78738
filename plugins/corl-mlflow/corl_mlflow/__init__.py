"""corl plugin: the ``mlflow`` observer, an MLflow run per corl run.

It logs what corl's tensorboard observer logs, at the run's step (:func:`corl.logs.step_scalars`,
:func:`corl.logs.eval_scalars`), under the same names but for the characters MLflow refuses in a
metric name: ``eval/llama/pass@1`` is ``eval/llama/pass_at_1``. The resolved recipe is logged as
params (``agents.0.optimizer.lr``) and as the artifact ``recipe.json``. A resumed corl run
continues the same MLflow run (its id is kept in ``OUTPUT_DIR/mlflow.json``).

It talks to MLflow through ``MlflowClient`` only (no global active run), so an embedding program's
own MLflow runs are left alone. mlflow is imported when the run starts.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import attrs

import corl
from corl.logs import SAMPLE_COLUMNS, eval_scalars, sample_rows, step_scalars

ID_FILE = "mlflow.json"
_BAD = re.compile(r"[^\w\-. :/]")


@attrs.frozen
class MlflowConfig:
    experiment: str = attrs.field(default="corl", metadata={"help": "MLflow experiment (created if missing)"})
    run_name: str = attrs.field(default="", metadata={"help": "run name; empty: run.name"})
    tags: tuple[str, ...] = attrs.field(default=(), metadata={"help": "run tags, each KEY=VALUE (or KEY alone)"})
    tracking_uri: str = attrs.field(default="", metadata={
        "help": "http(s)://server, file:PATH or sqlite:///PATH; empty: MLFLOW_TRACKING_URI, else file:OUTPUT_DIR/mlruns"})


def metric_name(key: str) -> str:
    """A tracker scalar's name as MLflow accepts it: ``@`` reads ``_at_``, other refused characters ``_``."""
    return _BAD.sub("_", key.replace("@", "_at_"))


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """A recipe as MLflow params: ``{"agents": [{"lr": 1e-5}]}`` -> ``{"agents.0.lr": "1e-05"}``."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: json.dumps(value) if not isinstance(value, str) else value}
    out: dict[str, str] = {}
    for key, v in items:
        out.update(flatten(v, f"{prefix}.{key}" if prefix else str(key)))
    return out


def uri_for(config: MlflowConfig, output_dir: Path) -> str:
    uri = config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or (Path(output_dir).resolve() / "mlruns").as_uri()
    if uri.startswith("file:") or "://" not in uri:
        # MLflow 3 keeps its file store only on request; a file: URI in the recipe is that request
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def truncate_file_store(uri: str, experiment_id: str, run_id: str, start_step: int) -> None:
    """A resumed run's metric histories in a local file store, cut back to what its checkpoint
    covers: each metric file is a log of ``timestamp value step`` lines, whose torn last line (a
    kill, a full disk) and steps past ``start_step`` are dropped. (A tracking server keeps its
    history: there the steps run again are logged twice.)"""
    if "://" in uri and not uri.startswith("file:"):
        return
    from urllib.parse import unquote, urlparse

    root = Path(unquote(urlparse(uri).path) if uri.startswith("file:") else uri) / experiment_id / run_id / "metrics"
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.is_file():
            kept = [line for line in path.read_text(errors="replace").splitlines(keepends=True)
                    if _step_at_most(line, start_step)]
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_text("".join(line if line.endswith("\n") else line + "\n" for line in kept))
            os.replace(tmp, path)


def _step_at_most(line: str, step: int) -> bool:
    parts = line.split()
    try:
        return len(parts) == 3 and line.endswith("\n") and int(parts[2]) <= step and float(parts[1]) is not None
    except ValueError:
        return False


class MlflowObserver:
    """Scalars per step and per evaluation, the recipe as params, the run closed at the end."""

    def __init__(self, config: MlflowConfig, ctx=None):
        self.config, self.client, self.run_id = config, None, None

    @corl.hookimpl
    def corl_on_run_start(self, run):
        from mlflow.tracking import MlflowClient

        c = self.config
        self.client = client = MlflowClient(tracking_uri=uri_for(c, run.output_dir))
        ids = run.output_dir / ID_FILE
        if run.start_step > 0 and ids.exists():  # resumed: the same MLflow run goes on
            saved = json.loads(ids.read_text())
            self.run_id = saved["run_id"]
            truncate_file_store(uri_for(c, run.output_dir), saved["experiment_id"], self.run_id, run.start_step)
            client.update_run(self.run_id, status="RUNNING")
            return
        experiment = client.get_experiment_by_name(c.experiment)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(c.experiment)
        tags = dict((t.split("=", 1) + [""])[:2] for t in c.tags)
        self.run_id = client.create_run(experiment_id, run_name=c.run_name or run.spec.run.name, tags=tags).info.run_id
        ids.write_text(json.dumps({"run_id": self.run_id, "experiment_id": experiment_id}))
        recipe = json.loads((run.output_dir / "recipe.json").read_text())
        from mlflow.entities import Param

        params = [Param(metric_name(k)[:250], v[:6000]) for k, v in flatten(recipe).items()]
        for i in range(0, len(params), 100):
            client.log_batch(self.run_id, params=params[i: i + 100])
        client.log_dict(self.run_id, recipe, "recipe.json")

    def _log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric_name(k), float(v), now, step) for k, v in scalars.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i: i + 1000])

    def _samples(self, kind: str, samples, step: int) -> None:
        """The logged completions as a table artifact, ``samples/<kind>/step-<step>.json`` (the
        ``{"columns", "data"}`` layout MLflow's own log_table writes and its UI shows as a table)."""
        rows = sample_rows(samples)
        if rows:
            columns = ["step", "agent", *SAMPLE_COLUMNS]
            table = {"columns": columns, "data": [[r[c] for c in columns] for r in rows]}
            self.client.log_dict(self.run_id, table, f"samples/{kind}/step-{step:06d}.json")

    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics, outcome):
        self._log(step_scalars(metrics), step)
        self._samples("train", outcome.samples, step)

    @corl.hookimpl
    def corl_on_eval_end(self, run, step, results, cohort, samples):
        self._log(eval_scalars(results, cohort), step)
        self._samples("eval", samples, step)

    @corl.hookimpl
    def corl_on_run_end(self, run, summary):
        if summary.get("stop_reason"):
            self.client.set_tag(self.run_id, "corl.stop_reason", summary["stop_reason"])
        self.client.set_terminated(self.run_id, "FINISHED")
        self.run_id = None

    @corl.hookimpl
    def corl_on_run_failed(self, run, error):
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
            self.run_id = None


@corl.hookimpl
def corl_register_components(registry):
    registry.add("observer", "mlflow", MlflowObserver, MlflowConfig,
                 help="MLflow: the tensorboard scalars, the recipe as params (corl-mlflow)")
