"""The contract types what a factory is handed: a Context whose fields are protocols of the contract,
which the host's own objects satisfy."""

import typing
from collections.abc import Callable

import pytest

import corl
from corl import protocols
from corl.plugins import make_plugin_manager, registry_of
from corl.protocols import Agent, AgentSettings, Context, GroupView, RunSettings, SpecView, Task
from corl.recipe import load_recipe
from corl.testing import FakePlugin, context, fake_recipe
from corl.types import OneRank


def test_the_context_is_typed_with_the_contracts_protocols():
    hints = typing.get_type_hints(Context)
    assert hints["spec"] == SpecView | None
    assert hints["task"] == Task | None and hints["agent"] == Agent | None
    assert hints["group"] is GroupView
    assert hints["log"] == Callable[[str], None]
    assert corl.Context is Context


def test_the_hosts_objects_satisfy_the_views():
    spec = load_recipe(fake_recipe(), registry=registry_of(make_plugin_manager([FakePlugin()], autoload=False)))
    assert isinstance(spec, SpecView) and isinstance(spec.run, RunSettings)
    assert all(isinstance(a, AgentSettings) for a in spec.agents)
    assert isinstance(OneRank(), GroupView) and isinstance(Context(spec=spec, seed=0).group, GroupView)
    hand = context()  # the kit's context, built outside a run
    assert isinstance(hand.spec, SpecView) and hand.spec.run.steps == 40 and hand.spec.agents == ()


def test_the_old_name_of_the_context_still_resolves_with_a_warning():
    import corl.types

    with pytest.warns(DeprecationWarning, match="corl.types.Context moved to corl.protocols.Context"):
        assert corl.types.Context is protocols.Context
    with pytest.raises(AttributeError):
        corl.types.Nothing  # noqa: B018
