import json
from fractions import Fraction

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from corl.builtin.tasks.arithmetic import IntegerVerifier
from corl.builtin.voting import MajorityConfig, MajorityVote, WeightedConfig, WeightedVote, group_answers
from corl.types import Vote, VoteContext

LABEL_CTX = VoteContext("label")  # an agent's own labels (the built-in aggregators read no more of it)


@attrs.frozen
class FractionVerifier:
    """'1/2' and '0.5' are one answer."""

    def extract(self, text):
        return text

    def equivalent(self, a, b):
        return Fraction(a) == Fraction(b)


def votes(*answers, agent="a"):
    return [Vote(a, agent) for a in answers]


def test_equivalent_answers_are_grouped_before_counting():
    vs = votes("1/2", "3", "0.5", "2/4", "3", None)
    groups = group_answers(vs, FractionVerifier())
    assert [(rep, idx) for rep, idx in groups] == [("1/2", [0, 2, 3]), ("3", [1, 4])]
    [label] = MajorityVote(MajorityConfig()).aggregate([vs], FractionVerifier(), LABEL_CTX)
    assert label.answer == "1/2"
    assert label.share == pytest.approx(3 / 5)  # None does not vote
    assert dict(label.counts) == {"1/2": 3.0, "3": 2.0}


def test_no_valid_answer_gives_no_label():
    [label] = MajorityVote(MajorityConfig()).aggregate([votes(None, None)], IntegerVerifier(), LABEL_CTX)
    assert label.answer is None and label.share == 0.0


def test_ties_are_deterministic_seeded_and_unbiased():
    tie = votes(10, 7, 10, 7)
    pick = lambda seed: MajorityVote(MajorityConfig(), _Ctx(seed)).aggregate([tie], IntegerVerifier(), LABEL_CTX)[0]
    # a fresh aggregator with the same seed picks the same answer (no hidden state)
    assert all(pick(s).answer == pick(s).answer for s in range(5))
    assert pick(0).share == 0.5
    # Across seeds both tied answers win sometimes: no "smallest answer" bias.
    assert {pick(s).answer for s in range(40)} == {10, 7}


def test_tie_break_none_declines():
    [label] = MajorityVote(MajorityConfig(tie_break="none")).aggregate([votes(1, 2)], IntegerVerifier(), LABEL_CTX)
    assert label.answer is None


@attrs.frozen
class _Ctx:
    seed: int


answers = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=12), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(answers, st.integers(0, 3))
def test_weighted_with_equal_weights_equals_majority(batch, seed):
    vs = [[Vote(a, "x", confidence=-0.7) for a in row] for row in batch]
    majority = MajorityVote(MajorityConfig(), _Ctx(seed)).aggregate(vs, IntegerVerifier(), LABEL_CTX)
    for weight in ("uniform", "confidence", "self_consistency"):
        weighted = WeightedVote(WeightedConfig(weight=weight), _Ctx(seed)).aggregate(vs, IntegerVerifier(), LABEL_CTX)
        assert [w.answer for w in weighted] == [m.answer for m in majority]
        assert [w.share for w in weighted] == pytest.approx([m.share for m in majority])


def test_confidence_weights_can_overturn_the_count():
    vs = [Vote(1, "a", confidence=-3.0), Vote(1, "a", confidence=-3.0), Vote(2, "a", confidence=-0.01)]
    [label] = WeightedVote(WeightedConfig(weight="confidence")).aggregate([vs], IntegerVerifier(), LABEL_CTX)
    assert label.answer == 2
    [label] = MajorityVote(MajorityConfig()).aggregate([vs], IntegerVerifier(), LABEL_CTX)
    assert label.answer == 1


