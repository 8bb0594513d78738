"""The run loop with injected components (library embedding) on tiny zoo models."""

import json

import pytest

import corl
from corl.builtin.voting import MajorityConfig, MajorityVote
from corl.errors import CorlError
from tests.kit import TINY

RECIPE = {
    "run": {"name": "embedded"},
    "agents": [{"name": "a", "model": "zoo:llama-tiny"}, {"name": "b", "model": "zoo:gpt-neox-tiny"}],
    "topology": {"type": "ring"},
}


class CountingMajority:
    """A custom aggregator built in code: majority voting that counts its calls."""

    def __init__(self):
        self.inner, self.calls = MajorityVote(MajorityConfig()), 0

    def aggregate(self, votes, verifier, context):
        self.calls += 1
        return self.inner.aggregate(votes, verifier, context)


class SpyRouter:
    """Label-free: records what the run hands it, rewards every answered sample."""

    supervised = False

    def __init__(self):
        self.truths = []

    def route(self, votes, labels, verifier, aggregator, truth=None):
        self.truths.append(truth)
        return {n: [[float(v.answer is not None) for v in vs] for vs in votes[n]] for n in votes}


class StepRecorder:
    def __init__(self):
        self.steps, self.evals, self.summary = [], [], None

    @corl.hookimpl
    def corl_on_step_end(self, run, step, metrics):
        self.steps.append((step, sorted(metrics.agents)))

    @corl.hookimpl
    def corl_on_eval_end(self, run, step, results):
        self.evals.append(step)

    @corl.hookimpl
    def corl_on_run_end(self, run, summary):
        self.summary = summary


def test_embedding_with_component_objects(tmp_path, cache_dir):
    aggregator, router, recorder = CountingMajority(), SpyRouter(), StepRecorder()
    summary = corl.run(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.steps=3", "eval.every=2"],
                       plugins=[recorder], aggregator=aggregator, router=router)
    # 2 agents x 3 steps of voting, plus maj@k in 3 evaluations (steps 0, 2, 3) x 2 agents
    assert aggregator.calls == 2 * 3 + 3 * 2
    assert router.truths == [None, None, None]  # a label-free router never sees labels
    assert recorder.steps == [(1, ["a", "b"]), (2, ["a", "b"]), (3, ["a", "b"])]
    assert recorder.evals == [0, 2, 3]
    assert recorder.summary == summary
    assert set(summary["agents"]) == {"a", "b"} and summary["agents"]["a"]["best_step"] in (0, 2, 3)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in train] == [1, 2, 3]
    # the spy rewards every answered sample, so the mean reward is the answered share
    for x in train:
        for m in x["agents"].values():
            assert abs(m["reward_mean"] - m["answered"]) < 0.13


def test_supervised_router_gets_the_labels(tmp_path, cache_dir):
    class Supervised(SpyRouter):
        supervised = True

    router = Supervised()
    # (declared supervised in the recipe: the label guard holds for objects as for registered routers)
    corl.run(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.observers=[]", "eval.size=0", "run.supervised=true",
                      "topology.type=ground_truth"], router=router)
    assert len(router.truths) == 2 and all(isinstance(t, list) and None not in t for t in router.truths)


def test_a_hanging_verifier_costs_one_answer_not_the_run(tmp_path, cache_dir):
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask, IntegerVerifier

    class HangsOnce(IntegerVerifier):
        bounded = False
        calls = 0

        def extract(self, text):
            HangsOnce.calls += 1
            while HangsOnce.calls == 1:  # the very first answer never returns
                pass
            return super().extract(text)

    task = ArithmeticTask(ArithmeticConfig(seed_size=256, train_size=64, eval_size=32))
    object.__setattr__(task, "verifier", HangsOnce())
    corl.run(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.steps=1", "run.answer_timeout=0.3", "eval.size=0",
                      "run.observers=['jsonl']"], task=task)
    train = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert train[0]["agents"]["a"]["verify_timeouts"] == 1.0 and train[0]["agents"]["b"]["verify_timeouts"] == 0.0


class ConstantLabel:
    """Colluding peers: the same pseudo-label for every prompt (one no sample can match)."""

    def aggregate(self, votes, verifier, context):
        return [corl.PseudoLabel("seven", 1.0, {"seven": 1.0}) for _ in votes]


def test_collapse_and_collusion_are_warned_once(tmp_path, cache_dir):
    summary = corl.run(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.steps=6", "run.observers=['jsonl']",
                                "eval.size=0"], aggregator=ConstantLabel())
    warnings = summary["warnings"]
    assert any("step 5: agent 'a': 100% of prompts share one pseudo-label" in w for w in warnings)
    # every sample is rewarded 0 against a label nobody says: no reward variance either
    assert any("step 5: agent 'b': reward std ~0" in w for w in warnings)
    assert len([w for w in warnings if "agent 'a'" in w and "collusion" in w]) == 1  # once, not every step


