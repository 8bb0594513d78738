"""Warm-ups of any model (a folder here: a shipped zoo model): the zoo's "stopped partway through
supervised learning" protocol for real models, cached by the model's and the warm-up's fingerprint."""

import json

import pytest
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig
from corl.builtin.hf.models.catalog import shipped_folder
from corl.builtin.hf.models.config import WarmUpSettings
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from corl.context import Context
from corl.errors import ConfigError
from corl.recipe import load_recipe


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=32, train_size=8, eval_size=8))


def agent(task, warm, logs=None, model=None):
    model = model or str(shipped_folder("llama-add3"))
    ctx = Context(spec=None, seed=0, task=task, agent_name="a", log=(logs.append if logs is not None else lambda m: None))
    return HFAgent(HFAgentConfig(model=model, warm_up=warm), ctx)


def test_a_warm_up_trains_from_the_seed_split_and_is_cached(task, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    base = agent(task, WarmUpSettings())
    assert base.warm_up is None
    logs = []
    warm = agent(task, WarmUpSettings(steps=3, lr=1e-3, batch_size=4), logs)
    before, after = base.model.state_dict(), warm.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the steps moved the weights
    record = warm.warm_up
    assert record["steps"] == 3 and record["examples"] == 32 and record["lr"] == 1e-3
    (folder,) = (tmp_path / "warm").iterdir()
    assert json.loads((folder / "warm_up.json").read_text())["warm_up_fingerprint"] == record["warm_up_fingerprint"]
    assert any("warming up 3 supervised steps" in m for m in logs)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    logs.clear()
    again = agent(task, WarmUpSettings(steps=3, lr=1e-3, batch_size=4), logs)  # the cache, not a second warm-up
    assert not any("warming up" in m for m in logs) and any("starts from its warm-up" in m for m in logs)
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert all(torch.equal(after[k], again.model.state_dict()[k]) for k in after)
    # anything that shapes the warm-up (a step, the base model) is another cache entry
    agent(task, WarmUpSettings(steps=2, lr=1e-3, batch_size=4))
    agent(task, WarmUpSettings(steps=3, lr=1e-3, batch_size=4), model=str(shipped_folder("qwen2-add3")))
    assert len([p for p in (tmp_path / "warm").iterdir() if not p.name.startswith(".")]) == 3


def test_the_warm_up_teaches_the_target_then_eos(task, tmp_path, monkeypatch):
    from corl.builtin.hf.models import warmstart

    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    seen = {}

    def spy(model, input_ids, labels, mask, config, description, **kw):
        seen.update(ids=input_ids, labels=labels, config=config)
        return model.eval()

    monkeypatch.setattr(warmstart, "train", spy)
    warm = agent(task, WarmUpSettings(steps=2, lr=1e-4, target="={answer}"))
    tok = warm.tokenizer
    row = seen["labels"][0]
    taught = tok.decode([t for t in row.tolist() if t != -100])
    assert taught == "=" + str(task.split("seed")[0].label) + tok.eos_token
    assert seen["config"].schedule == "constant" and seen["config"].lr == 1e-4 and seen["config"].steps == 2


def test_a_warm_up_needs_a_seed_split_and_a_good_target():
    recipe = {"task": {"type": "drills", "forms": ["max"], "train_size": 8, "eval_size": 4},
              "agents": [{"name": "a", "model": "zoo:llama-tiny", "zoo_steps": 0, "warm_up": {"steps": 2}}], "topology": {"type": "self"}}
    with pytest.raises(ConfigError, match=r"agents\[0\]\.warm_up: a warm-up of 2 steps trains on the task.s labeled seed split"):
        load_recipe(recipe)
    with pytest.raises(ValueError, match="must contain"):
        WarmUpSettings(target="Answer:")
    with pytest.raises(ValueError, match="only {answer}"):
        WarmUpSettings(target="{answer} {other}")
    ok = {**recipe, "task": {**recipe["task"], "seed_size": 8}}
    spec = load_recipe(ok)
    assert spec.agents[0].agent.config.warm_up.steps == 2


def test_the_run_summary_records_each_agents_warm_up():
    from types import SimpleNamespace

    from corl.runtime.metrics import warm_ups

    record = {"steps": 4, "warm_up_fingerprint": "f"}
    run = SimpleNamespace(agents=[SimpleNamespace(name="a", agent=SimpleNamespace(warm_up=record)),
                                  SimpleNamespace(name="b", agent=SimpleNamespace(warm_up=None)),
                                  SimpleNamespace(name="c", agent=object())])  # an agent type without warm-ups
    assert warm_ups(run) == {"a": record}
