import pytest

import corl
from corl.errors import ConfigError, PluginError
from corl.plugins import ALLOW_ENV, AUTOLOAD_ENV, BUILTIN_PLUGINS, build_registry, describe, make_plugin_manager
from corl.recipe import load_recipe
from tests.kit import base_recipe

PLUGIN_SOURCE = '''
import attrs
import corl


@attrs.frozen
class StarConfig:
    hub: int = 0


class Star:
    supervised = False
    min_agents = 2

    def __init__(self, config, ctx=None):
        self.config = config

    def route(self, votes, labels, verifier, aggregator, truth=None):
        names = list(votes)
        hub = labels[names[self.config.hub]]
        return {n: [[float(v.answer == hub[i].answer) for v in vs] for i, vs in enumerate(votes[n])] for n in names}


@corl.hookimpl
def corl_register_components(registry):
    registry.add("router", "star", Star, StarConfig, help="everyone <- one hub agent")
'''


@pytest.fixture
def star(installed_plugin, monkeypatch):
    """A third-party distribution, corl-star 1.2.3, registered as entry point `star` (corl.testing's kit)."""
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    return installed_plugin("corl-star", PLUGIN_SOURCE, entry_point="star", version="1.2.3")


def test_entry_point_plugins_are_autoloaded_and_listed(star):
    pm = make_plugin_manager()
    registry = build_registry(pm)
    star = registry.get("router", "star")
    assert star.plugin == "corl-star"  # messages name the distribution users install
    rows = {r["name"]: r for r in describe(pm)}
    assert rows["star"]["version"] == "1.2.3" and rows["star"]["distribution"] == "corl-star"
    assert rows["star"]["hooks"] == ["corl_register_components"]
    spec = load_recipe({**base_recipe(), "topology": {"type": "star", "hub": 1}}, registry=registry)
    assert spec.topology.config.hub == 1


def test_autoload_can_be_switched_off(star, monkeypatch):
    monkeypatch.setenv(AUTOLOAD_ENV, "1")
    registry = build_registry(make_plugin_manager())
    assert "star" not in registry.names("router")
    with pytest.raises(ConfigError, match="unknown router 'star'"):
        load_recipe({**base_recipe(), "topology": {"type": "star"}}, registry=registry)


def test_builtins_register_through_the_same_hook():
    pm = make_plugin_manager(autoload=False)
    assert [name for name, _ in pm.list_name_plugin()][: len(BUILTIN_PLUGINS)] == list(BUILTIN_PLUGINS)
    registry = build_registry(pm)
    assert {c.plugin for c in registry} == set(BUILTIN_PLUGINS)


def test_hookimpl_lives_beside_the_specs():
    import typing

    from corl import hookspecs, plugins
    from corl.context import RegistryView

    assert corl.hookimpl is hookspecs.hookimpl and not hasattr(plugins, "hookimpl")
    # the registration hook's argument is a declared type of the contract, which the host's registry satisfies
    assert typing.get_type_hints(hookspecs.corl_register_components)["registry"] is RegistryView
    assert isinstance(build_registry(make_plugin_manager(autoload=False)), RegistryView)


def test_misspelled_hook_is_an_error_naming_the_plugin():
    class Typo:
        @corl.hookimpl
        def corl_on_stepend(self, run, step, metrics):
            pass

    with pytest.raises(PluginError, match="corl_on_stepend"):
        make_plugin_manager([Typo()], autoload=False)


def test_duplicate_component_names_are_refused():
    class Clash:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("aggregator", "majority", object, type("C", (), {"__attrs_attrs__": ()}))

    with pytest.raises(PluginError, match="aggregator 'majority' is already registered by corl.builtin.voting"):
        build_registry(make_plugin_manager([Clash()], autoload=False))


@pytest.mark.parametrize("value", ["0", "false", "", "no"])
def test_autoload_switch_reads_false_values_as_false(star, monkeypatch, value):
    monkeypatch.setenv(AUTOLOAD_ENV, value)
    assert "star" in build_registry(make_plugin_manager()).names("router")


def test_allow_list_loads_only_the_named_plugins(star, installed_plugin, monkeypatch):
    installed_plugin("corl-other", PLUGIN_SOURCE.replace('"star"', '"other"'), entry_point="other")
    monkeypatch.setenv(ALLOW_ENV, "corl-star")  # a distribution name (an entry-point name works too)
    names = build_registry(make_plugin_manager()).names("router")
    assert "star" in names and "other" not in names
    monkeypatch.setenv(ALLOW_ENV, "")
    assert "star" not in build_registry(make_plugin_manager()).names("router")


def test_a_broken_plugin_is_skipped_and_named(star, broken_plugin):
    pm = make_plugin_manager()
    registry = build_registry(pm)
    assert "star" in registry.names("router")  # the others still load
    rows = {r["name"]: r for r in describe(pm)}
    assert "ImportError: corl-broken-example: a dependency is missing" in rows["corl_broken_example"]["error"]
    with pytest.raises(ConfigError, match="unknown router 'nope'.*plugin 'corl_broken_example' failed to load: "
                                          "ImportError"):
        load_recipe({**base_recipe(), "topology": {"type": "nope"}}, registry=registry)


def test_a_plugin_whose_registration_fails_is_skipped_and_named(installed_plugin, monkeypatch):
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    installed_plugin("corl-half", PLUGIN_SOURCE.replace(
        'registry.add("router", "star"', 'registry.add("router", "half", Star, StarConfig)\n    registry.add("nokind", "star"'),
        entry_point="half")
    registry = build_registry(make_plugin_manager())
    assert "half" not in registry.names("router")  # its partial registrations are gone too
    assert "unknown component kind 'nokind'" in registry.failed["half"]