def test_eval_records_carry_cohort_matrices(tmp_path, cache_dir):
    corl.run(RECIPE, [*TINY, f"run.output_dir={tmp_path}", "run.steps=1", "run.observers=['jsonl']"])
    evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    cohort = evals[0]["cohort"]
    assert cohort["agents"] == ["a", "b"] and cohort["n"] == 16
    assert cohort["agreement"][0][0] == 1.0 and 0 <= cohort["agreement"][0][1] <= 1
    assert cohort["agreement"][0][1] == cohort["agreement"][1][0]
    assert cohort["same_wrong"][0][0] is None


def test_a_frozen_judge_votes_but_never_changes(tmp_path, cache_dir):
    from safetensors.torch import load_file

    recipe = {**RECIPE, "topology": {"type": "judge", "judge": "b"},
              "agents": [RECIPE["agents"][0], {**RECIPE["agents"][1], "frozen": True}]}
    router_calls = []

    class Spy(SpyRouter):
        def route(self, votes, labels, verifier, aggregator, truth=None):
            router_calls.append(sorted(votes))
            return {n: [[float(i % 2) for i in range(len(vs))] for vs in votes[n]] for n in votes}

    corl.run(recipe, [*TINY, f"run.output_dir={tmp_path}", "run.steps=2", "eval.size=0",
                      "run.observers=['jsonl', 'checkpoint']"], router=Spy())
    assert router_calls == [["a", "b"], ["a", "b"]]  # the judge's votes reach the router
    train = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert "grad_norm" in train[0]["agents"]["a"] and "grad_norm" not in train[0]["agents"]["b"]
    corl.run(recipe, [*TINY, f"run.output_dir={tmp_path / 'untrained'}", "run.steps=0", "eval.size=0",
                      "run.observers=['checkpoint']"], router=Spy())
    untrained = tmp_path / "untrained" / "checkpoints" / "final"
    trained = tmp_path / "checkpoints" / "final"
    base, final = load_file(untrained / "b" / "model.safetensors"), load_file(trained / "b" / "model.safetensors")
    assert all((base[k] == final[k]).all() for k in final)  # the judge never moved
    base, final = load_file(untrained / "a" / "model.safetensors"), load_file(trained / "a" / "model.safetensors")
    assert any((base[k] != final[k]).any() for k in final)  # its pupil did


def test_evaluations_draw_common_random_numbers_and_leave_training_alone(tmp_path, cache_dir):
    # judge topology: 'b' is frozen, so every evaluation of it scores the same weights
    recipe = {**RECIPE, "topology": {"type": "judge", "judge": "b"},
              "agents": [RECIPE["agents"][0], {**RECIPE["agents"][1], "frozen": True}]}
    runs = {}
    for every in (0, 1):
        out = tmp_path / f"every{every}"
        runs[every] = corl.run(recipe, [*TINY, f"run.output_dir={out}", "run.steps=3", f"eval.every={every}",
                                        "run.observers=['jsonl']"])
        runs[every]["train"] = [json.loads(x)["agents"]["a"] for x in (out / "metrics.jsonl").read_text().splitlines()
                                if '"train"' in x]
        runs[every]["evals"] = [json.loads(x)["agents"] for x in (out / "metrics.jsonl").read_text().splitlines()
                                if '"eval"' in x]
    # evaluating after every step draws nothing from the agents' training streams
    assert [r["reward_mean"] for r in runs[0]["train"]] == [r["reward_mean"] for r in runs[1]["train"]]
    assert runs[0]["agents"]["a"]["after"] == runs[1]["agents"]["a"]["after"]
    # the same weights evaluated at steps 0..3 give the same figures (the same draw every time)
    judge = [e["b"] for e in runs[1]["evals"]]
    assert len(judge) == 4 and all(e == judge[0] for e in judge)
    # and an evaluation is not a constant: the trained agent's pass@1 samples differ from the judge's
    assert runs[1]["evals"][0]["a"] != judge[0]


def test_the_test_time_protocol_trains_on_the_evaluated_prompts_without_their_labels():
    from corl.runtime import Run, prepare
    from corl.testing import FakePlugin, fake_recipe

    seen = []

    class Spy:
        def route(self, votes, labels, verifier, aggregator, truth=None):
            seen.append(truth)
            return {n: [[0.0] * len(vs) for vs in rows] for n, rows in votes.items()}

    recipe = fake_recipe(**{"run.protocol": "test_time", "eval.size": 16, "run.prompts_per_step": 8, "run.observers": []})
    pm, spec = prepare(recipe, ["run.output_dir=/tmp/unused-test-time"], plugins=[FakePlugin()])
    run = Run(spec, pm=pm, router=Spy())
    run.setup()
    assert [p.id for p in run.train] == [p.id for p in run.eval_prompts] and len(run.train) == 16
    trained = {p.id for i in range(4) for p in [run.train[j] for j in run.state.order.take(8, 16)]}
    assert trained == {p.id for p in run.eval_prompts}  # two epochs over exactly the evaluated prompts
    run.step(1)
    assert seen == [None]  # label-free: the router never sees their labels
    with pytest.raises(CorlError, match=r"eval.size \(the test-time training prompts\) is 4 prompts, fewer than "
                                        r"run.prompts_per_step \(8\)"):
        pm, spec = prepare(fake_recipe(**{"run.protocol": "test_time", "eval.size": 4}), plugins=[FakePlugin()])
        Run(spec, pm=pm).setup()
