"""Every shipped recipe, end to end through the real CLI, shrunk by overrides."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corl.recipe.locate import shipped_recipes
from tests.kit import real_models_missing, tiny_for

ROOT = Path(__file__).resolve().parents[2]
#: shrunk runs of minutes (the two real models: 2 steps of real_headroom took 5.3 min on 2 idle-ish
#: cores, Gemma 3's update with its KL reference most of it): `tox -e slow`, keeping the default run
#: well under 15 min. The default run keeps the real models' own test (tests/unit/builtin/hf/
#: test_real_models.py: convert, prompt, sample, update, save, reload) and the vLLM run (tox -e vllm).
SLOW = {"real_smollm2_gemma3", "real_headroom"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in sorted(shipped_recipes())])
def test_shipped_recipe_runs_end_to_end(name, tmp_path, cache_dir):
    missing = real_models_missing(ROOT / "recipes" / f"{name}.toml")
    if missing:  # CI installs the real extra (tox.ini); a bare checkout may not have it
        pytest.skip(missing)
    out_dir = tmp_path / "run"
    sets = [x for item in [*tiny_for(ROOT / "recipes" / f"{name}.toml"), f"run.output_dir={out_dir}",
                           "run.checkpoint_every=1"] for x in ("--set", item)]
    res = subprocess.run([sys.executable, "-m", "corl.cli", "run", str(ROOT / "recipes" / f"{name}.toml"), *sets],
                         capture_output=True, text=True, env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)},
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "held-out accuracy before -> after 2 steps" in res.stdout

    recipe = json.loads((out_dir / "recipe.json").read_text())
    agents = [a["name"] for a in recipe["agents"]]
    lines = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    frozen = {a["name"] for a in recipe["agents"] if a["frozen"]}
    for record in train:
        assert sorted(record["agents"]) == sorted(agents)
        for name_, m in record["agents"].items():
            assert 0 <= m["reward_mean"] <= 1 and 0 <= m["reward_std"] <= 0.5
            assert 0 <= m["label_share"] <= 1 and 0 <= m["label_accuracy"] <= 1
            assert 1 <= m["completion_length"] <= recipe["agents"][0]["sampler"]["max_new_tokens"]
            if name_ in frozen:  # a judge votes but is not trained
                assert "grad_norm" not in m
            elif m["active_fraction"] > 0:  # an update without any learning signal measures nothing
                assert m["entropy"] >= 0 and m["grad_norm"] >= 0 and 0 <= m["clip_frac"] <= 1
            else:
                assert not {"entropy", "grad_norm", "clip_frac", "loss"} & set(m)
    summary = json.loads((out_dir / "summary.json").read_text())
    for name_ in agents:
        for when in ("before", "after", "best"):
            scores = summary["agents"][name_][when]
            assert 0 <= scores["greedy"] <= 1 and 0 <= scores["pass@1"] <= scores["pass@4"] <= 1
        model = out_dir / "checkpoints" / "final" / name_
        assert (model / "model.safetensors").stat().st_size > 10_000 and (model / "tokenizer.json").exists()

    # The optimizer really updates: a trained agent whose step-2 gradient was not zero has other
    # weights after step 2 than after step 1 (whole-run checkpoints of both); a frozen one never moves.
    from safetensors.torch import load_file

    ckpt = out_dir / "checkpoints"
    for name_ in agents:
        if name_ in frozen:
            assert not (ckpt / "step-000002" / "agents" / name_).exists()
            continue
        one, two = (load_file(ckpt / f"step-00000{k}" / "agents" / name_ / "model.safetensors") for k in (1, 2))
        changed = any(not (one[key] == two[key]).all() for key in one)
        assert changed == (train[1]["agents"][name_].get("grad_norm", 0) > 0), name_
    # (no "some agent moved" check: two prompts can give every sample one reward, hence no signal and
    # rightly no update; the equality above already fails when a gradient does not move the weights)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    # every metric a step measured, and only those (kl only with a reference model, kl > 0)
    for record in train:
        for metric in record["agents"][agents[0]]:
            assert f"train/{agents[0]}/{metric}" in tags
    assert not any(t.endswith("/kl") for t in tags) or any(a["optimizer"].get("kl", 0) > 0 for a in recipe["agents"])
    assert f"eval/{agents[-1]}/pass@1" in tags
    assert len(events.Scalars(f"train/{agents[0]}/reward_mean")) == 2


def test_recipes_cli_lists_and_copies(tmp_path):
    ls = subprocess.run([sys.executable, "-m", "corl.cli", "recipes", "ls"], capture_output=True, text=True)
    assert "three_agent_ring" in ls.stdout
    cp = subprocess.run([sys.executable, "-m", "corl.cli", "recipes", "cp", "three_agent_ring", str(tmp_path)],
                        capture_output=True, text=True)
    assert cp.returncode == 0
    assert (tmp_path / "three_agent_ring.toml").read_text() == (ROOT / "recipes" / "three_agent_ring.toml").read_text()
    again = subprocess.run([sys.executable, "-m", "corl.cli", "recipes", "cp", "three_agent_ring", str(tmp_path)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "exists; not overwriting" in again.stderr


def test_plugins_cli_lists_builtins_with_hooks():
    res = subprocess.run([sys.executable, "-m", "corl.cli", "plugins"], capture_output=True, text=True)
    assert res.returncode == 0
    assert "corl.builtin.voting (co-rl 0.1.0): corl_register_components" in res.stdout
    assert "section    [zoo]" in res.stdout
    assert "router     ring" in res.stdout
