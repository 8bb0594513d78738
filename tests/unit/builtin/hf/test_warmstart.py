"""The zoo's warm-start: ``stop`` ends it early while the learning-rate schedule still spans ``steps``
(a base inside its learning transition, reproducible from a recipe)."""

import pytest
import torch

from corl.builtin.hf.models import zoo
from corl.builtin.hf.models.config import ZooConfig
from corl.errors import ConfigError
from corl.recipe import load_recipe

EXAMPLES = [(f"{a}+{b}=", str(a + b)) for a in range(10) for b in range(10)]


class Stop(Exception):
    pass


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_stop_is_the_first_steps_of_the_longer_schedule():
    config = ZooConfig(steps=12, batch_size=8, lr=3e-3, schedule="cosine")
    stopped, _ = zoo.warm_start("llama", EXAMPLES, ZooConfig(steps=12, batch_size=8, lr=3e-3, stop=4))
    calls = []

    def interrupt():  # the full 12-step schedule, abandoned before its 5th step
        calls.append(1)
        if len(calls) == 5:
            raise Stop

    box = {}
    original = zoo.train

    def keep(model, *args, **kwargs):
        box["model"] = model
        return original(model, *args, **kwargs)

    zoo.train = keep
    try:
        with pytest.raises(Stop):
            zoo.warm_start("llama", EXAMPLES, config, check=interrupt)
    finally:
        zoo.train = original
    interrupted = weights(box["model"])
    short, _ = zoo.warm_start("llama", EXAMPLES, ZooConfig(steps=4, batch_size=8, lr=3e-3))
    got = weights(stopped)
    assert all(torch.equal(got[k], interrupted[k]) for k in got)  # 4 steps of the 12-step cosine
    assert not all(torch.equal(got[k], v) for k, v in weights(short).items())  # not a 4-step cosine


def test_stop_is_in_the_cache_key_and_the_log_only_when_set():
    assert "stop" not in ZooConfig().cache_key() and ZooConfig(steps=20).describe() == "20"
    assert ZooConfig(stop=5).cache_key()["stop"] == 5 and ZooConfig(steps=20, stop=5).describe() == "5 of 20"


RECIPE = {"task": {"type": "addition"}, "topology": {"type": "ring"}, "zoo": {"steps": 100},
          "agents": [{"name": "a", "model": "zoo:llama-tiny"}, {"name": "b", "model": "zoo:qwen2-tiny"}]}


@pytest.mark.parametrize(("change", "where", "what"), [
    ({"zoo": {"steps": 100, "stop": 200}}, "zoo", "stop (200) must not exceed steps (100)"),
    ({"agents": [{"name": "a", "model": "zoo:llama-tiny", "zoo_stop": 150}, RECIPE["agents"][1]]},
     "agents[0].zoo_stop", "stop (150) must not exceed steps (100)"),
    ({"zoo": {"steps": 100, "stop": 50},
      "agents": [RECIPE["agents"][0], {"name": "b", "model": "zoo:qwen2-tiny", "zoo_steps": 30}]},
     "agents[1].zoo_steps", "stop (50) must not exceed steps (30)"),
])
def test_a_stop_past_the_steps_is_refused_at_its_key(change, where, what):
    with pytest.raises(ConfigError) as err:
        load_recipe({**RECIPE, **change})
    assert err.value.problems == (f"<recipe>: {where}: {what}",)


def test_an_agent_stop_within_its_own_steps_validates():
    spec = load_recipe({**RECIPE, "agents": [{"name": "a", "model": "zoo:llama-tiny", "zoo_steps": 300, "zoo_stop": 150},
                                             RECIPE["agents"][1]]})
    assert spec.agents[0].agent.config.zoo_stop == 150


def test_zoo_curve_snapshot_is_the_zoo_stop_model(tmp_path, monkeypatch):
    """bench/zoo_curve.py --keep-schedule: snapshot S of a STEPS warm-start is what a recipe gets with
    zoo_steps = STEPS and zoo_stop = S (so a stop found on the curve is one recipe key)."""
    import importlib.util
    from pathlib import Path

    from safetensors.torch import load_file

    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path / "cache"))
    path = Path(__file__).resolve().parents[4] / "bench" / "zoo_curve.py"
    spec = importlib.util.spec_from_file_location("zoo_curve", path)
    curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curve)
    recipe = tmp_path / "r.toml"
    recipe.write_text('[task]\ntype = "addition"\nseed_size = 64\ntrain_size = 8\neval_size = 8\n'
                      '[zoo]\nbatch_size = 8\n[topology]\ntype = "ring"\n'
                      '[[agents]]\nname = "a"\nmodel = "zoo:llama-tiny"\n[[agents]]\nname = "b"\nmodel = "zoo:qwen2-tiny"\n')
    threads = torch.get_num_threads()
    try:
        curve.main(str(recipe), "a", 6, 2, tmp_path / "curve", [], keep=True)  # (at one thread)
    finally:
        torch.set_num_threads(threads)
    assert sorted(p.name for p in (tmp_path / "curve").glob("step-*")) == ["step-00002", "step-00004", "step-00006"]

    from corl.builtin.hf.models.config import ZooConfig
    from corl.builtin.tasks.addition import AdditionConfig, AdditionTask

    seed = AdditionTask(AdditionConfig(seed_size=64, train_size=8, eval_size=8)).split("seed")
    examples = [(p.text, str(p.label) if p.solution is None else p.solution) for p in seed]
    torch.set_num_threads(1)
    try:
        model, _ = zoo.warm_start("llama", examples, ZooConfig(steps=6, batch_size=8, stop=4))
    finally:
        torch.set_num_threads(threads)
    snapshot = load_file(tmp_path / "curve" / "step-00004" / "model.safetensors")
    assert all(torch.equal(snapshot[k], v) for k, v in model.state_dict().items() if k in snapshot)
    assert len(snapshot) >= len(model.state_dict()) - 1  # (a tied lm_head is saved once)
