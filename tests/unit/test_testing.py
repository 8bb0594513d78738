"""The plugin authors' kit (corl.testing) does what it says: fake agents that learn, inline
plugins for one run, runs that can be compared exactly."""

import json
from pathlib import Path

import corl
from corl.testing import FakePlugin, fake_recipe, outcome, run_tiny


def test_fake_agents_learn_from_their_peers_on_held_out_prompts(corl_run):
    summary, out = corl_run(overrides=["run.steps=15"])
    for name, s in summary["agents"].items():
        assert s["after"]["pass@1"] > s["before"]["pass@1"] + 0.2, name
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["kind"] == "train"] == list(range(1, 16))


def test_an_inline_plugin_observes_one_run_only(corl_run):
    seen = []

    class Watch:
        @corl.hookimpl
        def corl_on_step_end(self, run, step, metrics):
            seen.append((step, sorted(metrics.agents)))

    corl_run(overrides=["run.steps=2"], plugins=[Watch()])
    corl_run(overrides=["run.steps=2"])  # not registered here
    assert seen == [(1, ["fake0", "fake1", "fake2"]), (2, ["fake0", "fake1", "fake2"])]


def test_same_seed_same_run_and_outcome_ignores_timings(tmp_path):
    recipe = fake_recipe(**{"run.observers": ["jsonl", "checkpoint"]})
    run_tiny(tmp_path / "a", recipe)
    run_tiny(tmp_path / "b", recipe)
    a, b = outcome(tmp_path / "a"), outcome(tmp_path / "b")
    assert a[0] == b[0] and a[1] == b[1]
    assert set(a[2]) == {"fake0", "fake1", "fake2"}
    assert all((a[2][n]["logits"] == b[2][n]["logits"]).all() for n in a[2])
    other = run_tiny(tmp_path / "c", fake_recipe(**{"run.seed": 1}))
    assert other["agents"] != a[0]["agents"]


def test_the_fake_components_are_registered_like_any_plugin():
    from corl.plugins import build_registry, make_plugin_manager

    registry = build_registry(make_plugin_manager([FakePlugin()], autoload=False))
    assert [(c.kind, c.name) for c in registry if c.name == "fake"] == [("agent", "fake"), ("optimizer", "fake"),
                                                                       ("sampler", "fake")]


def test_fails_naming_checks_what_a_user_sees_when_a_plugin_breaks(tmp_path):
    import pytest

    from corl.errors import PluginError
    from corl.testing import fails_naming

    with fails_naming("my-plugin") as failure:
        raise PluginError("plugin 'my-plugin': corl_on_step_end raised ValueError: x")
    assert isinstance(failure.error, PluginError)
    with pytest.raises(AssertionError, match="does not name 'my-plugin'"), fails_naming("my-plugin"):
        raise PluginError("plugin 'other': ...")
    with pytest.raises(AssertionError, match="no corl error naming 'my-plugin' was raised"), fails_naming("my-plugin"):
        pass
    with pytest.raises(ValueError), fails_naming("my-plugin"):  # a raw error stays a raw error
        raise ValueError("deep inside")


def test_the_kits_failure_path_example_runs_as_written(tmp_path, broken_plugin, monkeypatch):
    """The example in corl.testing's docstring, run as a plugin author would."""
    import textwrap

    import corl.testing
    from corl.plugins import ALLOW_ENV, AUTOLOAD_ENV

    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    example = textwrap.dedent(corl.testing.__doc__.split("::\n", 1)[1])
    namespace = {}
    exec(compile(example, "corl.testing example", "exec"), namespace)
    namespace["test_a_broken_router_is_named"](tmp_path)
    namespace["test_a_plugin_that_fails_to_import_is_skipped_and_named"](broken_plugin)


def test_tiny_for_shrinks_a_warm_start_only_where_a_recipe_asks_for_one(tmp_path):
    from tests.kit import TINY, tiny_for

    root = Path(__file__).resolve().parents[2] / "recipes"
    assert "zoo.steps=20" not in tiny_for(root / "three_agent_ring.toml")  # shipped zoo:*-add3 models: no [zoo]
    assert set(tiny_for(root / "three_agent_ring.toml")) == set(TINY) - {"zoo.steps=20"}  # the addition task's keys
    assert "zoo.steps=20" in tiny_for(root / "data_file.toml")
    own = tmp_path / "own.toml"
    own.write_text('[zoo]\nsteps = 900\n[[agents]]\nname = "a"\nmodel = "zoo:llama-tiny"\nzoo_steps = 50\n')
    assert {"zoo.steps=20", "agents[0].zoo_steps=20"} <= set(tiny_for(own))


WORDS = ("apple", "pear", "plum", "fig", "lime")


class Fruit:
    """A task whose answers are words: a fake agent writing numbers would never be right."""

    def __init__(self, config=None, ctx=None):
        self.verifier = self

    def split(self, name):
        return [corl.Prompt(f"{name}{i}", f"fruit {i}?", WORDS[i % len(WORDS)]) for i in range(32)]

    def extract(self, text):
        return text if text in WORDS else None

    def equivalent(self, a, b):
        return a == b


