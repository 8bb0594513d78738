"""The drills task: every form's answer follows from its text, splits, the recipe key that picks forms,
and free-text answers read as numbers."""

import json
import re

import pytest

from corl.builtin.tasks import drills
from corl.cli import main
from corl.errors import CorlError
from corl.recipe import load_recipe


def _solve(text: str) -> int:
    """Re-derive a drill's answer from its words alone (independent of the generator's arithmetic)."""
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    if m := re.search(r"the word '(\w+)' appear in this list: ([a-z ]+)\?", text):
        return m.group(2).split().count(m.group(1))
    if "largest" in text or "larger" in text:
        return max(numbers)
    if "comes right after" in text:
        return numbers[0] + 1
    if "gets" in text:
        return numbers[0] + numbers[1]
    if "gives away" in text:
        return numbers[0] - numbers[1]
    if m := re.fullmatch(r"What is (\d+) ([-+*]) (\d+)(?: \+ (\d+))?\?", text):
        a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4) or 0)
        return {"+": a + b + c, "-": a - b, "*": a * b}[op]
    raise AssertionError(f"no form matches {text!r}")


@pytest.mark.parametrize("form", list(drills.FORMS))
def test_each_forms_answers_follow_from_its_text(form):
    count = 81 if form == "add0" else 200  # add0 has 9 x 9 problems in all
    problems = drills.generate(count, seed=5, forms=(form,))
    assert len({t for t, _ in problems}) == count
    for text, answer in problems:
        assert _solve(text) == answer >= 0, text
    assert drills.generate(50, seed=5, forms=(form,)) == problems[:50]
    assert drills.generate(50, seed=6, forms=(form,)) != problems[:50]


def test_forms_mix_and_ranges_hold():
    problems = drills.generate(400, seed=1, forms=("add", "count", "word"))
    kinds = {"count" if "appear" in t else "word" if "has" in t else "add" for t, _ in problems}
    assert kinds == {"add", "count", "word"}
    assert all(20 <= a <= 198 for t, a in drills.generate(100, seed=1, forms=("add",)))
    small = drills.generate(300, seed=1, forms=("add1",))
    assert all(12 <= a <= 58 and min(map(int, re.findall(r"\d+", t))) <= 9 for t, a in small)
    assert {a for _, a in drills.generate(300, seed=1, forms=("count",))} == {2, 3, 4, 5, 6}
    assert {a for _, a in drills.generate(81, seed=1, forms=("add0",))} == set(range(2, 19))
    with pytest.raises(CorlError, match="cannot draw 82 distinct drills"):
        drills.generate(82, seed=1, forms=("add0",))


def test_splits_are_disjoint_labelled_and_carry_the_instruction():
    task = drills.DrillsTask(drills.DrillsConfig(forms=("add", "sub"), train_size=40, eval_size=20, seed_size=5))
    texts = {name: {p.text for p in task.split(name)} for name in ("seed", "train", "eval")}
    assert [len(t) for t in texts.values()] == [5, 40, 20]
    assert not (texts["train"] & texts["eval"]) and not (texts["seed"] & texts["train"] | texts["seed"] & texts["eval"])
    for p in task.split("eval"):
        assert p.text.endswith(" End with 'Answer: <number>'.")
        assert str(_solve(p.text.removesuffix(" End with 'Answer: <number>'."))) == p.label


def test_free_text_answers_are_read_as_numbers():
    verifier = drills.DrillsTask(drills.DrillsConfig(train_size=1, eval_size=0)).verifier
    truth = verifier.label("76")
    for text in ("Answer: 76", "31 + 45 = 76. Answer: 76", "The answer is 76.", "Answer: 76 cats", "76.0"):
        assert verifier.equivalent(verifier.extract(text), truth), text
    assert not verifier.equivalent(verifier.extract("Answer: 75"), truth)


@pytest.mark.parametrize("forms, message", [
    ('["add", "adx"]', r"task\.forms\[1\]: invalid value 'adx'; valid: 'add0', 'add1', 'add'"),
    ("[]", r"task\.forms: .*name at least one form"),
    ('"add"', r"task\.forms: expected a list \(one of 'add0', 'add1'"),
])
def test_the_forms_key_is_checked_before_anything_loads(tmp_path, forms, message):
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.format(forms=forms))
    with pytest.raises(CorlError, match=message):
        load_recipe(path)


def test_the_forms_key_picks_the_task(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.format(forms='["count"]'))
    config = load_recipe(path).task.config
    assert config.forms == ("count",)
    task = drills.DrillsTask(config)
    assert all("appear in this list" in p.text for p in task.split("eval"))


def test_jsonl_export_and_its_errors(tmp_path, capsys):
    out = tmp_path / "d"
    keys = ["--set", "train_size=12", "--set", "eval_size=0", "--set", "seed=3", "--set", "instruction="]
    assert main(["data", "generate", "drills", str(out), *keys, "--set", 'forms=["max", "word"]']) == 0
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(str(_solve(r["question"])) == str(r["answer"]) for r in rows)
    assert main(["data", "generate", "drills", str(tmp_path / "e"), "--set", 'forms=["add", "nope"]']) == 2
    assert "task.forms[1]: invalid value 'nope'; valid: 'add0', 'add1', 'add'" in capsys.readouterr().err


RECIPE = """
[run]
steps = 1
[task]
type = "drills"
forms = {forms}
train_size = 4
eval_size = 4
seed_size = 4
[[agents]]
name = "a"
model = "zoo:llama-tiny"
[voting]
type = "majority"
[topology]
type = "self"
"""
