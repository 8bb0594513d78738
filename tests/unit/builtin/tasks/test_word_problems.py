"""The word-problem task: the generator's answers, its splits and export, and free-text answers as votes."""

import json
import re

import pytest

from corl.builtin.tasks import word_problems as wp
from corl.builtin.voting import MajorityConfig, MajorityVote
from corl.cli import main
from corl.types import Vote, VoteContext

LABEL_CTX = VoteContext("label")  # an agent's own labels (the built-in aggregators read no more of it)


def _solve(text: str) -> int:
    """Re-derive a problem's answer from its sentences alone (independent of the generator's arithmetic)."""
    for who, unit, start, sentences, question in wp.TEMPLATES:
        def pattern(s, who=who, unit=unit):
            return re.escape(s.format(who=who, n="\0", x=unit)).replace("\0", r"(\d+)")

        m = re.match(pattern(start), text, re.IGNORECASE)
        if not m:
            continue
        value, rest = int(m.group(1)), text[m.end():].strip()
        ending = question.format(who=who, x=unit)
        while not rest.startswith(ending):
            for op, sentence in sentences.items():
                s = re.match(pattern(sentence), rest, re.IGNORECASE)
                if s:
                    n = int(s.group(1))
                    value = {"add": value + n, "sub": value - n, "mul": value * n, "div": value // n}[op]
                    rest = rest[s.end():].strip()
                    break
            else:
                raise AssertionError(f"unparsed: {rest!r}")
        return value
    raise AssertionError(f"no template matches {text!r}")


def test_generated_answers_follow_from_the_text_and_span_one_to_four_operations():
    problems = wp.generate(300, seed=7)
    assert len({t for t, _ in problems}) == 300
    for text, answer in problems:
        assert _solve(text) == answer >= 0
    ops = {len(re.findall(r"\d+", t)) - 1 for t, _ in problems}
    assert ops == {1, 2, 3, 4}
    assert wp.generate(50, seed=7) == problems[:50] and wp.generate(50, seed=8) != problems[:50]


def test_splits_are_disjoint_and_carry_the_instruction():
    task = wp.WordProblemsTask(wp.WordProblemsConfig(train_size=40, eval_size=20, seed_size=5, max_ops=2))
    texts = {name: {p.text for p in task.split(name)} for name in ("seed", "train", "eval")}
    assert [len(t) for t in texts.values()] == [5, 40, 20]
    assert not (texts["train"] & texts["eval"]) and not (texts["seed"] & texts["train"])
    assert all(p.text.endswith("End with 'Answer: <number>'.") for p in task.split("eval"))
    with pytest.raises(ValueError, match="min_ops"):
        wp.WordProblemsConfig(min_ops=3, max_ops=2)


def test_jsonl_export_reads_back(tmp_path):
    out = tmp_path / "wp"
    assert main(["data", "generate", "word_problems", str(out), "--set", "train_size=12", "--set", "eval_size=0",
                 "--set", "seed=3", "--set", "max_ops=2", "--set", "instruction="]) == 0
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [(r["question"], int(r["answer"])) for r in rows] == wp.generate(12, 3, 1, 2)


@pytest.mark.parametrize("text", [
    "Answer: 42", "First 40 + 2 = 42.\n#### 42", "so the total is \\boxed{42}", "40 plus 2 makes 42",
    "The answer is 42.0", "Answer: $42", "12 + 30 = 42. Answer: 42\n", "Answer: 42 pens, since 12+30 is 42",
])
def test_free_text_answer_forms_are_read_and_match(text):
    task = wp.WordProblemsTask(wp.WordProblemsConfig(train_size=1, eval_size=0))
    answer = task.verifier.extract(text)
    assert answer is not None and task.verifier.equivalent(answer, "42")
    assert not task.verifier.equivalent(answer, "41")


def test_42_42point0_and_dollar_42_are_one_vote():
    verifier = wp.WordProblemsTask(wp.WordProblemsConfig(train_size=1, eval_size=0)).verifier
    texts = ["Answer: 42", "Answer: 42.0", "Answer: $42", "Answer: 41", "#### 41"]
    votes = [[Vote(verifier.extract(t), "a") for t in texts]]
    label = MajorityVote(MajorityConfig(), None).aggregate(votes, verifier, LABEL_CTX)[0]
    assert verifier.equivalent(label.answer, "42") and label.share == pytest.approx(0.6)
