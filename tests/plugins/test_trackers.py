"""corl-wandb and corl-mlflow, offline: a run logs what the tensorboard observer logs (read back from
the W&B run's transaction log and from MLflow's file store), the recipe as config, and closes its
tracker run on success, on failure and across a resume."""

import importlib
import json
import os
import struct
import sys
import time
import tomllib
from pathlib import Path

import pytest

import corl
from corl.errors import ConfigError, PluginError
from corl.testing import fake_recipe
from tests.kit import ROOT


def _plugin(name, library):
    # tox installs both with their trackers (CORL_TEST_PLUGINS=1) and a missing one fails there; elsewhere
    # a checkout's plugin folder is imported as is, and a missing tracker library skips
    if not os.environ.get("CORL_TEST_PLUGINS"):
        pytest.importorskip(library, reason=f"pip install -e plugins/{name.replace('_', '-')}")
        folder = str(ROOT / "plugins" / name.replace("_", "-"))
        if importlib.util.find_spec(name) is None and folder not in sys.path:
            sys.path.append(folder)
    return importlib.import_module(name)


corl_wandb, corl_mlflow = _plugin("corl_wandb", "wandb"), _plugin("corl_mlflow", "mlflow")


@pytest.fixture(autouse=True)
def no_autoload(monkeypatch):
    """The plugin module is handed to the run, so an installed copy must not load twice."""
    monkeypatch.setenv("CORL_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("WANDB_SILENT", "true")


def recipe(**changes):
    return fake_recipe(**{"run.steps": 4, "eval.every": 2, "run.observers": ["jsonl", "tensorboard"], **changes})


def tensorboard_scalars(out: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


class FailAtStep:
    def __init__(self, step):
        self.step = step

    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics):
        if step == self.step:
            raise RuntimeError("injected failure")


# -- Weights & Biases ---------------------------------------------------------------------------


def wandb_records(out: Path, runs: int = 1) -> list:
    """Every record of the ``runs`` offline runs under ``out/wandb``, oldest first, once each has its
    exit record (wandb's service writes the log after ``finish`` returns)."""
    deadline = time.monotonic() + 60
    while True:
        records = _read_wandb_logs(out)
        if len(of(records, "exit")) >= runs or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _read_wandb_logs(out: Path) -> list:
    """The .wandb files' records. The file is a LevelDB-style log: 32 KiB blocks of chunks, each
    after a 7-byte header of checksum, length and type (full, first, middle, last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    for path in sorted(out.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        pos, parts = 7, []
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos: pos + 7])
            if kind == 0:
                pos += 32768 - pos % 32768
                continue
            parts.append(data[pos + 7: pos + 7 + length])
            pos += 7 + length
            if kind in (1, 4):  # a full record, or the last chunk of one
                record = pb.Record()
                record.ParseFromString(b"".join(parts))
                records.append(record)
                parts = []
    return records


def wandb_history(records) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            for key, value in row.items():
                if not key.startswith("_"):
                    out.setdefault(key, {})[r.history.step.num] = value
    return out


def of(records, kind):
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def test_wandb_offline_logs_the_tensorboard_scalars_and_the_recipe(corl_run):
    summary, out = corl_run(recipe(**{"observers.wandb.mode": "offline", "observers.wandb.project": "co-rl-test",
                                      "observers.wandb.tags": ["ring", "fake"]}), plugins=[corl_wandb])
    records = wandb_records(out)
    expected = tensorboard_scalars(out)
    assert "train/fake0/reward_mean" in expected and "eval/fake0/pass@1" in expected  # what tensorboard has
    assert any(k.startswith("cohort/") for k in expected)
    history = wandb_history(records)
    tables = {k: history.pop(k) for k in list(history) if k.startswith("samples/")}
    assert history.keys() == expected.keys()
    for key, steps in expected.items():
        assert history[key].keys() == steps.keys(), key
        assert history[key] == pytest.approx(steps, rel=1e-6), key  # tensorboard stores float32
    assert sorted(history["eval/fake0/pass@1"]) == [0, 2, 4]
    # the logged completions: a wandb.Table per step and per evaluation
    assert set(tables["samples/train/_type"].values()) == {"table-file"}
    assert sorted(tables["samples/train/_type"]) == [1, 2, 3, 4] and sorted(tables["samples/eval/_type"]) == [0, 2, 4]
    assert set(tables["samples/train/nrows"].values()) == {3 * 4}  # three agents x run.log_completions
    run = of(records, "run")[0]
    assert (run.project, run.display_name, list(run.tags)) == ("co-rl-test", "tiny", ["ring", "fake"])
    updates = [*run.config.update, *(item for c in of(records, "config") for item in c.update)]
    config = {item.key: json.loads(item.value_json) for item in updates}
    assert config["run"]["steps"] == 4 and config["agents"][0]["name"] == "fake0"
    assert [e.exit_code for e in of(records, "exit")] == [0]
    assert json.loads((out / "wandb.json").read_text())["id"] == run.run_id


def test_wandb_closes_its_run_when_the_run_fails(corl_run, tmp_path):
    with pytest.raises(PluginError, match="injected failure"):
        corl_run(recipe(**{"observers.wandb.mode": "offline"}), plugins=[corl_wandb, FailAtStep(2)])
    records = wandb_records(tmp_path / "run0")  # corl_run's first output folder
    assert [e.exit_code for e in of(records, "exit")] == [1]
    assert sorted(wandb_history(records)["train/fake0/reward_mean"]) == [1, 2]


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    from corl.runtime import run
    from corl.testing import FakePlugin

    where = f"run.output_dir='{tmp_path}'"
    data = recipe(**{"run.checkpoint_every": 2, "observers.wandb.mode": "offline"})
    with pytest.raises(PluginError, match="injected failure"):
        run(data, [where], plugins=[FakePlugin(), corl_wandb, FailAtStep(3)])
    run(data, [where], plugins=[FakePlugin(), corl_wandb], resume=True)
    records = wandb_records(tmp_path, runs=2)
    assert len({r.run_id for r in of(records, "run")}) == 1  # two offline folders, one W&B run
    assert [e.exit_code for e in of(records, "exit")] == [1, 0]
    assert sorted(wandb_history(records)["train/fake0/reward_mean"]) == [1, 2, 3, 4]


def wandb_summary(records) -> dict:
    """The run summary the transaction log leaves: its summary records' updates and removals, in order."""
    summary = {}
    for r in of(records, "summary"):
        for item in r.update:
            summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        for item in r.remove:
            summary.pop(item.key or "/".join(item.nested_key), None)
    return summary


def test_the_wandb_summary_keeps_no_cohort_value_the_last_evaluation_left_undefined(tmp_path):
    from corl.testing import run_view

    (tmp_path / "recipe.json").write_text('{"run": {"steps": 2}}')
    view = run_view(tmp_path, name="t")
    observer = corl_wandb.WandbObserver(corl_wandb.WandbConfig(mode="offline"))
    observer.corl_on_run_start(view)
    results = {"a": {"pass@1": 0.5}, "b": {"pass@1": 0.25}}
    cohort = {"agents": ["a", "b"], "agreement": [[1.0, 0.5], [0.5, 1.0]], "phi": [[1.0, 0.3], [0.3, 1.0]],
              "same_wrong": [[None, 0.2], [0.2, None]]}
    observer.corl_on_eval_end(view, 0, results, cohort, ())
    observer.corl_on_eval_end(view, 2, results, {**cohort, "phi": [[None, None], [None, None]]}, ())  # b always wrong
    observer.corl_on_run_end(view, {"agents": {}, "stop_reason": None})
    summary = wandb_summary(wandb_records(tmp_path))
    assert summary["cohort/agreement/a-b"] == 0.5 and summary["eval/a/pass@1"] == 0.5
    assert "cohort/phi/a-b" not in summary  # not step 0's 0.3, shown as if it were the last evaluation's


def test_a_bad_wandb_mode_is_one_line_naming_the_key(corl_run):
    with pytest.raises(ConfigError, match=r"observers\.wandb\.mode: invalid value 'cloud'; valid: '', 'online', "
                                          r"'offline', 'disabled'"):
        corl_run(recipe(**{"observers.wandb.mode": "cloud"}), plugins=[corl_wandb])


# -- MLflow -------------------------------------------------------------------------------------


def mlflow_client(out: Path):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=(out / "mlruns").as_uri())


