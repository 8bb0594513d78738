"""recipes/real/max3_*: the three real families' recipes validate (the packaged models' presence
faked: this checks the recipes, not the machine), differ only where their names say, fix their
warm-ups apart from the prompts the counts were chosen on, and the generator reproduces the baselines."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

from corl.builtin.hf.models import sources
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.tools.claims import load_claims

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "recipes" / "real"
NAMES = ("max3_pooled", "max3_self_reward", "max3_supervised")


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(sources, "_installed", lambda module: True)


@pytest.mark.parametrize("name", NAMES)
def test_recipe_validates(name, installed):
    spec = load_recipe(str(REAL / f"{name}.toml"), registry=build_registry(make_plugin_manager()))
    assert spec.run.name == name and spec.run.protocol == "test_time" and spec.run.threads == 1
    assert [a.name for a in spec.agents] == ["smollm2", "gemma3", "qwen_coder"]
    assert {a.agent.config.model for a in spec.agents} == {"pypi:smollm2-135m-instruct", "pypi:gemma3-270m",
                                                           "pypi:qwen2.5-coder-0.5b-instruct"}
    # the warm-ups fixed in advance (issue 38's screen, on generator seed 1234's eval prompts); evaluated here on seed 2026
    assert [a.agent.config.warm_up.steps for a in spec.agents] == [8, 4, 0]
    assert all(a.agent.config.warm_up.lr == 1e-5 for a in spec.agents)
    assert spec.task.config.seed != 1234 and spec.task.config.seed_size >= 32 and spec.task.config.forms == ("max",)
    assert spec.run.steps * spec.run.prompts_per_step == spec.eval.size  # test-time: each evaluated prompt once


def test_the_recipes_differ_only_where_their_names_say():
    read = {n: tomllib.loads((REAL / f"{n}.toml").read_text()) for n in NAMES}
    base = read["max3_pooled"]
    assert base["topology"] == {"type": "all_pairs", "combine": "vote"}
    assert read["max3_self_reward"]["topology"] == {"type": "self"}
    assert read["max3_supervised"]["topology"] == {"type": "ground_truth"} and read["max3_supervised"]["run"]["supervised"]
    for recipe in read.values():
        assert recipe["agents"] == base["agents"] and recipe["task"] == base["task"] and recipe["eval"] == base["eval"]
        assert recipe["voting"] == base["voting"]
        assert {k: v for k, v in recipe["run"].items() if k not in ("name", "supervised")} == \
            {k: v for k, v in base["run"].items() if k != "name"}


def test_claims_name_only_the_three_recipes():
    claims = load_claims(REAL / "max3_claims.toml", list(NAMES))
    assert {c["recipe"] for c in claims["claims"]} | {c.get("baseline") for c in claims["claims"] if c.get("baseline")} \
        == set(NAMES)
    assert {c["test"] for c in claims["claims"]} == {"improves", "beats", "not_worse"}


def test_generator_reproduces_the_committed_baselines(tmp_path):
    spec = importlib.util.spec_from_file_location("make_real_recipes", ROOT / "scripts" / "make_real_recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    written = {p.name: p.read_text() for p in tmp_path.glob("*.toml")}
    assert set(written) == {"headroom_self_reward.toml", "headroom_supervised.toml", "max3_self_reward.toml",
                            "max3_supervised.toml"}
    assert written == {name: (REAL / name).read_text() for name in written}