def test_a_forgotten_hookimpl_marker_is_named():
    class Forgot:
        def corl_register_components(self, registry):
            pass

    with pytest.raises(PluginError, match="corl_register_components is not marked with @corl.hookimpl"):
        make_plugin_manager([Forgot()], autoload=False)


def test_wrongly_typed_traits_are_refused_at_registration():
    class Bad:
        supervised = "yes"

    class Plugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("router", "bad", Bad, type("C", (), {"__attrs_attrs__": ()}))

    with pytest.raises(PluginError, match="router 'bad': supervised must be bool, got 'yes'"):
        build_registry(make_plugin_manager([Plugin()], autoload=False))


def test_a_recipe_states_the_plugin_distributions_it_needs(star):
    from corl.plugins import distributions

    pm = make_plugin_manager()
    registry, loaded = build_registry(pm), distributions(pm)
    ok = {**base_recipe(), "run": {"plugins": ["corl-star>=1.0"]}}
    assert load_recipe(ok, registry=registry, distributions=loaded).run.plugins == ("corl-star>=1.0",)
    with pytest.raises(ConfigError) as info:
        load_recipe({**base_recipe(), "run": {"plugins": ["corl-star>=2", "corl-vllm-nope", "not a name!"]}},
                    registry=registry, distributions=loaded)
    assert info.value.problems == (
        "<recipe>: run.plugins[0]: the recipe needs 'corl-star>=2', but corl-star 1.2.3 is installed",
        "<recipe>: run.plugins[1]: the recipe needs plugin distribution 'corl-vllm-nope': not installed, or not "
        "loaded (see `corl plugins`, CORL_PLUGINS, CORL_DISABLE_PLUGIN_AUTOLOAD)",
        "<recipe>: run.plugins[2]: invalid value 'not a name!': expected a distribution name, e.g. 'corl-vllm' or "
        "'corl-vllm>=0.2'")


def test_corl_plugins_json_lists_plugins_components_and_sections(star):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(star), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "corl.cli", "plugins", "--json"], capture_output=True, text=True,
                         check=True, env=env)
    data = json.loads(out.stdout)
    star_row = next(r for r in data["plugins"] if r["name"] == "star")
    assert star_row["distribution"] == "corl-star" and star_row["version"] == "1.2.3"
    assert {"kind": "router", "name": "star", "plugin": "corl-star", "help": "everyone <- one hub agent"} in data["components"]
    assert {s["name"] for s in data["sections"]} == {"zoo"}


CLASHING_SOURCE = PLUGIN_SOURCE + '''

class Trusting:
    def __init__(self, config, ctx=None):
        pass

    def aggregate(self, votes, verifier, context):
        from corl.builtin.voting import MajorityConfig, MajorityVote

        return MajorityVote(MajorityConfig()).aggregate(votes, verifier, context)


def _register_reliability(registry):
    registry.add("aggregator", "reliability", Trusting, corl.NoConfig, help="a vote of this plugin's own")
'''


def test_a_name_a_builtin_later_takes_leaves_the_plugin_loaded_and_both_addressable(installed_plugin, monkeypatch):
    """(Before: a distribution registering a name corl also registers failed to load as a whole, its
    other components gone.) Both stay, under qualified names; the bare name is ambiguous, said at
    the recipe key that uses it and by `corl plugins`."""
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    source = CLASHING_SOURCE.replace('    registry.add("router", "star", Star, StarConfig, help="everyone <- one hub agent")',
                                     '    registry.add("router", "star", Star, StarConfig, help="everyone <- one hub agent")\n'
                                     '    _register_reliability(registry)')
    installed_plugin("corl-clash", source, entry_point="clash")
    registry = build_registry(make_plugin_manager())
    assert "clash" not in registry.failed
    assert registry.get("router", "star").plugin == "corl-clash"  # the plugin's other components still load
    assert registry.get("aggregator", "corl:reliability").plugin == "corl.builtin.voting"
    assert registry.get("aggregator", "corl-clash:reliability").plugin == "corl-clash"
    assert registry.get("router", "corl-clash:star") is registry.get("router", "star")
    with pytest.raises(ConfigError) as ambiguous:
        load_recipe({**base_recipe(), "voting": {"type": "reliability"}}, registry=registry)
    assert str(ambiguous.value) == ("<recipe>: voting.type: aggregator 'reliability' is ambiguous: corl and corl-clash each "
                                    "register one; write 'corl:reliability' or 'corl-clash:reliability'")
    for name in ("corl:reliability", "corl-clash:reliability"):
        spec = load_recipe({**base_recipe(), "voting": {"type": name}}, registry=registry)
        assert spec.voting.aggregator.type == name
    assert registry.clash_lines() == ["aggregator 'reliability' is registered by corl and corl-clash: a recipe names "
                                      "one as 'corl:reliability' or 'corl-clash:reliability'"]


def test_corl_plugins_reports_a_clash_in_one_line(installed_plugin, monkeypatch, capsys):
    from corl import cli

    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    source = CLASHING_SOURCE.replace('    registry.add("router", "star", Star, StarConfig, help="everyone <- one hub agent")',
                                     '    _register_reliability(registry)')
    installed_plugin("corl-clash", source, entry_point="clash")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if "ambiguous" in line] == [
        "ambiguous: aggregator 'reliability' is registered by corl and corl-clash: a recipe names one as "
        "'corl:reliability' or 'corl-clash:reliability'"]
    assert "corl-clash: corl_register_components" in out or "clash (corl-clash 0.1.0): corl_register_components" in out
