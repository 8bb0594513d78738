"""Building a run: objects handed in and built components are checked against their protocols and
the label guard before anything loads; what components return is checked where it comes back."""

import math

import pytest

import corl
from corl.errors import ConfigError, PluginError, TrainingError
from corl.testing import fake_recipe
from corl.types import NoConfig


class Spy:
    """An agent plugin that counts how many agents were built (to prove nothing loaded)."""

    built = 0

    @corl.hookimpl
    def corl_register_components(self, registry):
        from corl.testing import FakeAgent, FakeAgentConfig

        def make(config, ctx):
            Spy.built += 1
            return FakeAgent(config, ctx)

        registry.add("agent", "spied", make, FakeAgentConfig)


def spied_recipe(**changes):
    recipe = fake_recipe(**changes)
    for agent in recipe["agents"]:
        agent["type"] = "spied"
    return recipe


class Ring:
    """A label-free router object that records what it was handed."""

    def __init__(self):
        self.truths = []

    def route(self, votes, labels, verifier, aggregator, truth=None):
        self.truths.append(truth)
        names = list(votes)
        return {n: [[float(v.answer == labels[names[(i + 1) % len(names)]][p].answer) for v in vs]
                    for p, vs in enumerate(votes[n])] for i, n in enumerate(names)}


def test_a_router_object_that_reads_labels_is_refused_in_a_label_free_run(corl_run):
    class Cheat(Ring):
        supervised = True

    Spy.built = 0
    cheat = Cheat()
    with pytest.raises(ConfigError, match=r"router= object Cheat declares supervised = True .* the recipe is "
                                          r"label-free; declare a supervised baseline with run.supervised = true"):
        corl_run(spied_recipe(), plugins=[Spy()], router=cheat)
    assert cheat.truths == [] and Spy.built == 0  # refused before any agent was built


def test_a_label_free_router_object_is_never_handed_the_labels(corl_run):
    ring = Ring()
    corl_run(overrides=["run.steps=2"], router=ring)
    assert ring.truths == [None, None]


def test_a_supervised_router_object_gets_labels_only_in_a_declared_supervised_run(corl_run):
    class Truthful(Ring):
        supervised = True

    router = Truthful()
    corl_run(overrides=["run.steps=1", "run.supervised=true", "topology.type=ground_truth"], router=router)
    assert router.truths and all(t is not None for t in router.truths)


def test_a_factory_whose_router_declares_other_traits_than_itself_is_refused(corl_run):
    """Validation reads traits off the factory; the run must not trust an instance that says otherwise."""
    handed = []

    class Sneaky(Ring):
        def __init__(self, config, ctx):
            super().__init__()
            self.supervised = True  # the instance claims labels; the factory (the class) does not
            self.truths = handed

    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("router", "sneaky", Sneaky, NoConfig)

    with pytest.raises(PluginError, match=r"router 'sneaky': its factory declares supervised = False but the "
                                          r"router it built declares True"):
        corl_run(fake_recipe(**{"topology.type": "sneaky"}), plugins=[Plugin()])
    assert handed == []


def test_objects_missing_protocol_methods_are_named_before_anything_loads(corl_run):
    class NotAnAggregator:
        def vote(self, votes):
            return []

    Spy.built = 0
    with pytest.raises(ConfigError, match=r"aggregator= object NotAnAggregator: not a corl Aggregator: it has no "
                                          r"aggregate"):
        corl_run(spied_recipe(), plugins=[Spy()], aggregator=NotAnAggregator())
    assert Spy.built == 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'optimiser'"):  # a real signature
        corl.run(fake_recipe(), optimiser=object())


def test_a_factory_that_builds_the_wrong_thing_is_named():
    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("aggregator", "hollow", lambda config, ctx: object(), NoConfig)

    with pytest.raises(PluginError, match=r"aggregator 'hollow' \(plugin .*Plugin\) built a object without aggregate"):
        corl.testing.run_tiny("/tmp/unused", fake_recipe(**{"voting.type": "hollow"}), plugins=[Plugin()])