def mlflow_history(client, run_id) -> dict[str, dict[int, float]]:
    run = client.get_run(run_id)
    out = {}
    for key in run.data.metrics:
        history = client.get_metric_history(run_id, key)
        assert len({m.step for m in history}) == len(history), f"{key} logged twice at one step"
        out[key] = {m.step: m.value for m in history}
    return out


def test_mlflow_file_store_logs_the_tensorboard_scalars_and_the_recipe(corl_run):
    _, out = corl_run(recipe(**{"observers.mlflow.experiment": "co-rl-test", "observers.mlflow.tags": ["topology=ring"]}),
                      plugins=[corl_mlflow])
    assert (out / "mlruns").is_dir()  # the default store: file:OUTPUT_DIR/mlruns
    client = mlflow_client(out)
    run_id = json.loads((out / "mlflow.json").read_text())["run_id"]
    run = client.get_run(run_id)
    expected = {corl_mlflow.metric_name(k): v for k, v in tensorboard_scalars(out).items()}
    assert "eval/fake0/pass_at_1" in expected and "train/fake0/reward_mean" in expected
    history = mlflow_history(client, run_id)
    assert history.keys() == expected.keys()
    for key in expected:
        assert history[key] == pytest.approx(expected[key], rel=1e-6), key
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny"
    assert client.get_experiment(run.info.experiment_id).name == "co-rl-test"
    assert run.data.tags["topology"] == "ring"
    assert run.data.params["run.steps"] == "4" and run.data.params["agents.0.name"] == "fake0"
    local = client.download_artifacts(run_id, "recipe.json", str(out / "artifact"))
    assert json.loads(Path(local).read_text()) == json.loads((out / "recipe.json").read_text())
    # the logged completions: a table artifact per step, the rows samples.jsonl holds for that step
    table = json.loads(Path(client.download_artifacts(run_id, "samples/train/step-000002.json",
                                                      str(out / "artifact"))).read_text())
    logged = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert table["columns"][:4] == ["step", "agent", "prompt", "completion"]
    assert [row[3] for row in table["data"]] == [x["completion"] for x in logged if x["kind"] == "train" and x["step"] == 2]


