"""Checkpoint and resume: a run SIGKILLed anywhere and resumed ends exactly like one left alone."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.kit import ROOT, TINY

RECIPE = ROOT / "recipes" / "three_agent_ring.toml"
SETTINGS = [*TINY, "run.steps=5", "run.checkpoint_every=2", "eval.every=3", "run.observers=['jsonl', 'checkpoint']",
            "agents[1].model='zoo:gpt-neox-tiny'",
            # a learning-rate schedule's position is part of what a checkpoint must restore
            "agents[0].optimizer.lr_schedule='cosine'", "agents[0].optimizer.warmup_steps=2"]


def corl_run(out, *extra, fault=None, sets=()):
    env = {**os.environ, "CORL_FAULT": fault or ""}
    args = [x for item in [*SETTINGS, *sets, f"run.output_dir={out}"] for x in ("--set", item)]
    return subprocess.run([sys.executable, "-m", "corl.cli", "run", str(RECIPE), *args, *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def outcome(out: Path):
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("seconds")
    records = []
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec.pop("seconds", None)
        for m in rec["agents"].values():
            for key in [k for k in m if k.startswith("time/")]:
                del m[key]
        records.append(rec)
    final = out / "checkpoints" / "final"
    weights = {name: load_file(final / name / "model.safetensors") for name in ("llama", "qwen2", "neox")}
    return summary, records, weights


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("reference")
    res = corl_run(out)
    assert res.returncode == 0, res.stderr[-2000:]
    return outcome(out)


@pytest.mark.parametrize("fault", ["step:1", "step:3", "checkpoint:4"])
def test_killed_and_resumed_run_equals_the_uninterrupted_one(fault, reference, tmp_path):
    out = tmp_path / "run"
    killed = corl_run(out, fault=fault)
    assert killed.returncode == -signal.SIGKILL
    if fault == "checkpoint:4":  # killed mid-write: only a hidden temp folder, never a step-000004
        assert not (out / "checkpoints" / "step-000004").exists()
        assert any(p.name.startswith(".step-000004") for p in (out / "checkpoints").iterdir())
    resumed = corl_run(out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected_from = {"step:1": "no checkpoint", "step:3": "step-000002", "checkpoint:4": "step-000002"}[fault]
    assert expected_from in resumed.stderr
    summary, records, weights = outcome(out)
    ref_summary, ref_records, ref_weights = reference
    assert summary == ref_summary
    assert records == ref_records
    for name, tensors in ref_weights.items():
        assert tensors.keys() == weights[name].keys()
        assert all((tensors[k] == weights[name][k]).all() for k in tensors), name
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]


def test_sigterm_writes_a_checkpoint_and_resume_finishes(tmp_path, reference):
    out = tmp_path / "run"
    env = {**os.environ, "CORL_FAULT": ""}
    args = [x for item in [*SETTINGS, "run.steps=400", "run.checkpoint_every=0", f"run.output_dir={out}"]
            for x in ("--set", item)]
    proc = subprocess.Popen([sys.executable, "-m", "corl.cli", "run", str(RECIPE), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and '"kind": "train"' in metrics.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM
    # (eval.every=3: the signal may land in the evaluation after step 3, which says so)
    assert re.search(r"corl: error: stopped by SIGTERM (during the evaluation )?after step \d+; checkpoint ", err), err
    assert "Traceback" not in err
    [ckpt] = [p for p in (out / "checkpoints").iterdir() if p.name.startswith("step-")]
    step = int(ckpt.name.split("-")[1])
    assert 1 <= step < 400
    resumed = corl_run(out, "--resume", sets=[f"run.steps={step + 1}", "run.checkpoint_every=0"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [x["step"] for x in lines if x["kind"] == "train"] == list(range(1, step + 2))


def test_resume_refuses_a_changed_recipe(tmp_path, reference):
    out = tmp_path / "run"
    assert corl_run(out, sets=["run.steps=2"]).returncode == 0
    changed = corl_run(out, "--resume", sets=["topology.type=all_pairs"])
    assert changed.returncode == 2
    # all_pairs' own key at its default is no change of its own (the saved ring recipe never had it)
    assert "the recipe changed since this checkpoint (topology.type: 'ring' -> 'all_pairs')" in changed.stderr
    assert "Traceback" not in changed.stderr
    more_steps = corl_run(out, "--resume", sets=["run.steps=3"])  # a longer run is fine
    assert more_steps.returncode == 0, more_steps.stderr[-2000:]


def test_a_fresh_run_does_not_mix_with_an_earlier_run(tmp_path, reference):
    out = tmp_path / "run"
    assert corl_run(out, sets=["run.steps=2"]).returncode == 0
    again = corl_run(out, sets=["run.steps=2"])
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert again.stderr.strip().splitlines()[-1] == (
        f"corl: error: {out} holds a finished run (summary.json); to train it further, raise run.steps and continue it "
        "with --resume (from its checkpoint step-000002); choose another run.output_dir (or run.name) to keep it, or "
        "pass --force to replace it")
    forced = corl_run(out, "--force", sets=["run.steps=1", "run.checkpoint_every=1"])
    assert forced.returncode == 0 and f"{out}: replacing the earlier run there (summary.json)" in forced.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["final", "step-000001"]  # none of the old
