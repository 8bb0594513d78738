"""The built-in observers (console, jsonl, tensorboard, checkpoint) on fake runs."""

import json

import corl
from corl.testing import FakePlugin, fake_recipe, run_tiny

ALL = ["console", "jsonl", "tensorboard", "checkpoint"]


def test_every_observer_writes_what_it_promises(tmp_path, capsys):
    summary = run_tiny(tmp_path, fake_recipe(**{"run.observers": ALL, "run.steps": 4, "eval.every": 2}))
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2),
                                                         ("train", 3), ("train", 4), ("eval", 4)]
    assert {"reward_mean", "reward_std", "label_share", "grad_norm"} <= set(records[1]["agents"]["fake0"])
    final = tmp_path / "checkpoints" / "final"
    assert sorted(p.name for p in final.iterdir()) == ["fake0", "fake1", "fake2", "manifest.json", "summary.json"]
    assert json.loads((final / "summary.json").read_text())["agents"] == summary["agents"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/fake1/reward_mean")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("eval/fake1/pass@1")] == [0, 2, 4]
    out = capsys.readouterr().out
    assert "held-out accuracy before -> after 4 steps" in out and f"outputs: {tmp_path}" in out
    # pass@1's change carries its evaluation standard error, so a reader can tell a gain from noise
    s = summary["agents"]["fake0"]
    se = 100 * (s["before"]["pass@1_se"] ** 2 + s["after"]["pass@1_se"] ** 2) ** 0.5
    assert f"({100 * (s['after']['pass@1'] - s['before']['pass@1']):+.1f} ± {se:.1f})" in out
    assert "standard error of the change" in out


def test_a_resumed_run_keeps_only_the_metrics_its_checkpoint_covers(tmp_path):
    recipe = fake_recipe(**{"run.observers": ["jsonl"], "run.steps": 3, "run.checkpoint_every": 2})
    run_tiny(tmp_path, recipe)
    (tmp_path / "summary.json").unlink()
    corl.run(recipe, [f"run.output_dir={tmp_path}", "run.steps=4"], plugins=[FakePlugin()], resume=True)
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 4]  # step 3 of the first run is gone: the checkpoint was at step 2