def test_mlflow_marks_a_failed_run_failed(corl_run, tmp_path):
    uri = (tmp_path / "store").as_uri()
    with pytest.raises(PluginError, match="injected failure"):
        corl_run(recipe(**{"observers.mlflow.tracking_uri": uri}), plugins=[corl_mlflow, FailAtStep(2)])
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("corl").experiment_id])
    assert run.info.status == "FAILED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/fake0/reward_mean")) == [1, 2]


def test_a_resumed_run_continues_the_same_mlflow_run(tmp_path):
    from corl.runtime import run
    from corl.testing import FakePlugin

    where = f"run.output_dir='{tmp_path}'"
    data = recipe(**{"run.checkpoint_every": 2, "observers.mlflow.experiment": "resume"})
    with pytest.raises(PluginError, match="injected failure"):
        run(data, [where], plugins=[FakePlugin(), corl_mlflow, FailAtStep(3)])
    [history] = (tmp_path / "mlruns").rglob("metrics/train/fake0/reward_mean")
    with open(history, "a") as f:
        f.write("1733412000000 0.5")  # half a line: what a kill or a full disk leaves
    run(data, [where], plugins=[FakePlugin(), corl_mlflow], resume=True)
    client = mlflow_client(tmp_path)
    (only,) = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
    assert only.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(only.info.run_id, "train/fake0/reward_mean")]
    # the file store's history is cut back to the checkpoint (step 2): step 3 is logged once, by the resume
    assert steps == [1, 2, 3, 4]


