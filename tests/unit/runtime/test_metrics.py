"""A step's metrics say only what was measured: no 100% reward accuracy when nothing was rewarded, no
statistics of rewards that were not finite, and health checks that neither count nor forget an
unmeasured step."""

import json

from corl.builtin.tasks.verifiers import IntegerVerifier
from corl.runtime.health import PATIENCE, Health
from corl.runtime.metrics import merge_ranks, vote_metrics
from corl.types import PseudoLabel, Vote


def votes(*rows):
    return [[Vote(a, "x") for a in row] for row in rows]


def labels(*answers):
    return [PseudoLabel(a, 1.0 if a is not None else 0.0, {}) for a in answers]


def own(votes, labels, rewards, truth, n_train, skipped=None):
    """vote_metrics of an agent rewarded by its own labels (a self router)."""
    return vote_metrics(votes, labels, labels, skipped or [False] * len(votes), rewards, truth, IntegerVerifier(),
                        n_train)


def test_reward_accuracy_needs_a_rewarded_sample():
    wrong = votes([1, 2], [3, 4])  # every answer wrong against truth 9
    nothing = own(wrong, labels(None, None), [[0.0, 0.0], [0.0, 0.0]], [9, 9], 2)
    assert "reward_accuracy" not in nothing  # "every zero reward agreed with a wrong answer" is not 100%
    assert nothing["label_accuracy"] == 0.0 and nothing["train_accuracy"] == 0.0
    some = own(votes([9, 2], [3, 4]), labels(9, None), [[1.0, 0.0], [0.0, 0.0]], [9, 9], 2)
    assert some["reward_accuracy"] == 1.0


def test_no_finite_reward_gives_no_reward_statistics():
    m = own(votes([1, 2]), labels(1), [[float("nan"), float("nan")]], [None], 2)
    assert "reward_mean" not in m and "reward_std" not in m and m["answered"] == 1.0


def test_label_metrics_describe_the_label_an_agent_was_rewarded_against():
    """Under a ring the agent is paid by its peer's label: label_accuracy is that label's accuracy."""
    mine, peers = labels(1, 2), labels(9, 9)
    m = vote_metrics(votes([1, 1], [2, 2]), mine, peers, [False, False], [[0.0, 0.0], [0.0, 0.0]], [9, 9],
                     IntegerVerifier(), 2)
    assert m["label_accuracy"] == 1.0  # the peer's, not its own (0.0)
    assert "label_share" in m and m["label_mode_share"] == 0.5  # collusion still reads its own labels


def test_skipped_prompts_count_in_no_reward_statistic():
    """A router's deliberate gate: constant rewards there would read as zero reward variance."""
    m = own(votes([1, 2], [3, 4]), labels(1, None), [[1.0, 0.0], [0.0, 0.0]], [1, 3], 2, skipped=[False, True])
    assert m["reward_mean"] == 0.5 and m["reward_std"] == 0.5 and m["skipped_prompts"] == 0.5
    gated = own(votes([1, 2]), labels(None), [[0.0, 0.0]], [1], 2, skipped=[True])
    assert "reward_std" not in gated and "reward_mean" not in gated  # not measured: no collapse streak


def test_ranks_that_did_not_measure_a_metric_are_left_out_of_its_mean():
    merged = merge_ranks([{"entropy": 0.4, "verify_timeouts": 1.0}, {"verify_timeouts": 2.0}])
    assert merged == {"entropy": 0.4, "verify_timeouts": 3.0}


def test_an_unmeasured_entropy_neither_extends_nor_ends_a_collapse_streak():
    health = Health()
    low = {"reward_std": 0.3, "entropy": 0.001, "label_mode_share": 0.0, "active_fraction": 1.0}
    skipped = {"reward_std": 0.3, "label_mode_share": 0.0, "active_fraction": 0.0}  # no update: no entropy
    for step in range(1, PATIENCE):
        assert health.check(step, {"a": low}, 8) == []
    assert health.check(PATIENCE, {"a": skipped}, 8) == []  # not a fifth collapsed step, and no reset
    assert health.streaks["a", "entropy"] == PATIENCE - 1
    [warning] = health.check(PATIENCE + 1, {"a": low}, 8)
    assert "policy entropy ~0" in warning


class NoReward:
    """A label-free router that rewards nothing."""

    def route(self, votes, labels, verifier, aggregator, truth=None):
        return {name: [[0.0] * len(row) for row in rows] for name, rows in votes.items()}


def test_an_unmeasured_metric_is_absent_from_every_output(corl_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from corl.testing import fake_recipe
    from corl.tools.report import render_report

    _, out = corl_run(fake_recipe(**{"run.steps": 2, "run.observers": ["jsonl", "tensorboard"]}), router=NoReward())
    train = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    assert train and all("reward_accuracy" not in m and "label_accuracy" in m
                         for r in train for m in r["agents"].values())
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "train/fake0/label_accuracy" in tags and not [t for t in tags if t.endswith("/reward_accuracy")]
    render_report(out)
    assert "reward accuracy" not in (out / "report" / "report.md").read_text().lower()
