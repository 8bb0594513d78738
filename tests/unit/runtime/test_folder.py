"""A run folder that holds a finished or started run is never written over without --force
(``corl.run(..., force=True)``); one whose earlier run trained nothing is reused."""

import json
import logging

import pytest

import corl
from corl.errors import CorlError, PluginError
from corl.testing import fake_recipe, outcome, run_tiny

#: 2 steps, no step checkpoint (checkpoint_every is 20): the run the issue saw replaced silently.
SHORT = fake_recipe(**{"run.steps": 2, "run.observers": ["jsonl", "checkpoint", "tensorboard"]})


def files(out):
    """What a run left in ``out`` (the lock file, rewritten by every process that takes it, aside)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".corl.lock"}


def test_a_finished_run_is_kept_unless_forced(tmp_path, caplog):
    out = tmp_path / "run"
    run_tiny(out, SHORT)
    kept = files(out)
    assert "summary.json" in kept and "checkpoints/final/fake0/model.safetensors" in kept
    with pytest.raises(CorlError) as info:
        run_tiny(out, SHORT, ["run.seed=1"])
    assert str(info.value) == (f"{out} holds a finished run (summary.json); choose another run.output_dir (or "
                               "run.name) to keep it, or pass --force to replace it")
    with pytest.raises(CorlError, match=r"holds a finished run \(summary.json\) and no checkpoint to continue from, so "
                                        r"--resume would train it again from step 0"):
        run_tiny(out, SHORT, ["run.seed=1"], resume=True)
    assert files(out) == kept  # nothing touched

    (out / "notes.txt").write_text("mine")
    with caplog.at_level(logging.INFO, logger="corl"):
        run_tiny(out, SHORT, ["run.seed=1"], force=True)
    assert f"{out}: replacing the earlier run there (summary.json)" in [r.getMessage() for r in caplog.records]
    other = tmp_path / "other"
    run_tiny(other, SHORT, ["run.seed=1"])
    assert outcome(out)[:2] == outcome(other)[:2]  # the new run alone: no old records mixed in
    assert len(list((out / "tensorboard").iterdir())) == 1  # the old run's event file is gone
    assert (out / "notes.txt").read_text() == "mine"  # only corl's own files are replaced


def test_a_started_run_continues_only_with_resume(tmp_path):
    out = tmp_path / "run"

    class Crash:
        @corl.hookimpl
        def corl_on_step_end(self, run, step, metrics):
            if step == 2:
                raise RuntimeError("disk full")

    with pytest.raises(PluginError, match=r"^plugin '.*Crash': corl_on_step_end raised RuntimeError: disk full; no checkpoint was written "
                                          r"before it \(run.checkpoint_every\), so a new run starts over$"):
        run_tiny(out, fake_recipe(**{"run.steps": 4}), plugins=[Crash()])
    with pytest.raises(CorlError) as info:
        run_tiny(out, fake_recipe(**{"run.steps": 4}))
    assert str(info.value) == (f"{out} holds a started run (trained steps in metrics.jsonl, no checkpoint); continue "
                               "it with --resume, or pass --force to replace it")
    summary = run_tiny(out, fake_recipe(**{"run.steps": 4}), resume=True)  # nothing to resume from: from step 0
    assert summary["steps"] == 4
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == [1, 2, 3, 4]


def test_a_run_that_trained_nothing_leaves_a_folder_to_reuse(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(CorlError, match="fewer than run.prompts_per_step"):
        run_tiny(out, fake_recipe(**{"task.train_size": 4}))
    assert (out / "recipe.json").exists()
    run_tiny(out, fake_recipe(**{"run.steps": 1}))  # not a run worth keeping: reused without --force
    assert json.loads((out / "recipe.json").read_text())["run"]["steps"] == 1


def test_a_finished_run_with_a_checkpoint_says_resume_trains_it_further(tmp_path):
    out = tmp_path / "run"
    recipe = fake_recipe(**{"run.steps": 2, "run.checkpoint_every": 2})
    run_tiny(out, recipe)
    with pytest.raises(CorlError) as info:
        run_tiny(out, recipe)
    assert str(info.value) == (f"{out} holds a finished run (summary.json); to train it further, raise run.steps and "
                               "continue it with --resume (from its checkpoint step-000002); choose another "
                               "run.output_dir (or run.name) to keep it, or pass --force to replace it")
    summary = run_tiny(out, recipe, ["run.steps=3"], resume=True)  # what the message says works
    assert summary["steps"] == 3