def test_fake_agents_answer_in_the_tasks_alphabet_from_a_vocabulary_or_a_callable(tmp_path):
    recipe = fake_recipe(**{"run.steps": 1, "eval.size": 16})
    for agent in recipe["agents"]:
        agent["vocabulary"] = list(WORDS)
    summary = run_tiny(tmp_path / "vocabulary", recipe, task=Fruit())
    assert all(summary["agents"][name]["before"]["pass@4"] > 0 for name in ("fake0", "fake1", "fake2"))
    texts = {json.loads(line)["completion"] for line in (tmp_path / "vocabulary" / "samples.jsonl").read_text().splitlines()}
    assert texts and texts <= set(WORDS)

    shout = FakePlugin(answers=lambda prompt, wrong: [prompt.label.upper(), *["NOPE"] * wrong])
    run_tiny(tmp_path / "callable", fake_recipe(**{"run.steps": 1}), plugins=[shout],
             task=type("Loud", (Fruit,), {"extract": lambda self, t: t.lower() if t.lower() in WORDS else None})())
    texts = {json.loads(line)["completion"] for line in (tmp_path / "callable" / "samples.jsonl").read_text().splitlines()}
    assert texts and texts <= {w.upper() for w in WORDS} | {"NOPE"}


def test_fake_recipe_takes_tables_at_any_key():
    recipe = fake_recipe(**{"task": {"type": "addition", "train_size": 16}, "agents[1].sampler": {"type": "fake"},
                            "shaping": [{"name": "len", "type": "length", "weight": 0.1}]})
    assert recipe["task"] == {"type": "addition", "train_size": 16}
    assert recipe["agents"][1]["sampler"] == {"type": "fake"} and recipe["shaping"][0]["weight"] == 0.1


def test_write_recipe_writes_the_table_a_recipe_file_reads_back(tmp_path):
    import tomllib

    from corl.recipe import load_recipe
    from corl.testing import write_recipe

    recipe = fake_recipe(2, **{"run.steps": 20, "agents[1].sampler": {"type": "fake"}, "agents[0].name": "a",
                               "shaping": [{"name": "len", "type": "length_penalty", "max_tokens": 8, "weight": 0.1}]})
    path = write_recipe(tmp_path / "r.toml", recipe)
    assert tomllib.loads(path.read_text()) == recipe
    registry = registry_with_fakes()
    assert load_recipe(path, registry=registry).agents[0].name == "a"


def registry_with_fakes():
    from corl.plugins import make_plugin_manager, registry_of

    return registry_of(make_plugin_manager([FakePlugin()], autoload=False))


def test_run_view_is_the_run_an_observer_sees_and_records_its_stops(tmp_path):
    from corl.context import RunView
    from corl.testing import ToyAgent, ToyAgentView, run_view

    trained, frozen = ToyAgentView("a", ToyAgent(), optimizer=object()), ToyAgentView("j", ToyAgent())
    view = run_view(tmp_path, agents=[trained, frozen], start_step=3, name="t", steps=9)
    assert isinstance(view, RunView) and view.output_dir == tmp_path and view.start_step == 3
    assert (view.spec.run.name, view.spec.run.steps) == ("t", 9)
    assert [(a.name, a.frozen) for a in view.spec.agents] == [("a", False), ("j", True)]
    assert view.layout.is_writer and view.layout.leads("a")
    view.request_stop("enough")
    assert view.stops == ["enough"]


def test_toy_agent_is_an_agent_whose_state_round_trips(tmp_path):
    import torch

    from corl.protocols import Agent
    from corl.testing import ToyAgent

    agent = ToyAgent(2, 3)
    assert isinstance(agent, Agent) and agent.parameters() == [agent.theta]
    with torch.no_grad():
        agent.theta.fill_(2.0)
    agent.freeze_reference()
    agent.save_state(str(tmp_path))
    with torch.no_grad():
        agent.theta.fill_(5.0)
    logp, entropy = agent.token_logprobs(None, [1], reference=True)
    assert logp.tolist() == [[2.0] * 3] and entropy.shape == (1, 3)
    held = agent.theta
    agent.load_state(str(tmp_path))
    assert agent.theta is held and agent.theta.tolist() == [[2.0] * 3] * 2


def test_tiny_agent_is_built_from_the_setup_its_type_declares(cache_dir):
    import pytest

    from corl.protocols import LanguageModelAgent
    from corl.testing import tiny_agent

    agent, ctx = tiny_agent(warm_steps=1, name="t")
    assert isinstance(agent, LanguageModelAgent) and ctx.agent is agent and agent.name == "t"
    assert ctx.task.split("seed")  # the task of the hf agent's tiny setup, warm-started on
    with pytest.raises(LookupError, match=r"agent type 'fake' declares no tiny setup; these do: hf$"):
        tiny_agent(agent_type="fake")
