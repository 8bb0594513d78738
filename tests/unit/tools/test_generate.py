"""corl data generate TASK OUT: a generated task's splits as JSONL files that the jsonl task reads
back with the same prompts and labels (images as PNG files beside them)."""

import json
import re

import pytest
from PIL import Image

from corl.builtin.tasks.data import DataConfig, DataTask
from corl.cli import main
from corl.errors import CorlError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe.overrides import apply_overrides
from corl.tools.generate import write
from corl.types import Prompt

SIZES = ["--set", "seed_size=3", "--set", "train_size=5", "--set", "eval_size=4"]
KEYS = {"addition": [], "arithmetic": [], "word_problems": ["--set", "max_ops=2"],
        "drills": ["--set", 'forms=["max", "word", "count"]', "--set", "seed=3"], "shapes": []}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_generated_splits_read_back_as_the_same_prompts_and_labels(name, tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["data", "generate", name, str(out), *SIZES, *KEYS[name]]) == 0
    printed = capsys.readouterr().out
    registry = build_registry(make_plugin_manager(autoload=False))
    component = registry.get("task", name)
    keys = apply_overrides({"seed_size": 3, "train_size": 5, "eval_size": 4}, KEYS[name][1::2])
    original = component.factory(component.config_cls(**keys), None)
    integer = 'answers = "integer"' in printed
    assert integer is (name in ("addition", "arithmetic", "shapes"))  # the printed table says how labels read
    read = DataTask(DataConfig(train=str(out / "train.jsonl"), eval=str(out / "eval.jsonl"), seed=str(out / "seed.jsonl"),
                               answers="integer" if integer else "math",
                               image_field="image" if name == "shapes" else None))
    for split in ("seed", "train", "eval"):
        before, after = original.split(split), read.split(split)
        assert [(p.text, p.label) for p in after] == [(p.text, p.label) for p in before] and len(before) > 0
        for b, a in zip(before, after):
            assert [Image.open(path).convert("RGB").tobytes() for path in a.images] == [i.tobytes() for i in b.images]
    assert f'train = "{(out / "train.jsonl").as_posix()}"' in printed


def test_an_empty_split_writes_no_file_and_rows_are_question_and_answer(tmp_path):
    out = tmp_path / "wp"
    assert main(["data", "generate", "word_problems", str(out), "--set", "train_size=2", "--set", "eval_size=0"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl"]  # seed_size and eval_size are 0
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(set(r) == {"question", "answer"} and r["question"].endswith("'Answer: <number>'.")
                                  for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["nope"], "task 'nope' is no generated task; choose one of: addition, arithmetic, drills, shapes, word_problems"),
    (["expressions"], "task 'expressions' writes no data files (it declares no generates_data); choose one of: "
                      "addition, arithmetic, drills, shapes, word_problems"),
    (["drills", "--set", 'forms=["nope"]'], "task.forms[0]: invalid value 'nope'; valid: 'add0',"),
    (["drills", "--set", "bogus=1"], "task.bogus: unknown key; valid keys here: eval_size, forms,"),
    (["word_problems", "--set", "min_ops=3", "--set", "max_ops=2"], "task: min_ops (3) exceeds max_ops (2)"),
    (["addition", "--set", "digits=1"], "task: seed_size + train_size + eval_size = 23048 is more than half the 100"),
])
def test_a_bad_task_or_key_is_one_line_and_writes_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["data", "generate", argv[0], str(out), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"corl: error: {message}") and err.count("\n") == 1
    assert not out.exists()


def test_a_folder_with_files_is_never_written_over(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["data", "generate", "arithmetic", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("prompt, message", [
    (Prompt(id="train-1", text="f", label=("1",), test_inputs=((1,),)), "task 'mine': prompt train-1 carries test inputs"),
    (Prompt(id="train-1", text="f", messages=(("user", "f"),)), "task 'mine': prompt train-1 carries chat turns"),
    (Prompt(id="train-1", text="f", label=("1", "2")), "task 'mine': prompt train-1: a data file's answer is text or a "
                                                        "number, not tuple ('1', '2')"),
])
def test_a_prompt_a_data_file_cannot_hold_is_refused_before_anything_is_written(prompt, message, tmp_path):
    first = Prompt(id="train-0", text="1+1=", label=2)
    with pytest.raises(CorlError, match=f"^{re.escape(message)}"):
        write(tmp_path / "out", {"train": (first, prompt)}, "mine")
    assert not (tmp_path / "out").exists()


def test_a_write_that_fails_halfway_leaves_no_folder(tmp_path):
    """An image that cannot be saved (here: a file that is gone) stops the write; OUT is written whole
    or not at all, so the next attempt is not refused as "not empty"."""
    first = Prompt(id="train-0", text="1+1=", label=2)
    gone = Prompt(id="train-1", text="what shape?", label="circle", images=(str(tmp_path / "missing.png"),))
    (tmp_path / "out").mkdir()  # an empty folder given as OUT is fine
    with pytest.raises(FileNotFoundError):
        write(tmp_path / "out", {"train": (first, gone)}, "mine")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == []
