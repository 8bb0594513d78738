import pytest

from corl.builtin.tasks.arithmetic import IntegerVerifier
from corl.runtime.cohort import label_disagreement, pairwise, phi, rank_cohorts

V = IntegerVerifier()


def test_phi_on_known_series():
    a = [True, True, False, False]
    assert phi(a, a) == pytest.approx(1.0)
    assert phi(a, [not x for x in a]) == pytest.approx(-1.0)
    assert phi(a, [True, False, True, False]) == pytest.approx(0.0)  # independent by construction
    assert phi(a, [True] * 4) is None  # undefined when one agent is always right


def test_pairwise_matrices_on_a_hand_built_cohort():
    labels = [1, 2, 3, 4, 5, 6]
    answers = {
        "x": [1, 2, 3, 9, 9, 8],     # right on 0-2
        "y": [1, 2, 3, 9, 7, None],  # right on 0-2 too: errors perfectly correlated, one shared wrong answer
        "z": [0, 0, 3, 4, 5, 6],     # right on 2-5
    }
    out = pairwise(answers, V, labels)
    assert out["agents"] == ["x", "y", "z"] and out["n"] == 6
    agree = out["agreement"]
    assert agree[0][1] == pytest.approx(4 / 6)  # 1, 2, 3, 9
    assert agree[0][2] == pytest.approx(1 / 6)
    assert agree[1][0] == agree[0][1] and agree[2][2] == 1.0
    assert out["phi"][0][1] == pytest.approx(1.0)
    assert out["phi"][0][2] == pytest.approx(phi([1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1]))
    assert out["phi"][0][2] < 0
    # x and y both wrong on prompts 3, 4, 5: same wrong answer only on prompt 3 (9 == 9)
    assert out["same_wrong"][0][1] == pytest.approx(1 / 3)
    # x and z both wrong on prompts 0, 1: x says 1, 2 - right? no: x is right there; so none in common
    assert out["same_wrong"][0][2] is None
    assert out["same_wrong"][1][1] is None


def test_without_labels_only_agreement():
    out = pairwise({"x": [1, 2], "y": [1, 3]}, V)
    assert out["agreement"][0][1] == 0.5 and out["phi"] is None and out["same_wrong"] is None


def test_label_free_disagreement_and_ranking():
    labels = {"a": [1, 2, 3, 4], "b": [1, 2, 3, 5], "c": [9, 8, 3, 4], "d": [1, None, 3, 4]}
    d = label_disagreement(labels, V)
    assert d[0][1] == 0.25 and d[0][2] == 0.5 and d[0][3] == 0.25 and d[1][1] == 0.0
    ranked = rank_cohorts(d, strength=[0.9, 0.9, 0.9, 0.9], names=list(labels))
    assert ranked[0]["agents"] == ["b", "c"] and ranked[0]["topology"] == "ring"  # differ on 3 of 4
    assert ranked[0]["score"] == pytest.approx(0.75 * 0.9)
    # a member that disagrees with everyone because it is weak is discounted by its strength
    weak = rank_cohorts(d, strength=[0.9, 0.9, 0.1, 0.9], names=list(labels))
    assert "c" not in weak[0]["agents"]
    trios = [c for c in weak if len(c["agents"]) == 3]
    assert trios[0]["topology"] == "all_pairs"
