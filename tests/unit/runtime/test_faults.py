"""Numerical faults and bad input: a NaN skips one agent's update; fuzzed recipes never crash."""

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corl
from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig
from corl.errors import ConfigError, CorlError, TrainingError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.runtime import Run
from tests.kit import TINY, base_recipe

RECIPE = {
    "run": {"name": "nan"},
    "agents": [{"name": "good", "model": "zoo:llama-tiny"},
               {"name": "flaky", "type": "flaky", "model": "zoo:gpt-neox-tiny"}],
    "topology": {"type": "ring"},
}


class NaNAgent(HFAgent):
    """An hf agent whose training log-probs are NaN: an injected numerical fault."""

    def token_logprobs(self, batch, rows, *, reference=False):
        logp, entropy = super().token_logprobs(batch, rows, reference=reference)
        return logp * float("nan"), entropy


class FlakyPlugin:
    @corl.hookimpl
    def corl_register_components(self, registry):
        registry.add("agent", "flaky", NaNAgent, HFAgentConfig, help="test: NaN log-probs")


class AlternatingRouter:
    """Rewards every other sample, so every group has a learning signal (and a forward pass)."""

    supervised = False

    def route(self, votes, labels, verifier, aggregator, truth=None):
        return {n: [[float(i % 2) for i in range(len(vs))] for vs in votes[n]] for n in votes}


def build(tmp_path, *sets):
    pm = make_plugin_manager([FlakyPlugin()], autoload=False)
    spec = load_recipe(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.observers=['jsonl']", "eval.size=0",
                                *sets], registry=build_registry(pm))
    return Run(spec, pm=pm, log=lambda m: None, router=AlternatingRouter())


def weights(agent):
    return {k: v.detach().clone() for k, v in agent.model.state_dict().items()}


def test_nan_skips_only_that_agents_update_and_is_counted(tmp_path, cache_dir):
    run = build(tmp_path, "run.steps=3", "run.max_nonfinite=10", "run.observers=[]")
    run.setup()  # drive the steps by hand
    before = {s.name: weights(s.agent) for s in run.agents}
    for step in (1, 2, 3):
        metrics = run.step(step)
        assert metrics.agents["flaky"]["nonfinite"] == 1.0 and metrics.agents["good"]["nonfinite"] == 0.0
        # the skipped update measured nothing: no 0.0 loss or entropy (a collapse that never happened)
        assert not {"loss", "entropy", "grad_norm", "clip_frac"} & set(metrics.agents["flaky"])
        assert {"loss", "entropy", "grad_norm", "clip_frac"} <= set(metrics.agents["good"])
    after = {s.name: weights(s.agent) for s in run.agents}
    assert all(torch.equal(before["flaky"][k], after["flaky"][k]) for k in before["flaky"])
    assert any(not torch.equal(before["good"][k], after["good"][k]) for k in before["good"])
    assert all(torch.isfinite(v).all() for v in after["flaky"].values())
    assert run.state.health.nonfinite == {"good": 0, "flaky": 3}


def test_too_many_nonfinite_steps_stop_the_run_with_a_clear_error(tmp_path, cache_dir):
    run = build(tmp_path, "run.steps=10", "run.max_nonfinite=2")
    with pytest.raises(TrainingError) as info:
        run.execute()
    message = str(info.value)
    assert message.startswith("agent 'flaky': non-finite loss, gradients or rewards in 2 consecutive steps (up to step 2)")
    assert "\n" not in message
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]  # step 2 raised before it was logged
    [jsonl] = [p for name, p in run.pm.list_name_plugin() if name == "observer:jsonl"]
    assert jsonl.file.closed  # corl_on_run_failed let the observer close its file


def test_data_too_small_for_the_batch_is_an_error_before_models_load(tmp_path):
    run = build(tmp_path, "task.train_size=4", "run.prompts_per_step=8")
    with pytest.raises(CorlError, match=r"train split has 4 prompts, fewer than run.prompts_per_step \(8\)"):
        run.setup()
    assert run.agents == []  # nothing was loaded


# -- recipe fuzzing ------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["ring", "hf", "grpo", "zoo:llama-tiny", "majority"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=12)
KEYS = ["run", "run.steps", "run.seed", "run.observers", "run.supervised", "task", "task.type", "task.train_size",
        "agents", "agents[0]", "agents[0].name", "agents[0].model", "agents[0].sampler", "agents[0].sampler.type",
        "agents[0].sampler.temperature", "agents[1].optimizer", "agents[1].optimizer.lr", "agents[1].optimizer.type",
        "voting", "voting.type", "voting.n_votes", "voting.n_train", "voting.weight", "topology", "topology.type",
        "topology.combine", "eval.k", "zoo.steps", "extra", "agents[0].bogus"]


def mutate(data, path, value, delete):
    parts = path.replace("[", ".").replace("]", "").split(".")
    node = data
    for part in parts[:-1]:
        key = int(part) if part.isdigit() else part
        if isinstance(node, dict):
            node = node.setdefault(key, {})
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return
    last = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    if isinstance(node, dict):
        if delete:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(KEYS), values, st.booleans()), min_size=1, max_size=4))
def test_mutated_recipes_validate_or_raise_the_user_error(registry, mutations):
    data = base_recipe()
    for path, value, delete in mutations:
        mutate(data, path, value, delete)
    try:
        load_recipe(data, registry=registry)
    except ConfigError as exc:
        assert exc.problems and all(p.strip() and "\n" not in p for p in exc.problems)


@settings(max_examples=500, deadline=None)
@given(values)
def test_random_tables_never_crash_the_loader(registry, data):
    try:
        load_recipe(data if isinstance(data, dict) else {"run": data}, registry=registry)
    except ConfigError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_toml_text_is_a_user_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "r.toml"
    path.write_text(text)
    try:
        load_recipe(path, registry=build_registry(make_plugin_manager(autoload=False)))
    except ConfigError:
        pass