def test_self_consistency_weights_trust_the_consistent_agent():
    # Agent "steady" always agrees with itself; "noisy" splits. Pooled, steady's answer wins
    # even though noisy cast more votes for its own.
    prompt = votes(5, 5, agent="steady") + votes(6, 6, 6, 7, 8, 9, agent="noisy")
    other = votes(1, 1, agent="steady") + votes(2, 3, 4, 2, 5, 6, agent="noisy")
    labels = WeightedVote(WeightedConfig(weight="self_consistency")).aggregate([prompt, other], IntegerVerifier(), LABEL_CTX)
    assert labels[0].answer == 5
    assert MajorityVote(MajorityConfig()).aggregate([prompt], IntegerVerifier(), LABEL_CTX)[0].answer == 6


def test_confidence_gate_withholds_weak_labels():
    gated = MajorityVote(MajorityConfig(min_share=0.5))
    strong, weak, sparse = votes(3, 3, 3, 1), votes(3, 3, 1, 2, 4), votes(5, 5, None, None, None, None)
    labels = gated.aggregate([strong, weak, sparse], IntegerVerifier(), LABEL_CTX)
    assert labels[0].answer == 3
    assert labels[1].answer is None and labels[1].share == pytest.approx(2 / 5)  # 2 of 5 < 0.5
    # 2 of 2 valid answers, but only 2 of 6 votes: no-answers count against confidence
    assert labels[2].answer is None and labels[2].share == 1.0
    assert MajorityVote(MajorityConfig()).aggregate([sparse], IntegerVerifier(), LABEL_CTX)[0].answer == 5


# -- the reliability vote (one-coin Dawid-Skene) ------------------------------------------------------


def synthetic_cohort(accuracy: dict[str, float], prompts: int, n: int, seed: int, wrong: int = 20):
    """Agents of known accuracies voting on integer prompts whose answer is 0: each vote right with the
    agent's accuracy, else one of ``wrong`` wrong answers at random (errors that do not agree)."""
    import random

    rng = random.Random(seed)
    return {a: [[Vote(0 if rng.random() < acc else rng.randint(1, wrong), a) for _ in range(n)] for _ in range(prompts)]
            for a, acc in accuracy.items()}


def pooled(cohort, agents):
    return [[v for a in agents for v in cohort[a][p]] for p in range(len(cohort[agents[0]]))]


def test_the_reliability_vote_is_majority_without_evidence_and_on_equal_agents():
    from corl.builtin.voting import ReliabilityConfig, ReliabilityVote

    v = IntegerVerifier()
    cohort = synthetic_cohort({"a": 0.5, "b": 0.5, "c": 0.5}, prompts=32, n=4, seed=0)
    majority = MajorityVote(MajorityConfig()).aggregate(pooled(cohort, ["a", "b", "c"]), v, LABEL_CTX)
    fresh = ReliabilityVote(ReliabilityConfig())
    assert fresh.aggregate(pooled(cohort, ["a", "b", "c"]), v, LABEL_CTX) == majority  # no evidence: every agent alike
    # equal agents: the same votes under three names give three equal reliabilities, so the same labels
    same = {a: [[Vote(x.answer, a) for x in row] for row in cohort["a"]] for a in "abc"}
    vote = ReliabilityVote(ReliabilityConfig())
    metrics = vote.observe(same, v, 1)
    assert len({m["reliability"] for m in metrics.values()}) == 1
    assert vote.aggregate(pooled(same, ["a", "b", "c"]), v, LABEL_CTX) == \
        MajorityVote(MajorityConfig()).aggregate(pooled(same, ["a", "b", "c"]), v, LABEL_CTX)
    # one agent's votes (its own label, an evaluation's maj@k) are never weighed
    assert vote.aggregate(cohort["b"], v, LABEL_CTX) == MajorityVote(MajorityConfig()).aggregate(cohort["b"], v, LABEL_CTX)


