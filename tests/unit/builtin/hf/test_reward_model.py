"""A learned reward model as a shaping term: a tiny LlamaForSequenceClassification (num_labels = 1)
built and saved here scores completions in batches exactly as one at a time; in a run it adds to the
peer reward, and with run.peer_reward = false it is the whole reward (the judge-style baseline)."""

import json

import pytest
import torch

import corl
from corl.builtin.hf.reward_model import RewardModel, RewardModelConfig
from corl.errors import ConfigError, CorlError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.testing import FakeOptimizer, FakeOptimizerConfig, FakePlugin, fake_recipe
from corl.types import Prompt, Rollout


def tiny_reward_model(folder, num_labels=1):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from corl.builtin.hf.models.sources import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve("zoo:llama-add3"))  # shipped: no warm-start
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=num_labels,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_reward_model(tmp_path_factory.mktemp("rm") / "rm")


def test_batched_scores_equal_one_at_a_time_and_the_grid_is_per_sample(model_dir):
    term = RewardModel(RewardModelConfig(model=model_dir, batch_size=3))
    prompts = ["12+34=", "5+6=", "100+1="]
    completions = ["64", "1100", "1", "999999", "2", "11"]
    pairs = [(p, c) for p in prompts for c in completions[:2]]
    batched = term.scores([p for p, _ in pairs], [c for _, c in pairs])
    single = [term.scores([p], [c])[0] for p, c in pairs]
    assert batched == pytest.approx(single, abs=1e-5) and len(set(round(x, 6) for x in batched)) > 1
    rollout = Rollout(agent="a", prompts=tuple(Prompt(i, p, 0) for i, p in enumerate(prompts)),
                      texts=tuple(tuple(completions[i * 2: i * 2 + 2]) for i in range(3)),
                      lengths=((1, 1),) * 3, confidences=((0.0, 0.0),) * 3)
    grid = term.score(rollout, [[None] * 2] * 3, None)
    expected = term.scores([p for p in prompts for _ in range(2)], completions)
    assert grid == [expected[0:2], expected[2:4], expected[4:6]]


def test_bad_reward_model_folders_are_one_line(tmp_path):
    registry = build_registry(make_plugin_manager([FakePlugin()], autoload=False))
    data = fake_recipe(agents=1)
    data["shaping"] = [{"type": "reward_model", "model": str(tmp_path / "nope")}]
    with pytest.raises(ConfigError, match=r"shaping\[0\]\.model: invalid value .*nope.: no such folder"):
        load_recipe(data, registry=registry)
    two = tiny_reward_model(tmp_path / "two", num_labels=2)
    with pytest.raises(CorlError, match=r"has 2 outputs \(num_labels\); a reward model gives one score"):
        RewardModel(RewardModelConfig(model=two))


class Recording(FakeOptimizer):
    trained: list = []

    def step(self, rollout, rewards):
        Recording.trained.append([list(r) for r in rewards])
        return super().step(rollout, rewards)


class Plugin:
    @corl.hookimpl
    def corl_register_components(self, registry):
        registry.add("optimizer", "recording", Recording, FakeOptimizerConfig)


@pytest.mark.parametrize("peer", [True, False])
def test_a_run_with_a_reward_model_term(corl_run, model_dir, peer):
    Recording.trained = []
    data = fake_recipe(agents=2, **{"run.steps": 2, "voting.n_votes": 4, "voting.n_train": 4,
                                    "run.peer_reward": peer})
    for agent in data["agents"]:
        agent["optimizer"]["type"] = "recording"
    data["shaping"] = [{"type": "reward_model", "model": model_dir, "batch_size": 8, "weight": 1.0}]
    _, out = corl_run(data, plugins=[Plugin()])
    train = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    for m in (m for r in train for m in r["agents"].values()):
        assert "shaping/reward_model" in m
        if not peer:  # the whole reward: what is trained on is the model's score
            assert m["reward_mean"] == pytest.approx(m["shaping/reward_model"])
    values = {r for rows in Recording.trained for row in rows for r in row}
    assert len(values) > 2 and not values <= {0.0, 1.0}  # scores, not vote rewards
