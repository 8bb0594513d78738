"""Failures inside components are one line, wherever they happen (issue 30, item 3): a component
that raises is named with its plugin's distribution and when it failed, with the checkpoint to go
on from; the CLI prints that line (the traceback with CORL_DEBUG=1); hook mistakes keep pluggy's
reason; a broken plugin's reason is given once; a non-finite reward points at the router."""

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import corl
from corl.errors import ConfigError, PluginError
from corl.plugins import build_registry, make_plugin_manager, register
from corl.testing import FakeOptimizer, FakeOptimizerConfig, fails_naming, fake_recipe, run_tiny
from corl.types import NoConfig

ROOT = Path(__file__).resolve().parents[3]


class Boom(Exception):
    pass


class Raises:
    """Optimizer, sampler, aggregator, router, shaping term: each raises from its one method."""

    def __init__(self, config=None, ctx=None, when=1):
        self.when, self.calls = when, 0

    def _maybe(self):
        self.calls += 1
        if self.calls >= self.when:
            raise Boom("kaput\nsecond line of the message")

    def aggregate(self, votes, verifier, context=None):
        self._maybe()

    def route(self, votes, labels, verifier, aggregator, truth=None):
        self._maybe()

    def score(self, rollout, answers, verifier, truth=None):
        self._maybe()


class LateOptimizer(FakeOptimizer):
    def step(self, rollout, rewards):
        if self.steps_done == 1:
            raise Boom("the loss exploded")
        self.steps_done += 1
        return super().step(rollout, rewards)

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.steps_done = 0


class Plugin:
    @corl.hookimpl
    def corl_register_components(self, registry):
        registry.add("optimizer", "late", LateOptimizer, FakeOptimizerConfig)
        registry.add("shaping", "boom", Raises, NoConfig)
        registry.add("optimizer", "unbuildable", lambda config, ctx: 1 / 0, NoConfig)


def test_an_optimizer_that_raises_mid_run_is_one_line_with_the_checkpoint_to_resume(tmp_path):
    recipe = fake_recipe(**{"agents[1].optimizer.type": "late", "run.checkpoint_every": 1, "run.steps": 3})
    with fails_naming("agent 'fake1''s optimizer 'late'") as failure:
        run_tiny(tmp_path, recipe, plugins=[Plugin()])
    message = str(failure.error)
    assert "raised Boom: the loss exploded during step 2" in message
    assert message.endswith(f"; last checkpoint {tmp_path / 'checkpoints' / 'step-000001'}; continue with --resume")
    assert isinstance(failure.error.__cause__, Boom)  # the traceback is kept (CORL_DEBUG=1 prints it)


@pytest.mark.parametrize("kind, where, component", [
    ("aggregator", "aggregator= object Raises raised Boom: kaput in an evaluation", {"aggregator": Raises()}),
    ("router", "router= object Raises raised Boom: kaput during step 1", {"router": Raises()}),
])
def test_an_aggregator_or_router_object_that_raises_is_named(tmp_path, kind, where, component):
    with fails_naming(where) as failure:  # the first line of the exception only
        run_tiny(tmp_path, **component)
    assert "second line" not in str(failure.error)


def test_a_shaping_term_and_a_factory_that_raise_are_named(tmp_path):
    shaped = {**fake_recipe(), "shaping": [{"name": "b", "type": "boom", "weight": 1.0}]}
    with fails_naming("shaping 'b' ('boom', plugin ") as failure:
        run_tiny(tmp_path / "a", shaped, plugins=[Plugin()])
    assert "raised Boom: kaput for agent 'fake0''s completions" in str(failure.error)
    with fails_naming("agent 'fake0''s optimizer 'unbuildable'") as failure:
        run_tiny(tmp_path / "b", fake_recipe(**{"agents[0].optimizer.type": "unbuildable"}), plugins=[Plugin()])
    assert "raised ZeroDivisionError: division by zero while building the run" in str(failure.error)


def test_an_aggregator_breaking_its_contract_is_caught_in_the_first_evaluation(tmp_path):
    class Empty:
        def aggregate(self, votes, verifier, context=None):
            return []  # the wrong number of labels: caught before any step, in the base evaluation

    with fails_naming("aggregator= object Empty returned 0 pseudo-labels for agent 'fake0'"):
        run_tiny(tmp_path, aggregator=Empty(), overrides=["run.steps=0"])


def test_extra_metrics_of_a_router_or_a_cohort_vote_must_be_numbers_per_agent(tmp_path):
    from corl.builtin.topology import RingRouter
    from corl.builtin.voting import MajorityConfig, MajorityVote
    from corl.types import Routed

    class Chatty(RingRouter):  # the ring's rewards, and a metric that is not a number
        def route(self, votes, labels, verifier, aggregator, truth=None):
            routed = super().route(votes, labels, verifier, aggregator, truth)
            return Routed(routed.rewards, routed.targets, metrics={"fake0": {"gate": "open"}})

    class Observant(MajorityVote):  # a cohort vote whose metrics name an agent the run does not have
        def observe(self, cohort, verifier, step):
            return {"nobody": {"weight": 1.0}}

    with fails_naming("router= object Chatty returned Routed.metrics that are not {agent: {name: number}}"):
        run_tiny(tmp_path / "a", router=Chatty(NoConfig()))
    with fails_naming("aggregator= object Observant returned dict from observe(); expected {agent: {metric: number}}"):
        run_tiny(tmp_path / "b", aggregator=Observant(MajorityConfig()))


