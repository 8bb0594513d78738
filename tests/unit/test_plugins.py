import pytest

import corl
from corl.errors import ConfigError, PluginError
from corl.plugins import AUTOLOAD_ENV, BUILTIN_PLUGINS, build_registry, describe, make_plugin_manager
from corl.recipe import load_recipe
from tests.unit.test_recipe import BASE

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
def installed_plugin(tmp_path, monkeypatch):
    """A third-party distribution on sys.path, registered through the `corl` entry-point group."""
    (tmp_path / "corl_star.py").write_text(PLUGIN_SOURCE)
    dist = tmp_path / "corl_star-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corl-star\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text("[corl]\nstar = corl_star\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    return tmp_path


def test_entry_point_plugins_are_autoloaded_and_listed(installed_plugin):
    pm = make_plugin_manager()
    registry = build_registry(pm)
    star = registry.get("router", "star")
    assert star.plugin == "star"
    rows = {r["name"]: r for r in describe(pm)}
    assert rows["star"]["version"] == "1.2.3"
    assert rows["star"]["hooks"] == ["corl_register_components"]
    spec = load_recipe({**BASE, "topology": {"type": "star", "hub": 1}}, registry=registry)
    assert spec.topology.config.hub == 1


def test_autoload_can_be_switched_off(installed_plugin, monkeypatch):
    monkeypatch.setenv(AUTOLOAD_ENV, "1")
    registry = build_registry(make_plugin_manager())
    assert "star" not in registry.names("router")
    with pytest.raises(ConfigError, match="unknown router 'star'"):
        load_recipe({**BASE, "topology": {"type": "star"}}, registry=registry)


def test_builtins_register_through_the_same_hook():
    pm = make_plugin_manager(autoload=False)
    assert [name for name, _ in pm.list_name_plugin()][: len(BUILTIN_PLUGINS)] == list(BUILTIN_PLUGINS)
    registry = build_registry(pm)
    assert {c.plugin for c in registry} == set(BUILTIN_PLUGINS)


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
