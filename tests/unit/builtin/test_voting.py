from fractions import Fraction

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corl.builtin.tasks.arithmetic import IntegerVerifier
from corl.builtin.voting import MajorityConfig, MajorityVote, WeightedConfig, WeightedVote, group_answers
from corl.types import Vote


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
    [label] = MajorityVote(MajorityConfig()).aggregate([vs], FractionVerifier())
    assert label.answer == "1/2"
    assert label.share == pytest.approx(3 / 5)  # None does not vote
    assert dict(label.counts) == {"1/2": 3.0, "3": 2.0}


def test_no_valid_answer_gives_no_label():
    [label] = MajorityVote(MajorityConfig()).aggregate([votes(None, None)], IntegerVerifier())
    assert label.answer is None and label.share == 0.0


def test_ties_are_deterministic_seeded_and_unbiased():
    tie = votes(10, 7, 10, 7)
    pick = lambda seed: MajorityVote(MajorityConfig(), _Ctx(seed)).aggregate([tie], IntegerVerifier())[0]
    # a fresh aggregator with the same seed picks the same answer (no hidden state)
    assert all(pick(s).answer == pick(s).answer for s in range(5))
    assert pick(0).share == 0.5
    # Across seeds both tied answers win sometimes: no "smallest answer" bias.
    assert {pick(s).answer for s in range(40)} == {10, 7}


def test_tie_break_none_declines():
    [label] = MajorityVote(MajorityConfig(tie_break="none")).aggregate([votes(1, 2)], IntegerVerifier())
    assert label.answer is None


@attrs.frozen
class _Ctx:
    seed: int


answers = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=12), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(answers, st.integers(0, 3))
def test_weighted_with_equal_weights_equals_majority(batch, seed):
    vs = [[Vote(a, "x", confidence=-0.7) for a in row] for row in batch]
    majority = MajorityVote(MajorityConfig(), _Ctx(seed)).aggregate(vs, IntegerVerifier())
    for weight in ("uniform", "confidence", "self_consistency"):
        weighted = WeightedVote(WeightedConfig(weight=weight), _Ctx(seed)).aggregate(vs, IntegerVerifier())
        assert [w.answer for w in weighted] == [m.answer for m in majority]
        assert [w.share for w in weighted] == pytest.approx([m.share for m in majority])


def test_confidence_weights_can_overturn_the_count():
    vs = [Vote(1, "a", confidence=-3.0), Vote(1, "a", confidence=-3.0), Vote(2, "a", confidence=-0.01)]
    [label] = WeightedVote(WeightedConfig(weight="confidence")).aggregate([vs], IntegerVerifier())
    assert label.answer == 2
    [label] = MajorityVote(MajorityConfig()).aggregate([vs], IntegerVerifier())
    assert label.answer == 1


def test_self_consistency_weights_trust_the_consistent_agent():
    # Agent "steady" always agrees with itself; "noisy" splits. Pooled, steady's answer wins
    # even though noisy cast more votes for its own.
    prompt = votes(5, 5, agent="steady") + votes(6, 6, 6, 7, 8, 9, agent="noisy")
    other = votes(1, 1, agent="steady") + votes(2, 3, 4, 2, 5, 6, agent="noisy")
    labels = WeightedVote(WeightedConfig(weight="self_consistency")).aggregate([prompt, other], IntegerVerifier())
    assert labels[0].answer == 5
    assert MajorityVote(MajorityConfig()).aggregate([prompt], IntegerVerifier())[0].answer == 6


def test_confidence_gate_withholds_weak_labels():
    gated = MajorityVote(MajorityConfig(min_share=0.5))
    strong, weak, sparse = votes(3, 3, 3, 1), votes(3, 3, 1, 2, 4), votes(5, 5, None, None, None, None)
    labels = gated.aggregate([strong, weak, sparse], IntegerVerifier())
    assert labels[0].answer == 3
    assert labels[1].answer is None and labels[1].share == pytest.approx(2 / 5)  # 2 of 5 < 0.5
    # 2 of 2 valid answers, but only 2 of 6 votes: no-answers count against confidence
    assert labels[2].answer is None and labels[2].share == 1.0
    assert MajorityVote(MajorityConfig()).aggregate([sparse], IntegerVerifier())[0].answer == 5