def test_a_router_object_is_checked_against_its_own_config(tmp_path):
    @attrs.frozen
    class StarConfig:
        hub: str = "fake1"

    class Star:
        supervised = False
        min_agents = 2

        def __init__(self, config):
            self.config = config

        @staticmethod
        def check(config, agents):
            return [] if config.hub in [a.name for a in agents] else [f"hub {config.hub!r} is not an agent"]

        def route(self, votes, labels, verifier, aggregator, truth=None):
            return {n: [[float(v.answer == lab.answer) for v in vs] for vs, lab in zip(votes[n], labels[self.config.hub])]
                    for n in votes}

    run_tiny(tmp_path / "ok", router=Star(StarConfig()))  # the recipe's [topology] is a ring: not its table
    with pytest.raises(ConfigError, match="router= object Star: hub 'nobody' is not an agent"):
        run_tiny(tmp_path / "bad", router=Star(StarConfig(hub="nobody")))


def test_hook_mistakes_keep_pluggys_reason_and_a_misspelling_gets_did_you_mean():
    class WrongArgument:
        @corl.hookimpl
        def corl_on_step_end(self, run, step, metricz):
            pass

    class Misspelled:
        @corl.hookimpl
        def corl_on_stpe_end(self, run):
            pass

    pm = make_plugin_manager(autoload=False)
    with pytest.raises(PluginError, match=r"plugin 'w': corl_on_step_end takes no argument\(s\) \{'metricz'\}; its "
                                          r"arguments are \(run, step, metrics, outcome\)"):
        register(pm, WrongArgument(), "w")
    with pytest.raises(PluginError, match=r"plugin 'm': unknown hook 'corl_on_stpe_end'; did you mean 'corl_on_step_end'\?"):
        register(pm, Misspelled(), "m")


def test_a_broken_plugin_is_explained_once_per_command(broken_plugin):
    registry = build_registry(make_plugin_manager())
    first, second = registry.hint(), registry.hint()
    assert "corl_broken_example' failed to load: ImportError" in first
    assert second == " (plugin 'corl_broken_example' failed to load: see above)"


EXPLODING = """
import corl
from corl.testing.fakes import FakeAgent, FakeAgentConfig, FakeOptimizer, FakeOptimizerConfig, FakeSampler, _NoOptions


class Exploding(FakeOptimizer):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.n = 0

    def step(self, rollout, rewards):
        self.n += 1
        if self.n == 2:
            raise RuntimeError("the loss exploded")
        return super().step(rollout, rewards)


@corl.hookimpl
def corl_register_components(registry):
    registry.add("agent", "fake", FakeAgent, FakeAgentConfig)
    registry.add("sampler", "fake", FakeSampler, _NoOptions)
    registry.add("optimizer", "fake", FakeOptimizer, FakeOptimizerConfig)
    registry.add("optimizer", "exploding", Exploding, FakeOptimizerConfig)
"""

RECIPE = """
[run]
steps = 3
checkpoint_every = 1
observers = ["jsonl"]
threads = 1
[task]
type = "arithmetic"
seed_size = 0
train_size = 64
eval_size = 16
[[agents]]
name = "a"
type = "fake"
optimizer = { type = "fake" }
[[agents]]
name = "b"
type = "fake"
optimizer = { type = "exploding" }
[topology]
type = "ring"
[eval]
size = 16
k = 2
"""


def test_the_cli_prints_one_line_and_the_traceback_only_when_asked(tmp_path, installed_plugin):
    """Through `corl run`, an installed plugin's optimizer failing at step 2: one line naming the
    distribution, exit 2, the checkpoint to resume from; CORL_DEBUG=1 adds the traceback."""
    root = installed_plugin("corl-exploding", EXPLODING, entry_point="exploding")
    (tmp_path / "r.toml").write_text(RECIPE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    env.pop("CORL_DISABLE_PLUGIN_AUTOLOAD", None)
    cmd = [sys.executable, "-m", "corl.cli", "run", str(tmp_path / "r.toml"), "--set", f"run.output_dir={tmp_path / 'out'}"]
    plain = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert plain.returncode == 2, plain.stderr[-2000:]
    [line] = [x for x in plain.stderr.splitlines() if x.startswith("corl: error:")]
    assert line == ("corl: error: agent 'b''s optimizer 'exploding' (plugin corl-exploding) raised RuntimeError: the loss "
                    f"exploded during step 2; last checkpoint {tmp_path / 'out' / 'checkpoints' / 'step-000001'}; "
                    "continue with --resume (CORL_DEBUG=1 shows the traceback)")
    assert "Traceback" not in plain.stderr
    debug = subprocess.run([*cmd, "--force"], capture_output=True, text=True, env={**env, "CORL_DEBUG": "1"}, timeout=300)
    assert debug.returncode == 2 and "Traceback" in debug.stderr and 'raise RuntimeError("the loss exploded")' in debug.stderr
