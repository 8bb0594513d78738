"""The contract types what a factory is handed: a Context whose fields are protocols of the contract,
which the host's own objects satisfy."""

import typing
from collections.abc import Callable

import pytest

import corl
from corl.context import AgentSettings, Context, GroupView, OneRank, RunSettings, SpecView
from corl.plugins import make_plugin_manager, registry_of
from corl.protocols import Agent, Task
from corl.recipe import load_recipe
from corl.testing import FakePlugin, context, fake_recipe


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


def test_the_pre_release_names_are_gone_and_the_contract_has_one_home_per_name():
    """0.2 drops the shims of the unreleased 0.1 (corl.types.Context, Routed as a mapping,
    corl.plugins.hookimpl): one name, one place, re-exported by ``import corl``."""
    import corl.context
    import corl.plugins
    import corl.types

    for name in ("Context", "OneRank", "StopToken", "Closers"):
        assert not hasattr(corl.types, name)
    assert corl.Context is corl.context.Context and corl.TokenBatch is corl.types.TokenBatch
    assert not hasattr(corl.plugins, "hookimpl")
    with pytest.raises(TypeError):
        corl.types.Routed(rewards={"a": [[1.0]]})["a"]  # noqa: B018 - read .rewards


