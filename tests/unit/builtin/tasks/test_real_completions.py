"""The ``math`` extractor on real completions of SmolLM2-135M-Instruct and Gemma 3 270M (word problems,
temperature 0.7): it reads the answer a person reads in each, and nothing where none is stated.

``tests/fixtures/real_completions.jsonl`` is written by ``scripts/make_answer_fixture.py`` (the models'
completions once, then ``reads``: hand-written rules, independent of the extractor, reviewed by hand)."""

import json
from collections import Counter

import pytest

from corl.builtin.tasks.extract import _extract, _rational
from corl.builtin.tasks.verifiers import MathVerifier
from corl.builtin.tasks.word_problems import NumberVerifier
from tests.kit import ROOT

ROWS = [json.loads(line) for line in (ROOT / "tests" / "fixtures" / "real_completions.jsonl").read_text().splitlines()]
V, WORDS = MathVerifier(), NumberVerifier()


def test_the_fixture_is_real_completions_of_both_models():
    models = Counter(row["id"].split("-")[0] for row in ROWS)
    assert set(models) == {"smollm2", "gemma3"} and min(models.values()) >= 100
    stated = sum(row["reads"] is not None for row in ROWS)
    assert 0.25 * len(ROWS) < stated < len(ROWS)  # answers and non-answers, both in number
    assert any("<number>" in row["completion"] for row in ROWS)  # echoed instructions among them


@pytest.mark.parametrize("verifier", [V, WORDS], ids=["math", "word_problems"])
def test_the_extractor_reads_what_a_person_reads(verifier):
    wrong = []
    for row in ROWS:
        if verifier is WORDS and row["reads"] is not None and _rational(row["reads"]) is None:
            continue  # the word problems' verifier reads a number: the first of a list ("6, 8, 10")
        found, reads = verifier.extract(row["completion"]), row["reads"]
        if reads is None and found is None or reads is not None and found is not None and V.equivalent(found, reads):
            continue
        wrong.append(f"{row['id']}: reads {reads!r}, extracted {found!r}: ...{row['completion'][-120:]!r}")
    assert not wrong, "\n".join(wrong)


def test_non_answers_never_agree_and_right_answers_score():
    answers = [V.extract(row["completion"]) for row in ROWS]
    assert all(a is None or "<" not in str(a) for a in answers)
    right = sum(a is not None and V.equivalent(a, row["label"]) for a, row in zip(answers, ROWS))
    assert right == sum(row["reads"] is not None and V.equivalent(row["reads"], row["label"]) for row in ROWS) >= 10
    stated = [a for a in answers if a is not None]
    assert len(stated) == sum(row["reads"] is not None for row in ROWS)


def test_the_fallback_still_reads_finished_completions_without_a_marker():
    # the fallback's vetoes (a list, a statement after the number, a supposition, a side remark) are not
    # "never read an unmarked completion": where a person reads its last number, the fallback reads it
    paths = Counter(_extract(row["completion"], False, 2)[1] for row in ROWS if row["reads"] is not None)
    assert paths["fallback"] >= 20
