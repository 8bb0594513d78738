"""Every mistake a plugin makes ends in one line naming the plugin's distribution, and never blames
a component that only passed the mistake on (a task's bad split is not the agent's, a verifier's
unhashable answer is not the aggregator's, a wrapped built-in's complaint is the wrapper's)."""

import importlib

import pytest

import corl
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.testing import fails_naming, fake_recipe, run_tiny

PROBE = '''
import corl


class StringsTask:  # split() returns strings, not corl.Prompt
    def __init__(self, config, ctx):
        self.inner = ctx.build("task", "arithmetic", {"seed_size": 0, "train_size": 64, "eval_size": 32})
        self.verifier = self.inner.verifier

    def split(self, name):
        return [p.text for p in self.inner.split(name)]


class ListAnswers:
    def extract(self, text):
        return [text]  # unhashable: votes cannot be grouped by it

    def equivalent(self, a, b):
        return a == b


class Raising:
    def extract(self, text):
        raise ValueError("cannot read " + text)

    def equivalent(self, a, b):
        return a == b


def task_with(verifier):
    class Task:
        def __init__(self, config, ctx):
            self.inner = ctx.build("task", "arithmetic", {"seed_size": 0, "train_size": 64, "eval_size": 32})
            self.verifier = verifier

        def split(self, name):
            return self.inner.split(name)

    return Task


class WrapsHF:  # a sampler around the built-in hf sampler, on an agent hf cannot sample
    def __init__(self, config, ctx):
        self.inner = ctx.build("sampler", "hf")


class Observer:
    def __init__(self, config, ctx):
        pass

    @corl.hookimpl
    def corl_on_stpe_end(self, run, step):
        pass


@corl.hookimpl
def corl_register_components(registry):
    registry.add("task", "strings", StringsTask, corl.NoConfig)
    registry.add("task", "lists", task_with(ListAnswers()), corl.NoConfig)
    registry.add("task", "raising", task_with(Raising()), corl.NoConfig)
    registry.add("sampler", "wraps_hf", WrapsHF, corl.NoConfig)
    registry.add("observer", "typo", Observer, corl.NoConfig)
'''


@pytest.fixture
def probe(installed_plugin, monkeypatch):
    """The probe distribution, corl-probe, passed in as its module (as a plugin's own tests do)."""
    monkeypatch.setenv("CORL_DISABLE_PLUGIN_AUTOLOAD", "1")
    installed_plugin("corl-probe", PROBE)
    return importlib.import_module("corl_probe")


def test_a_split_of_strings_is_the_tasks_mistake_not_the_agents(tmp_path, probe):
    with fails_naming("task 'strings' (plugin corl-probe)") as failure:
        run_tiny(tmp_path, {**fake_recipe(), "task": {"type": "strings"}}, plugins=[probe])
    assert "split('eval') returned str" in str(failure.error) and "expected corl.Prompt" in str(failure.error)


def test_an_unhashable_answer_is_the_verifiers_mistake_not_the_aggregators(tmp_path, probe):
    with fails_naming("task 'lists' (plugin corl-probe)'s verifier") as failure:
        run_tiny(tmp_path, {**fake_recipe(), "task": {"type": "lists"}}, plugins=[probe])
    assert "extracted an answer of type list" in str(failure.error) and "aggregator" not in str(failure.error)


def test_a_verifier_raising_in_an_evaluation_names_the_task_and_its_distribution(tmp_path, probe):
    """(Before: "verifier raised ValueError ..." with no task or plugin: the evaluation's name lookup
    missed the run-wide verifier.)"""
    with fails_naming("task 'raising' (plugin corl-probe)'s verifier raised ValueError: cannot read") as failure:
        run_tiny(tmp_path, {**fake_recipe(), "task": {"type": "raising"}}, plugins=[probe])
    assert "during the evaluation before step 1" in str(failure.error)


def test_a_wrapped_builtins_complaint_is_said_for_the_wrapper(tmp_path, probe):
    recipe = fake_recipe()
    recipe["agents"][0]["sampler"] = {"type": "wraps_hf"}
    with fails_naming("agent 'fake0''s sampler 'wraps_hf' (plugin corl-probe)'s sampler 'hf'") as failure:
        run_tiny(tmp_path, recipe, plugins=[probe])
    assert str(failure.error).startswith("agent 'fake0''s sampler 'wraps_hf' (plugin corl-probe)")


def test_an_observers_hook_mistake_names_its_distribution(tmp_path, probe):
    with fails_naming("observer 'typo' (plugin corl-probe)") as failure:
        run_tiny(tmp_path, fake_recipe(**{"run.observers": ["typo"]}), plugins=[probe])
    assert "unknown hook 'corl_on_stpe_end'; did you mean 'corl_on_step_end'?" in str(failure.error)


def test_a_class_handed_in_for_an_object_is_said_so(tmp_path):
    from corl.builtin.topology import RingRouter

    with pytest.raises(corl.ConfigError, match=r"^router=RingRouter is a class; corl.run takes an object: "
                                               r"router=RingRouter\(\.\.\.\)$"):
        run_tiny(tmp_path, router=RingRouter)


MISSPELLED = '''
import attrs
import corl


@attrs.frozen
class Table:
    depth: int = 1


@corl.hookimpl
def corl_register_component(registry):  # misspelled: the whole module fails to load
    registry.add_section("tourney", Table)
'''


def test_a_misspelled_module_hook_is_one_line_naming_the_distribution(installed_plugin, monkeypatch):
    """(Before: eleven lines, ten naming the entry point.) The recipe names five things the plugin
    would have provided; one line names every key and the distribution, with the reason."""
    monkeypatch.delenv("CORL_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("CORL_PLUGINS", raising=False)
    installed_plugin("corl-tourney", MISSPELLED, entry_point="tourney")
    recipe = fake_recipe(**{"topology.type": "tournament", "voting.type": "elo"})
    recipe["tourney"] = {"depth": 2}
    for agent in recipe["agents"]:
        agent["optimizer"] = {"type": "dapo"}
    with pytest.raises(corl.ConfigError) as failure:
        load_recipe(recipe, registry=build_registry(make_plugin_manager()))
    lines = str(failure.value).splitlines()
    assert len(lines) == 1, lines
    assert "distribution corl-tourney (entry point 'tourney'): unknown hook 'corl_register_component'" in lines[0]
    for key in ("topology.type", "voting.type", "agents[0].optimizer.type", "agents[2].optimizer.type", "tourney"):
        assert key in lines[0].split(": unknown here")[0]