def test_metric_names_mlflow_accepts():
    assert corl_mlflow.metric_name("eval/llama/maj@8") == "eval/llama/maj_at_8"
    assert corl_mlflow.metric_name("cohort/phi/llama-qwen2") == "cohort/phi/llama-qwen2"
    assert corl_mlflow.flatten({"run": {"steps": 4}, "agents": [{"lr": 1e-5}], "eval": {"ks": [1, 2]}}) == {
        "run.steps": "4", "agents.0.lr": "1e-05", "eval.ks": "[1, 2]"}


# -- both ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("plugin", ["corl-wandb", "corl-mlflow"])
def test_the_tracker_plugins_are_distributions_of_their_own(plugin):
    from packaging.requirements import Requirement

    meta = tomllib.loads((ROOT / "plugins" / plugin / "pyproject.toml").read_text())["project"]
    module = plugin.replace("-", "_")
    assert meta["entry-points"]["corl"] == {plugin.split("-")[1]: module}
    assert "co-rl" in {Requirement(r).name for r in meta["dependencies"]}
    assert (ROOT / "plugins" / plugin / "README.md").exists()


# -- corl eval, corl cohort and corl report on a run that logged to both trackers -------------------

#: The fake agents for the command line, and a recorder of every hook a command sends.
INSPECTED = '''
import json, os
import corl
from corl.testing.fakes import FakePlugin

_fake = FakePlugin()


@corl.hookimpl
def corl_register_components(registry):
    _fake.corl_register_components(registry)


def _record(hook):
    with open(os.environ["CORL_TEST_HOOKS"], "a") as f:
        f.write(hook + "\\n")


@corl.hookimpl
def corl_on_run_start(run):
    _record("corl_on_run_start")


@corl.hookimpl
def corl_on_eval_end(run, step, results, cohort):
    _record("corl_on_eval_end")


@corl.hookimpl
def corl_on_run_end(run, summary):
    _record("corl_on_run_end")
'''


def test_eval_cohort_and_report_of_a_tracked_run_attach_no_observer(corl_run, installed_plugin, monkeypatch,
                                                                     tmp_path, capsys):
    """Each command is read-only: every shipped observer (the built-ins, corl-wandb, corl-mlflow) sees a
    whole run's lifecycle or nothing. Before, `corl eval` sent eval_end without run_start and each tracker
    failed ("'NoneType' object has no attribute 'log_batch'")."""
    import importlib.metadata

    from corl.cli import main

    for dist in ("corl-wandb", "corl-mlflow"):
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (pip install ./plugins/{dist})")
    _, out = corl_run(recipe(**{"observers.wandb.mode": "offline", "observers.mlflow.experiment": "inspected",
                                "observers.early_stop.window": 2,
                                "run.observers": ["console", "jsonl", "tensorboard", "checkpoint"]}),
                      plugins=[corl_wandb, corl_mlflow])
    before = {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    hooks = tmp_path / "hooks.txt"
    installed_plugin("corl-inspected-example", INSPECTED, entry_point="inspected")
    monkeypatch.delenv("CORL_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setenv("CORL_PLUGINS", "inspected,wandb,mlflow")
    monkeypatch.setenv("CORL_TEST_HOOKS", str(hooks))
    capsys.readouterr()  # (the training run's table)

    assert main(["eval", str(out), "--json", "--k", "2", "--size", "8"]) == 0, capsys.readouterr().err
    assert set(json.loads(capsys.readouterr().out)["results"]) == {"fake0", "fake1", "fake2"}
    assert main(["eval", str(out), "--base", "--size", "8", "--set", "observers.wandb.mode=offline"]) == 0
    assert main(["cohort", str(out), "--json", "--prompts", "8"]) == 0
    assert main(["report", str(out)]) == 0
    assert not hooks.exists()  # no hook at all: no eval_end without its run_start
    after = {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if not k.startswith("report/")} == before  # nothing written, but the report
    assert len(of(wandb_records(out), "run")) == 1  # no second W&B run
    client = mlflow_client(out)
    (only,) = client.search_runs([client.get_experiment_by_name("inspected").experiment_id])
    assert only.info.status == "FINISHED"  # the training run, untouched; no evaluation run beside it
