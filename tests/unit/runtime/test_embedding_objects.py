"""Every component kind can be handed to ``corl.run`` as an object (``agents=``, ``samplers=``,
``optimizers=``, ``shaping=``, ``observers=``, by name), not only the task, the aggregator and the
router: the run uses the object, records it in place of the recipe's table, never looks that table
up in the registry, and checks the object at the boundary in one line naming the argument."""

import json

import pytest

import corl
from corl.testing import context, fake_recipe, run_tiny, tiny_agent

#: one tiny zoo agent alone, two training steps of two prompts: seconds on a CPU
ZOO = {
    "run": {"steps": 2, "prompts_per_step": 2, "threads": 1, "observers": ["jsonl"], "checkpoint_every": 2},
    "task": {"type": "arithmetic", "seed_size": 64, "train_size": 16, "eval_size": 4},
    "agents": [{"name": "a", "model": "zoo:llama-tiny"}],
    "voting": {"n_votes": 4, "n_train": 4},
    "topology": {"type": "self"},
    "eval": {"size": 0},
    "zoo": {"steps": 5},
}


class Counting:
    """A user's sampler: the built-in ``hf`` sampler (built with ``ctx.build``), counting its calls."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
        self.calls.append((len(prompts), n, greedy))
        return self.inner.sample(agent, prompts, n, greedy=greedy, temperature=temperature)

    def sync(self, agent):
        self.inner.sync(agent)


class Tracked:
    """A user's optimizer: the built-in ``grpo`` around the agent it was made for, counting its steps."""

    def __init__(self, inner):
        self.inner, self.steps = inner, 0

    def step(self, rollout, rewards):
        self.steps += 1
        return self.inner.step(rollout, rewards)

    def save_state(self, path):
        self.inner.save_state(path)

    def load_state(self, path):
        self.inner.load_state(path)


class Longer:
    """A user's shaping term: a bonus per character of each completion."""

    def __init__(self, per_char=0.01):
        self.per_char, self.scored = per_char, 0

    def score(self, rollout, answers, verifier, truth=None):
        self.scored += 1
        return [[self.per_char * len(text) for text in texts] for texts in rollout.texts]


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_zoo_run_with_its_own_agent_sampler_and_optimizer_objects(tmp_path, cache_dir):
    """The agent's table names a type no plugin has: the objects replace every table of the agent."""
    agent, ctx = tiny_agent(warm_steps=5)
    sampler = Counting(context().build("sampler", "hf", {"max_new_tokens": 8}))
    optimizer = Tracked(ctx.build("optimizer", "grpo", {"lr": 1e-3}))
    before = [p.detach().clone() for p in agent.parameters()]
    recipe = {**ZOO, "agents": [{"name": "a", "type": "not-installed", "sampler": {"type": "nor-this"},
                                 "optimizer": {"type": "nor-that"}}]}
    summary = corl.run(recipe, [f"run.output_dir={tmp_path}"], agents={"a": agent}, samplers={"a": sampler},
                       optimizers={"a": optimizer})
    assert summary["steps"] == 2
    assert [call for call in sampler.calls if not call[2]] == [(2, 4, False)] * 2  # each training step's draw
    assert optimizer.steps == 2
    assert any(not bool((p.detach() == b).all()) for p, b in zip(agent.parameters(), before))  # it trained this agent
    saved = json.loads((tmp_path / "recipe.json").read_text())["agents"][0]
    here = __name__
    assert saved["object"] == type(agent).__qualname__ and "type" not in saved
    assert saved["sampler"] == {"object": "Counting", "import": f"{here}:Counting"}
    assert saved["optimizer"] == {"object": "Tracked", "import": f"{here}:Tracked"}
    assert (tmp_path / "checkpoints" / "step-000002" / "optimizers" / "a").is_dir()  # its state in the checkpoint


def test_a_zoo_run_with_its_own_shaping_term_object(tmp_path, cache_dir):
    term = Longer(per_char=0.01)
    recipe = {**ZOO, "shaping": [{"name": "longer", "type": "not-installed", "weight": 0.5}]}
    summary = corl.run(recipe, [f"run.output_dir={tmp_path}"], shaping={"longer": term})
    assert summary["steps"] == 2 and term.scored == 2
    steps = [r for r in metrics(tmp_path) if "shaping/longer" in json.dumps(r)]
    assert len(steps) == 2, metrics(tmp_path)
    saved = json.loads((tmp_path / "recipe.json").read_text())["shaping"]
    assert saved == [{"object": "Longer", "import": f"{__name__}:Longer", "name": "longer", "weight": 0.5}]