def test_the_reliability_vote_ranks_agents_by_their_true_accuracy_and_beats_majority_on_unequal_ones():
    from corl.builtin.voting import ReliabilityConfig, ReliabilityVote

    v, truth = IntegerVerifier(), {"strong": 0.75, "mid": 0.45, "weak": 0.15, "weaker": 0.1}
    vote = ReliabilityVote(ReliabilityConfig())
    for step in range(1, 11):
        metrics = vote.observe(synthetic_cohort(truth, prompts=32, n=8, seed=step, wrong=3), v, step)
    learned = {a: m["reliability"] for a, m in metrics.items()}
    assert sorted(learned, key=learned.get) == sorted(truth, key=truth.get)  # the same ranking, label-free
    assert learned["strong"] == pytest.approx(0.75, abs=0.1) and learned["weaker"] < 0.25
    # pooled labels on fresh prompts: the weak agents' errors (3 wrong answers, so they pile up) are discounted
    test = synthetic_cohort(truth, prompts=400, n=8, seed=99, wrong=3)
    votes_ = pooled(test, list(truth))
    right = lambda labels: sum(lab.answer == 0 for lab in labels) / len(labels)
    assert right(vote.aggregate(votes_, v, LABEL_CTX)) > right(MajorityVote(MajorityConfig()).aggregate(votes_, v, LABEL_CTX)) + 0.05


def test_the_reliability_state_resumes_bit_for_bit(tmp_path):
    from corl.builtin.voting import ReliabilityConfig, ReliabilityVote

    v, truth = IntegerVerifier(), {"a": 0.7, "b": 0.4, "c": 0.2}
    steps = [synthetic_cohort(truth, prompts=16, n=4, seed=s, wrong=4) for s in range(6)]
    straight = ReliabilityVote(ReliabilityConfig())
    for s, cohort in enumerate(steps):
        straight.observe(cohort, v, s + 1)
        if s == 2:
            straight.save_state(str(tmp_path / "state"))
    resumed = ReliabilityVote(ReliabilityConfig())
    resumed.load_state(str(tmp_path / "state"))
    for s, cohort in enumerate(steps[3:], start=3):
        resumed.observe(cohort, v, s + 1)
    assert resumed.right == straight.right and resumed.answered == straight.answered  # floats, exactly
    last = pooled(steps[-1], ["a", "b", "c"])
    assert resumed.aggregate(last, v, LABEL_CTX) == straight.aggregate(last, v, LABEL_CTX)


def test_a_run_pooling_by_reliability_resumes_bit_for_bit(tmp_path):
    """The estimate across steps is saved in the checkpoint (corl.protocols.Stateful) and restored."""
    import corl
    from corl.errors import PluginError
    from corl.testing import fake_recipe, outcome, run_tiny

    recipe = fake_recipe(**{"run.steps": 5, "run.checkpoint_every": 2, "voting.type": "reliability",
                            "topology.type": "all_pairs", "run.observers": ["jsonl", "checkpoint"]})
    run_tiny(tmp_path / "straight", recipe)

    class CrashAtStep3:
        @corl.hookimpl
        def corl_on_step_end(self, run, step):
            if step == 3:
                raise RuntimeError("crash after the checkpoint of step 2")

    with pytest.raises(PluginError):
        run_tiny(tmp_path / "resumed", recipe, plugins=[CrashAtStep3()])
    saved = json.loads((tmp_path / "resumed" / "checkpoints" / "step-000002" / "components" / "aggregator" /
                        "reliability.json").read_text())
    assert set(saved["right"]) == {"fake0", "fake1", "fake2"}
    run_tiny(tmp_path / "resumed", recipe, resume=True)
    straight, resumed = outcome(tmp_path / "straight"), outcome(tmp_path / "resumed")
    assert straight[0] == resumed[0] and straight[1] == resumed[1]  # summary and every metric, reliability included
    assert all(torch.equal(straight[2][a]["logits"], resumed[2][a]["logits"]) for a in straight[2])
    assert "reliability" in straight[1][1]["agents"]["fake0"]
