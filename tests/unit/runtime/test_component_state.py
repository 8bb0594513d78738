"""Every component kind that implements Stateful keeps its state through a checkpoint: saved by the
run, restored on resume, so a resumed run equals an uninterrupted one."""

import json
from pathlib import Path

import attrs
import pytest

import corl
from corl.runtime.snapshot import STATEFUL_KINDS
from corl.testing import conformance, fake_recipe, interrupt_and_resume, run_tiny


class Counted:
    """State of one number, ``calls``; what load_state restored is recorded per kind."""

    loaded: dict[str, int] = {}
    kind = "?"

    def __init__(self):
        self.calls = 0

    def save_state(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "calls.json").write_text(json.dumps(self.calls))

    def load_state(self, path):
        self.calls = json.loads((Path(path) / "calls.json").read_text())
        Counted.loaded[self.kind] = self.calls


class ScheduledSampler(Counted):
    """A temperature schedule around the kit's fake sampler: the k-th training call samples at
    1 + 0.25 k. Built with ctx.build, as a wrapper of a built-in would be."""

    kind = "sampler"

    def __init__(self, config, ctx):
        super().__init__()
        self.inner = ctx.build("sampler", "fake")

    def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
        if greedy or temperature is not None:  # an evaluation: as asked
            return self.inner.sample(agent, prompts, n, greedy=greedy, temperature=temperature)
        self.calls += 1
        return self.inner.sample(agent, prompts, n, temperature=1.0 + 0.25 * self.calls)

    def sync(self, agent):
        self.inner.sync(agent)


class CountingVerifier(Counted):
    kind = "verifier"

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def extract(self, text):
        self.calls += 1
        return self.inner.extract(text)

    def equivalent(self, a, b):
        return self.inner.equivalent(a, b)


class CountingTask(Counted):
    kind = "task"

    def __init__(self, config, ctx):
        super().__init__()
        self.inner = ctx.build("task", "arithmetic", {"seed_size": 0, "train_size": 64, "eval_size": 32})
        self.verifier = CountingVerifier(self.inner.verifier)

    def split(self, name):
        self.calls += 1
        return self.inner.split(name)


class CountingAggregator(Counted):
    kind = "aggregator"

    def __init__(self, config, ctx):
        super().__init__()
        self.inner = ctx.build("aggregator", "majority")

    def aggregate(self, votes, verifier, context):
        self.calls += 1
        return self.inner.aggregate(votes, verifier, context)


class CountingRouter(Counted):
    kind = "router"
    min_agents = 2

    def __init__(self, config, ctx):
        super().__init__()
        self.inner = ctx.build("router", "ring")

    def route(self, votes, labels, verifier, aggregator, truth=None):
        self.calls += 1
        return self.inner.route(votes, labels, verifier, aggregator, truth)


class CountingShaping(Counted):
    kind = "shaping"

    def __init__(self, config, ctx):
        super().__init__()

    def score(self, rollout, answers, verifier, truth=None):
        self.calls += 1
        return [[0.0] * len(row) for row in answers]


class CountingObserver(Counted):
    kind = "observer"

    def __init__(self, config, ctx):
        super().__init__()

    @corl.hookimpl
    def corl_on_step_end(self, step):
        self.calls += 1


class EveryKind:
    """Registers a stateful component of every kind that may be Stateful, and keeps what it built."""

    def __init__(self):
        self.built = {}

    @corl.hookimpl
    def corl_register_components(self, registry):
        def keep(factory):
            def make(config, ctx):
                made = factory(config, ctx)
                self.built[made.kind] = made
                if made.kind == "task":
                    self.built["verifier"] = made.verifier
                return made
            return make

        for kind, cls in (("sampler", ScheduledSampler), ("task", CountingTask), ("aggregator", CountingAggregator),
                          ("router", CountingRouter), ("shaping", CountingShaping), ("observer", CountingObserver)):
            factory = keep(cls)
            if kind == "router":
                factory.min_agents = 2
            registry.add(kind, "counting", factory, corl.NoConfig)


def every_kind_recipe(steps=4):
    recipe = fake_recipe(**{"run.steps": steps, "task.type": "counting", "voting.type": "counting",
                            "topology.type": "counting", "run.observers": ["jsonl", "counting"]})
    recipe["task"] = {"type": "counting"}
    recipe["shaping"] = [{"name": "count", "type": "counting", "weight": 1.0}]
    for agent in recipe["agents"]:
        agent["sampler"] = {"type": "counting"}
    return recipe


def test_every_stateful_kind_is_saved_and_restored_through_a_real_resume(tmp_path):
    """(Before: only the aggregator, the router and shaping terms were saved; a stateful sampler's
    schedule, a task's, a verifier's and an observer's state were silently dropped.)"""
    Counted.loaded = {}
    straight, resumed = EveryKind(), EveryKind()
    recipe = every_kind_recipe()
    run_tiny(tmp_path / "straight", recipe, plugins=[straight])
    with pytest.raises(corl.PluginError, match="interrupted"):
        class Stop:
            @corl.hookimpl
            def corl_on_step_end(self, step):
                if step == 3:
                    raise RuntimeError("interrupted")

        run_tiny(tmp_path / "resumed", recipe, ["run.checkpoint_every=2"], plugins=[EveryKind(), Stop()])
    checkpoint = tmp_path / "resumed" / "checkpoints" / "step-000002" / "components"
    assert {p.name for p in checkpoint.iterdir()} == set(STATEFUL_KINDS)
    run_tiny(tmp_path / "resumed", recipe, ["run.checkpoint_every=2"], plugins=[resumed], resume=True)
    assert set(Counted.loaded) == set(STATEFUL_KINDS)  # each restored what step 2's checkpoint held
    for kind in ("sampler", "verifier", "aggregator", "router", "shaping", "observer"):  # used every step
        assert resumed.built[kind].calls == straight.built[kind].calls, kind


def test_a_stateful_samplers_schedule_resumes_bit_for_bit(tmp_path):
    class Schedules:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("sampler", "scheduled", ScheduledSampler, corl.NoConfig)

    recipe = fake_recipe(**{"run.steps": 4})
    for agent in recipe["agents"]:
        agent["sampler"] = {"type": "scheduled"}
    conformance.check_resume(tmp_path, recipe, plugins=[Schedules()])


def test_the_resume_check_catches_state_kept_outside_save_state(tmp_path):
    @attrs.frozen
    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("sampler", "forgetful", lambda config, ctx: _Forgets(config, ctx), corl.NoConfig)

    class _Forgets:  # ScheduledSampler's schedule, its state never saved
        def __init__(self, config, ctx):
            self.inner, self.calls = ctx.build("sampler", "fake"), 0

        def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
            if greedy or temperature is not None:
                return self.inner.sample(agent, prompts, n, greedy=greedy, temperature=temperature)
            self.calls += 1
            return self.inner.sample(agent, prompts, n, temperature=1.0 + 0.25 * self.calls)

        def sync(self, agent):
            pass

    recipe = fake_recipe(**{"run.steps": 4})
    for agent in recipe["agents"]:
        agent["sampler"] = {"type": "forgetful"}
    with pytest.raises(AssertionError, match="differs from the straight one at metrics record"):
        conformance.check_resume(tmp_path, recipe, plugins=[Plugin()])


def test_interrupt_and_resume_returns_both_outcomes(tmp_path):
    straight, resumed = interrupt_and_resume(tmp_path, fake_recipe(**{"run.steps": 3}), at=1)
    assert straight == resumed and [r["step"] for r in straight[1] if r.get("kind") == "train"] == [1, 2, 3]
