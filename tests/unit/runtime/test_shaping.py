"""Reward shaping in a run: each [[shaping]] term, times its weight, is added to the router's reward of
every completion; the peer reward stays what the label-free metrics read; a term that reads labels is
refused in a label-free recipe; what a term returns is checked where it comes back."""

import json
import math

import pytest

import corl
from corl.errors import ConfigError, PluginError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe, to_dict
from corl.testing import FakeOptimizer, FakeOptimizerConfig, FakePlugin, fake_recipe
from corl.types import NoConfig


class Flat:
    """A label-free router object: every completion gets 0.5."""

    def route(self, votes, labels, verifier, aggregator, truth=None):
        return {name: [[0.5] * len(row) for row in rows] for name, rows in votes.items()}


class Terms:
    """Shaping terms with known values, and an optimizer that records the rewards it trains on."""

    trained: list = []  # (agent, rewards) per step
    truths: list = []

    class SampleIndex:  # value = the sample's index in its group
        def __init__(self, config, ctx):
            pass

        def score(self, rollout, answers, verifier, truth=None):
            Terms.truths.append(truth)
            return [list(range(len(row))) for row in rollout.texts]

    class Answered:  # 1 for a completion that states an answer
        def __init__(self, config, ctx):
            pass

        def score(self, rollout, answers, verifier, truth=None):
            return [[float(a is not None) for a in row] for row in answers]

    class Correct(Answered):  # reads labels: declared
        needs_labels = True

        def score(self, rollout, answers, verifier, truth=None):
            Terms.truths.append(truth)
            return [[float(a is not None and verifier.equivalent(a, t)) for a in row] for row, t in zip(answers, truth)]

    class Broken(Answered):
        value = math.nan

        def score(self, rollout, answers, verifier, truth=None):
            return [[self.value] * len(row) for row in rollout.texts]

    class Short(Answered):
        def score(self, rollout, answers, verifier, truth=None):
            return [[0.0] for _ in rollout.texts]  # one value per prompt, not per sample

    class Recording(FakeOptimizer):
        def step(self, rollout, rewards):
            Terms.trained.append((rollout.agent, [list(r) for r in rewards]))
            return super().step(rollout, rewards)

    @corl.hookimpl
    def corl_register_components(self, registry):
        for name, cls in [("index", self.SampleIndex), ("answered", self.Answered), ("correct", self.Correct),
                          ("broken", self.Broken), ("short", self.Short)]:
            registry.add("shaping", name, cls, NoConfig)
        registry.add("optimizer", "recording", self.Recording, FakeOptimizerConfig)


def recipe(shaping, **changes):
    data = fake_recipe(agents=2, **{"run.steps": 2, "voting.n_votes": 4, "voting.n_train": 3, **changes})
    for agent in data["agents"]:
        agent["optimizer"]["type"] = "recording"
    data["shaping"] = shaping
    return data


@pytest.fixture(autouse=True)
def fresh():
    Terms.trained, Terms.truths = [], []


def test_terms_times_their_weights_are_added_to_the_peer_reward(corl_run):
    _, out = corl_run(recipe([{"type": "index", "weight": 2.0}, {"type": "answered", "weight": -0.25}]),
             plugins=[Terms()], router=Flat())
    assert len(Terms.trained) == 4  # 2 agents x 2 steps
    for _, rewards in Terms.trained:  # the first n_train = 3 samples: 0.5 + 2 * index - 0.25 (fake agents always answer)
        assert rewards == [[0.5 + 2 * s - 0.25 for s in range(3)]] * 8
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    for m in (m for r in records if r["kind"] == "train" for m in r["agents"].values()):
        assert m["reward_mean"] == 0.5 and m["reward_std"] == 0.0  # the peer reward, as the health checks read it
        assert m["shaping/index"] == 1.0 and m["shaping/answered"] == 1.0
        assert m["shaped_reward_mean"] == pytest.approx(0.5 + 2.0 - 0.25)
        assert m["shaped_reward_std"] == pytest.approx(2 * math.sqrt(2 / 3))
    assert Terms.truths and all(t is None for t in Terms.truths)  # a term that does not declare labels gets none


def test_without_shaping_the_optimizer_trains_on_the_peer_reward(corl_run):
    corl_run(recipe([]), plugins=[Terms()], router=Flat())
    assert all(rewards == [[0.5] * 3] * 8 for _, rewards in Terms.trained)


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager([FakePlugin(), Terms()], autoload=False))


def test_a_term_that_reads_labels_is_refused_in_a_label_free_recipe(registry):
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe([{"type": "answered"}, {"type": "correct", "weight": 0.5}]), registry=registry)
    assert list(info.value.problems) == [
        "<recipe>: shaping[1].type: 'correct' rewards with ground-truth labels, which a label-free run never reads; "
        "drop it, or declare a supervised baseline (run.supervised = true)"]


def test_a_supervised_run_hands_labels_to_the_term_that_declares_it(corl_run):
    corl_run(recipe([{"type": "correct"}], **{"run.supervised": True, "topology.type": "ground_truth"}),
             plugins=[Terms()])
    assert Terms.truths and all(t is not None and all(isinstance(x, int) for x in t) for t in Terms.truths)


