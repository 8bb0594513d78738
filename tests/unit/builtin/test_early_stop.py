"""The label-free collusion early stop: the signal, the roll-back, and Run.request_stop."""

import pytest
import torch

import corl
from corl.builtin.early_stop import EarlyStop, EarlyStopConfig, collusion
from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe, to_dict
from corl.testing import ToyAgent, ToyAgentView, run_view
from corl.types import StepMetrics
from tests.kit import TINY


def series(rewards, shares, distinct):
    return [{"reward_mean": r, "label_share": s, "distinct_answers": d} for r, s, d in zip(rewards, shares, distinct)]


CONFIG = EarlyStopConfig(window=3)


def test_fires_only_when_reward_and_agreement_rise_while_diversity_falls():
    rising = [0.3, 0.3, 0.3, 0.4, 0.5, 0.6]
    colluding = series(rising, [0.4, 0.4, 0.4, 0.5, 0.6, 0.7], [5, 5, 5, 4, 3, 2])
    assert "reward 0.30 -> 0.50" in collusion(colluding, CONFIG)
    assert collusion(colluding[:5], CONFIG) is None  # needs two full windows
    # each leg alone is not the signal
    assert collusion(series(rising, [0.4, 0.4, 0.4, 0.5, 0.6, 0.7], [5] * 6), CONFIG) is None
    assert collusion(series(rising, [0.5] * 6, [5, 5, 5, 4, 3, 2]), CONFIG) is None
    assert collusion(series([0.5] * 6, [0.4, 0.4, 0.4, 0.5, 0.6, 0.7], [5, 5, 5, 4, 3, 2]), CONFIG) is None
    # a slow trend below the margins is sharpening, not collusion
    assert collusion(series([0.5, 0.5, 0.5, 0.51, 0.51, 0.51], [0.5, 0.5, 0.5, 0.51, 0.51, 0.51],
                            [5, 5, 5, 4.9, 4.9, 4.9]), CONFIG) is None


class Syncs(list):
    """A sampler that records the agents it is synced with."""

    def sync(self, agent):
        self.append(agent)


def test_observer_rolls_trained_agents_back_to_before_the_trend_and_requests_a_stop():
    agent, judge, synced = ToyAgent(name="a"), ToyAgent(name="j"), Syncs()
    run = run_view(agents=[ToyAgentView("a", agent, synced, optimizer=object()), ToyAgentView("j", judge)])
    obs = EarlyStop(CONFIG)
    obs.corl_on_run_start(run=run)
    steps = series([0.3, 0.3, 0.3, 0.3, 0.3, 0.4, 0.5, 0.6], [0.4, 0.4, 0.4, 0.4, 0.4, 0.5, 0.6, 0.7],
                   [5, 5, 5, 5, 5, 4, 3, 2])
    for step, m in enumerate(steps, 1):
        with torch.no_grad():  # "training" changes the weights every step (the frozen judge's too: it must stay)
            agent.theta.fill_(step)
            judge.theta.fill_(step)
        flat = {**m, "distinct_answers": 9.0}  # the frozen judge's series never fires
        obs.corl_on_step_end(run=run, step=step, metrics=StepMetrics(step, {"a": m, "j": flat}, 0.0))
        if run.stops:
            break
    # step 6: windows 1-3 vs 4-6 clear the default margins (reward and agreement +0.03, diversity -7%)
    assert step == 6 and len(run.stops) == 1 and "agent 'a'" in run.stops[0]
    assert agent.theta.item() == 0 and synced == [agent]  # back to step 6 - 2 * window: the base
    assert judge.theta.item() == step  # never rolled back
    obs.corl_on_run_end(run=run, summary={})
    assert obs.tmp is None


def test_recipe_observer_table_is_validated_and_recorded(tmp_path):
    base = {"run": {"name": "x"}, "agents": [{"name": "a", "model": "zoo:llama-tiny"}], "topology": {"type": "self"}}
    registry = build_registry(make_plugin_manager())
    spec = load_recipe({**base, "observers": {"early_stop": {"window": 2}}}, registry=registry)
    assert to_dict(spec)["observers"] == {"early_stop": attrs_dict(EarlyStopConfig(window=2))}
    assert to_dict(load_recipe(base, registry=registry))["observers"] == {}  # none configured
    with pytest.raises(ConfigError, match=r"observers\.early_stop\.windw: unknown key"):
        load_recipe({**base, "observers": {"early_stop": {"windw": 2}}}, registry=registry)
    with pytest.raises(ConfigError, match=r"observers\.nope: unknown observer"):
        load_recipe({**base, "observers": {"nope": {}}}, registry=registry)


def attrs_dict(config):
    import attrs

    return attrs.asdict(config)


class StopAtThree:
    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics):
        if step == 3:
            run.request_stop("enough")


def test_request_stop_ends_the_run_after_that_step_and_evaluates_it(tmp_path, cache_dir):
    recipe = {"run": {"name": "stop"}, "agents": [{"name": "a", "model": "zoo:llama-tiny"},
                                                  {"name": "b", "model": "zoo:gpt-neox-tiny"}],
              "topology": {"type": "ring"}}
    summary = corl.run(recipe, [*TINY, f"run.output_dir={tmp_path}", "run.steps=6", "run.observers=['jsonl']"],
                       plugins=[StopAtThree()])
    assert summary["stopped_at"] == 3 and summary["stop_reason"] == "enough"
    steps = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"kind": "train"' in line]
    assert len(steps) == 3
    assert summary["agents"]["a"]["after"] is not None and '"kind": "eval", "step": 3' in (tmp_path / "metrics.jsonl").read_text()
