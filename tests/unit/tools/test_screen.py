"""corl screen's figures, computed by hand on small answer tables."""

import pytest

from corl.errors import CorlError
from corl.tools.screen import numbers_in, plurality, render, screen

EQ = lambda a, b: str(a) == str(b)  # noqa: E731
TEXTS = ["Which is the largest of 10, 50, 20?", "Which is the largest of 70, 30, 40?",
         "Which is the largest of 15, 25, 95?", "Which is the largest of 11, 12, 13?"]
TRUTH = ["50", "70", "95", "13"]
ANSWERS = {
    # a: always the first number, twice in three samples
    "a": [["10", "10", "50"], ["70", "70", None], ["15", "15", "95"], ["11", "11", "13"]],
    # b: right but on prompt 3, where it copies the first number as a does
    "b": [["50", "50", "50"], ["70", "30", "70"], ["15", "15", "15"], ["13", "13", "12"]],
    # c: right on 1 and 3, wrong (its own way) on 2 and 4
    "c": [["50", "50", "10"], ["40", "40", "70"], ["95", "95", "95"], ["12", "12", "13"]],
}


def test_plurality_and_numbers():
    assert plurality(["1", "2", "2", None]) == ("2", 0.5)
    assert plurality([None, None]) == (None, 0.0)
    assert numbers_in("largest of 10, -5, 2.5?") == [10.0, -5.0, 2.5]


def test_the_labelled_screen():
    out = screen(ANSWERS, EQ, TRUTH, TEXTS)
    a, b, c = (out["agents"][n] for n in "abc")
    assert a["maj@k"] == 0.25 and b["maj@k"] == 0.75 and c["maj@k"] == 0.5  # a right on 2 only; b on 1, 2, 4; c on 1, 3
    assert a["pass@1"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 3 + 1 / 3) / 4)
    assert a["no_answer"] == pytest.approx(1 / 12)
    assert a["majority_position"] == {"1": 4}  # a copies the first number every time: a positional shortcut
    assert a["maj@k_by_true_position"] == {"1": 1.0, "2": 0.0, "3": 0.0}
    pairs = {tuple(p["agents"]): p for p in out["pairs"]}
    assert pairs["a", "b"]["both_wrong"] == 1 and pairs["a", "b"]["same_wrong"] == 1  # prompt 3: both say 15
    assert pairs["a", "c"]["both_wrong"] == 1 and pairs["a", "c"]["same_wrong"] == 0  # prompt 4: 11 vs 12
    assert pairs["b", "c"]["disagree"] == 0.75
    fixes = out["corrections"]["a"]  # a wrong on prompts 1, 3, 4
    assert fixes["wrong_majorities"] == 3 and fixes["b"] == pytest.approx(2 / 3) and fixes["c"] == pytest.approx(2 / 3)
    # pooled b + c: prompt 1 50 (5 of 6), prompt 3 15 x3 vs 95 x3 (15 reached first), prompt 4 13 x3 vs 12 x3 (13 first)
    assert fixes["pooled others"] == pytest.approx(2 / 3)
    assert out["pooled_all_maj"] == 0.75
    text = render(out)
    assert "pooled vote of all agents: maj 0.750" in text and 'chosen {"1": 4}' in text


def test_the_label_free_screen_leaves_out_what_needs_labels():
    out = screen(ANSWERS, EQ, None, TEXTS)
    assert "maj@k" not in out["agents"]["a"] and not out["corrections"] and "both_wrong" not in out["pairs"][0]
    assert out["agents"]["a"]["majority_position"] == {"1": 4}
    assert "label-free" in render(out)


def test_mismatched_answer_tables_are_refused():
    with pytest.raises(CorlError, match="same prompts"):
        screen({"a": [["1"]], "b": [["1"], ["2"]]}, EQ)
