"""The label-free collusion early stop: the signal, the roll-back, and Run.request_stop."""

from pathlib import Path
from types import SimpleNamespace

import pytest

import corl
from corl.builtin.early_stop import EarlyStop, EarlyStopConfig, collusion
from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe, to_dict
from corl.testing import TINY


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


class FakeAgent:
    def __init__(self):
        self.weights, self.loaded = 0, []

    def save_state(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "w").write_text(str(self.weights))

    def load_state(self, path):
        self.weights = int((Path(path) / "w").read_text())
        self.loaded.append(self.weights)


def test_observer_rolls_trained_agents_back_to_before_the_trend_and_requests_a_stop():
    agent, synced, stops = FakeAgent(), [], []
    slot = SimpleNamespace(name="a", agent=agent, optimizer=object(), sampler=SimpleNamespace(sync=synced.append))
    judge = SimpleNamespace(name="j", agent=FakeAgent(), optimizer=None, sampler=None)
    run = SimpleNamespace(agents=[slot, judge], start_step=0, request_stop=stops.append,
                          spec=SimpleNamespace(agents=[SimpleNamespace(name="a", frozen=False),
                                                       SimpleNamespace(name="j", frozen=True)]))
    obs = EarlyStop(CONFIG)
    obs.corl_on_run_start(run=run)
    steps = series([0.3, 0.3, 0.3, 0.3, 0.3, 0.4, 0.5, 0.6], [0.4, 0.4, 0.4, 0.4, 0.4, 0.5, 0.6, 0.7],
                   [5, 5, 5, 5, 5, 4, 3, 2])
    for step, m in enumerate(steps, 1):
        agent.weights = step  # "training" changes the weights every step
        flat = {**m, "distinct_answers": 9.0}  # the frozen judge's series never fires
        obs.corl_on_step_end(run=run, step=step, metrics=SimpleNamespace(agents={"a": m, "j": flat}))
        if stops:
            break
    # step 6: windows 1-3 vs 4-6 clear the default margins (reward and agreement +0.03, diversity -7%)
    assert step == 6 and len(stops) == 1 and "agent 'a'" in stops[0]
    assert agent.weights == 0 and synced == [agent]  # back to step 6 - 2 * window: the base
    assert judge.agent.loaded == []
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