def routes(fn):
    class Router:
        def route(self, votes, labels, verifier, aggregator, truth=None):
            return fn({n: [[1.0 if s % 2 else 0.0 for s in range(len(vs))] for vs in rows]
                       for n, rows in votes.items()})

    return Router()


@pytest.mark.parametrize("broken, message", [
    (lambda r: {n: rows[:-1] for n, rows in r.items()}, r"returned 7 reward rows for agent 'fake0', expected one per prompt \(8\)"),
    (lambda r: {n: [[row[0]] for row in rows] for n, rows in r.items()}, r"returned 1 rewards for prompt 0 of agent 'fake0', expected one per sample \(8\)"),
    (lambda r: {**r, "ghost": r["fake0"]}, r"returned rewards for agents \['fake0', 'fake1', 'fake2', 'ghost'\]"),
    (lambda r: {n: [["1"] * len(row) for row in rows] for n, rows in r.items()}, r"returned reward '1' \(agent 'fake0', prompt 0, sample 0\); expected a number"),
    (lambda r: list(r.values()), r"returned list; expected rewards per agent"),
])
def test_a_routers_output_is_checked_and_the_router_named(corl_run, broken, message):
    with pytest.raises(PluginError, match=r"^router= object Router " + message):
        corl_run(router=routes(broken))


def test_a_nan_reward_skips_the_update_and_counts_like_a_nan_loss(corl_run):
    def nan_for_fake1(r):
        r["fake1"][0][0] = math.nan
        return r

    with pytest.raises(TrainingError, match=r"agent 'fake1': router= object Router \(or a shaping term\) gave non-finite "
                                            r"rewards in 3 consecutive steps .* a lower learning rate will not help"):
        corl_run(overrides=["run.steps=5", "run.max_nonfinite=3"], router=routes(nan_for_fake1))


def test_an_aggregators_output_is_checked():
    class Short:
        def aggregate(self, votes, verifier, context):
            return []

    with pytest.raises(PluginError, match=r"aggregator= object Short returned 0 pseudo-labels for agent 'fake0'"):
        corl.testing.run_tiny("/tmp/unused-agg", aggregator=Short())


def test_pseudo_labels_with_unhashable_answers_are_named(tmp_path):
    from corl.types import PseudoLabel

    class Lists:  # the right count, but answers votes cannot be grouped by
        def aggregate(self, votes, verifier, context):
            return [PseudoLabel(answer=[1, 2], share=1.0, counts={}) for _ in votes]

    with pytest.raises(PluginError, match=r"^aggregator= object Lists returned a pseudo-label answer of type list for "
                                          r"prompt 0 of agent 'fake0'; answers must be hashable"):
        corl.testing.run_tiny(tmp_path, aggregator=Lists())


def test_an_observer_that_raises_mid_run_is_named_with_its_plugin(tmp_path):
    class Flaky:
        def __init__(self, config, ctx):
            pass

        @corl.hookimpl
        def corl_on_eval_end(self, run, step, results, cohort):
            if step:
                raise KeyError("pass@1")

    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("observer", "flaky", Flaky, NoConfig)

    with pytest.raises(PluginError) as info:
        corl.testing.run_tiny(tmp_path, fake_recipe(**{"run.observers": ["jsonl", "flaky"]}), plugins=[Plugin()])
    assert str(info.value).startswith("observer 'flaky' (plugin tests.unit.runtime.test_build.")
    assert ".Plugin): corl_on_eval_end raised KeyError: 'pass@1'; " in str(info.value)
    assert str(info.value).endswith("; no checkpoint was written before it (run.checkpoint_every), so a new run "
                                    "starts over")  # where the run can go on from
    assert (tmp_path / "metrics.jsonl").read_text().count('"kind": "train"') == 3  # the others were told and closed