def test_a_shaping_object_the_recipe_does_not_name_is_added_with_weight_one(tmp_path):
    term = Longer()
    assert run_tiny(tmp_path, fake_recipe(**{"run.steps": 1}), shaping={"extra": term})["steps"] == 1
    assert term.scored == 3  # each of the three agents' rollouts
    saved = json.loads((tmp_path / "recipe.json").read_text())["shaping"]
    assert saved == [{"object": "Longer", "import": f"{__name__}:Longer", "name": "extra", "weight": 1.0}]


class Seen:
    """A user's observer object."""

    def __init__(self):
        self.steps = []

    @corl.hookimpl
    def corl_on_step_end(self, step):
        self.steps.append(step)


def test_an_observer_object_is_attached_by_name_without_the_registry(tmp_path):
    seen = Seen()
    recipe = fake_recipe(**{"run.steps": 2, "run.observers": ["jsonl", "mine"], "observers.mine": {"x": 1}})
    assert run_tiny(tmp_path, recipe, observers={"mine": seen})["steps"] == 2
    assert seen.steps == [1, 2]


@pytest.mark.parametrize("components, message", [
    ({"samplers": {"fake0": Counting}}, r"^samplers\['fake0'\]=Counting is a class; corl.run takes an object: "
                                        r"samplers\['fake0'\]=Counting\(\.\.\.\)$"),
    ({"samplers": {"fake0": object()}}, r"^samplers\['fake0'\]= object object: not a corl Sampler: it has no "
                                        r"sample, sync"),
    ({"agents": {"nobody": object()}}, r"^agents\['nobody'\]: the recipe has no agent 'nobody' \(agents: fake0, "
                                       r"fake1, fake2\)$"),
    ({"optimizers": {"fake0": Tracked(None)}}, r"^optimizers\['fake0'\]: an optimizer updates the agent it was made "
                                                r"for, and agent 'fake0' is built from the recipe; hand in that agent "
                                                r"too"),
    ({"shaping": {"mine": Counting(None)}}, r"^shaping\['mine'\]= object Counting: not a corl RewardShaping: it has "
                                            r"no score"),
    ({"observers": {"mine": object()}}, r"^observers\['mine'\]= object object: not a corl observer"),
    ({"samplers": [Counting(None)]}, r"^samplers=: expected a mapping of names to objects"),
])
def test_a_wrong_object_is_one_line_naming_its_argument_before_anything_is_built(tmp_path, components, message):
    with pytest.raises(corl.ConfigError, match=message) as refused:
        run_tiny(tmp_path, fake_recipe(**{"run.steps": 1}), **components)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "recipe.json").exists()


class Tempered(Counting):
    """A sampler with a setting of its own."""

    def __init__(self, inner, temperature):
        super().__init__(inner)
        self.temperature = temperature


def test_python_resume_with_a_sampler_object_compares_its_settings_and_the_cli_refuses_it(tmp_path):
    from corl.testing.fakes import FakeSampler

    recipe = fake_recipe(**{"run.steps": 1, "run.checkpoint_every": 1})
    run_tiny(tmp_path, recipe, samplers={"fake1": Tempered(FakeSampler(), 0.7)})
    with pytest.raises(corl.CorlError, match=r"samplers\['fake1'\]= object Tempered: temperature: 0.7 -> 0.9"):
        run_tiny(tmp_path, str(tmp_path), ["run.steps=2"], resume=True,
                 samplers={"fake1": Tempered(FakeSampler(), 0.9)})
    with pytest.raises(corl.ConfigError, match=r"agents\[1\].sampler: the run in .* was built in Python with "
                                               r"samplers\['fake1'\]= object Tempered .*resume=True, "
                                               r"samplers=\{'fake1': Tempered\(\.\.\.\)\}\)"):
        run_tiny(tmp_path, str(tmp_path), ["run.steps=2"], resume=True)
    summary = run_tiny(tmp_path, str(tmp_path), ["run.steps=2"], resume=True,
                       samplers={"fake1": Tempered(FakeSampler(), 0.7)})
    assert summary["steps"] == 2


def test_an_optimizer_object_for_a_frozen_agent_is_refused(tmp_path):
    from corl.testing.fakes import FakeAgent, FakeAgentConfig

    recipe = fake_recipe(**{"run.steps": 1, "agents[0].frozen": True})
    with pytest.raises(corl.ConfigError, match=r"^optimizers\['fake0'\]: agent 'fake0' is frozen"):
        run_tiny(tmp_path, recipe, agents={"fake0": FakeAgent(FakeAgentConfig(), context(agent_name="fake0"))},
                 optimizers={"fake0": Tracked(None)})