@pytest.mark.parametrize("shaping, problem", [
    ([{"weight": 1.0}], "shaping[0].type: missing; available: answered, boxed, broken, correct, index, length_penalty, "
                        "regex, reward_model, short"),
    ([{"type": "nope"}], "shaping[0].type: unknown shaping 'nope'; available: answered, boxed"),
    ([{"type": "boxed", "weight": "high"}], "shaping[0].weight: expected a number, got 'high'"),
    ([{"type": "boxed", "colour": 1}], "shaping[0].colour: unknown key"),
    ([{"type": "boxed"}, {"type": "boxed"}], "shaping[1].name: 'boxed' is also shaping[0]'s name"),
    ([{"type": "length_penalty", "max_tokens": 8, "buffer": 8}], "shaping[0]: buffer (8) must be below max_tokens (8)"),
    ([{"type": "regex", "pattern": "(unclosed"}], "shaping[0].pattern: invalid value '(unclosed': not a regular "
                                                  "expression"),
    ({"type": "boxed"}, "shaping: expected [[shaping]] tables"),
])
def test_recipe_mistakes_in_shaping_name_their_key_path(registry, shaping, problem):
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe(shaping), registry=registry)
    assert any(p.startswith(f"<recipe>: {problem}") for p in info.value.problems), info.value.problems


def test_the_resolved_recipe_lists_the_shaping_terms(registry):
    spec = load_recipe(recipe([{"type": "boxed", "weight": 0.1}, {"type": "length_penalty", "name": "long",
                                                                  "max_tokens": 64, "buffer": 16}]), registry=registry)
    assert to_dict(spec)["shaping"] == [{"type": "boxed", "name": "boxed", "weight": 0.1},
                                        {"type": "length_penalty", "name": "long", "weight": 1.0, "max_tokens": 64,
                                         "buffer": 16}]
    # always there; a recipe saved before [[shaping]] existed lacks it, which stands for its default (none)
    assert to_dict(load_recipe(recipe([]), registry=registry))["shaping"] == []


@pytest.mark.parametrize("term, message", [
    ("broken", r"shaping 'broken' \('broken', plugin .*Terms.*\) returned nan \(agent 'fake0', prompt 0, sample 0\); "
               r"expected a finite number"),
    ("short", r"shaping 'short' \('short', plugin .*\) returned 1 values for prompt 0 of agent 'fake0', expected one "
              r"per sample \(4\)"),
])
def test_what_a_term_returns_is_checked_at_the_boundary(corl_run, term, message):
    with pytest.raises(PluginError, match=message):
        corl_run(recipe([{"type": term}]), plugins=[Terms()])


# -- a plain reward function (TRL's reward_funcs), by import path ------------------------------------

CALLS: list = []


def length_reward(prompts, completions, answers, agent, **kwargs):
    """TRL-style: one number per completion."""
    CALLS.append({"prompts": prompts, "completions": completions, "answers": answers, "agent": agent, **kwargs})
    return [0.1 * len(c) for c in completions]


def graded(prompts, completions, labels, **kwargs):
    return [float(a == str(t)) for a, t in zip(completions, labels)]


graded.needs_labels = True


def too_few(prompts, completions, **kwargs):
    return [1.0]


def failing(prompts, completions, **kwargs):
    raise ValueError("no reward today")


def test_a_reward_function_is_a_shaping_term_where_import_paths_are_allowed(corl_run, monkeypatch):
    CALLS.clear()
    here = __name__
    shaping = [{"type": f"{here}:length_reward", "weight": 2.0}]
    with pytest.raises(ConfigError, match=r"shaping\[0\]\.type: '.*:length_reward' is an import path; .*"
                                          r"CORL_ALLOW_IMPORT_PATHS=1"):
        corl_run(recipe(shaping), plugins=[Terms()], router=Flat())
    monkeypatch.setenv("CORL_ALLOW_IMPORT_PATHS", "1")
    _, out = corl_run(recipe(shaping), plugins=[Terms()], router=Flat())
    call = CALLS[0]
    assert len(call["completions"]) == len(call["prompts"]) == len(call["answers"]) == 8 * 4  # prompts x n_votes
    assert call["prompts"][:4] == [call["prompts"][0]] * 4 and call["agent"] == "fake0" and "labels" not in call
    assert len(CALLS) == len(Terms.trained) == 4  # once per agent and step
    for call, (agent, rewards) in zip(CALLS, Terms.trained):  # 0.5 from the router + 2 x 0.1 x length, n_train of 4
        assert call["agent"] == agent
        expected = [0.5 + 0.2 * len(c) for c in call["completions"]]
        assert [r for row in rewards for r in row] == pytest.approx([r for p in range(8) for r in expected[p * 4: p * 4 + 3]])
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[1])
    assert "shaping/length_reward" in first["agents"]["fake0"]  # named after the function
    with pytest.raises(ConfigError, match=r"shaping\[0\]\.type: 'graded' rewards|shaping\[0\]\.type: '.*:graded' "
                                          r"rewards with ground-truth labels"):
        corl_run(recipe([{"type": f"{here}:graded"}]), plugins=[Terms()], router=Flat())
    corl_run(recipe([{"type": f"{here}:graded"}], **{"run.supervised": True, "topology.type": "ground_truth"}),
             plugins=[Terms()])
    with pytest.raises(ConfigError, match=r"shaping\[0\]\.colour: unknown key"):
        corl_run(recipe([{"type": f"{here}:length_reward", "colour": 1}]), plugins=[Terms()])


@pytest.mark.parametrize("fn, message", [
    ("too_few", r"reward function '.*:too_few' returned 1 values for 32 completions; return one number per completion"),
    ("failing", r"reward function '.*:failing' raised ValueError: no reward today"),
])
def test_a_reward_function_that_fails_is_named(corl_run, monkeypatch, fn, message):
    monkeypatch.setenv("CORL_ALLOW_IMPORT_PATHS", "1")
    with pytest.raises(PluginError, match=message):
        corl_run(recipe([{"type": f"{__name__}:{fn}"}]), plugins=[Terms()], router=Flat())


# -- reward function objects from Python (corl.run(rewards=[...])) and the whole reward --------------

def test_reward_function_objects_need_no_import_path_or_environment_variable(corl_run, monkeypatch):
    monkeypatch.delenv("CORL_ALLOW_IMPORT_PATHS", raising=False)
    seen = []

    def brevity(prompts, completions, **kwargs):  # defined in a function: no import path names it
        seen.append(len(completions))
        return [1.0 / (1 + len(c)) for c in completions]

    _, out = corl_run(recipe([{"type": "answered", "weight": 0.5}], **{"run.checkpoint_every": 1}), plugins=[Terms()],
                      router=Flat(),
                      rewards=[(brevity, 2.0)])
    assert seen == [32] * 4  # once per agent and step, every completion
    recorded = json.loads((out / "recipe.json").read_text())["shaping"]
    assert [(t["type"], t["weight"]) for t in recorded] == [("answered", 0.5), ("brevity", 2.0)]
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[1])["agents"]["fake0"]
    assert "shaping/brevity" in first and first["reward_mean"] == 0.5  # added to the peer reward, which stays apart
    # resumed from Python with the same function: recipe.json names it, the run continues
    summary = corl.run(str(out), ["run.steps=3"], plugins=[FakePlugin(), Terms()], router=Flat(), resume=True,
                       rewards=[(brevity, 2.0)], autoload=False)
    assert summary["steps"] == 3 and len(seen) == 6


def test_with_peer_reward_off_the_functions_are_the_whole_reward(corl_run):
    """Supervised RLVR with a custom verifier: the function reads the labels, nothing else is paid."""
    def verifier(prompts, completions, answers, labels, **kwargs):
        return [float(a is not None and str(a) == str(t)) for a, t in zip(answers, labels)]

    verifier.needs_labels = True
    _, out = corl_run(recipe([], **{"run.supervised": True, "run.peer_reward": False, "topology.type": "ground_truth"}),
                      plugins=[Terms()], rewards=[verifier])
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    for m in (m for r in records if r["kind"] == "train" for m in r["agents"].values()):
        # the metrics read the reward trained on: the verifier's, with no peer reward under it
        assert m["reward_mean"] == m["shaped_reward_mean"] == m["shaping/verifier"]
    trained = [r for _, rewards in Terms.trained for row in rewards for r in row]
    assert set(trained) <= {0.0, 1.0} and 0.0 in trained and 1.0 in trained  # 0/1 correctness, never 1 + 1
    # the same with the peer reward on: the router's 1 for a correct answer comes on top
    Terms.trained = []
    corl_run(recipe([], **{"run.supervised": True, "topology.type": "ground_truth"}), plugins=[Terms()],
             rewards=[verifier])
    assert 2.0 in {r for _, rewards in Terms.trained for row in rewards for r in row}


def test_reward_objects_and_peer_reward_mistakes_are_one_line(corl_run, registry):
    with pytest.raises(ConfigError, match=r"run\.peer_reward: false leaves no reward: add \[\[shaping\]\] terms"):
        load_recipe(recipe([], **{"run.peer_reward": False}), registry=registry)
    with pytest.raises(ConfigError, match=r"rewards\[0\]: .* is not a reward function; expected a function taking "
                                          r"completions"):
        corl_run(recipe([]), plugins=[Terms()], rewards=[lambda x: x])
    with pytest.raises(ConfigError, match=r"rewards\[0\]: a reward function needs a name of its own"):
        corl_run(recipe([]), plugins=[Terms()], rewards=[lambda completions: [0.0] * len(completions)])

    def graded_too(prompts, completions, labels, **kwargs):
        return [0.0] * len(completions)

    graded_too.needs_labels = True
    with pytest.raises(ConfigError, match=r"'graded_too' rewards with ground-truth labels"):
        corl_run(recipe([]), plugins=[Terms()], rewards=[graded_too])
