"""One helper cuts the seed / train / eval splits of every generated task (corl.builtin.tasks.splits)."""

import hashlib

import attrs
import pytest

from corl.builtin.tasks import splits
from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.types import Prompt


@attrs.frozen
class Sized:
    seed_size: int = 2
    train_size: int = 3
    eval_size: int = 1
    seed: int = 7


def as_prompt(id, item):
    return Prompt(id=id, text=str(item), label=item)


def test_a_pool_is_cut_in_order_into_disjoint_splits():
    cut = splits.cut_pool(Sized(), range(10), as_prompt)
    assert {name: [p.label for p in ps] for name, ps in cut.items()} == {"seed": [0, 1], "train": [2, 3, 4], "eval": [5]}
    assert [p.id for p in cut["train"]] == ["train-0", "train-1", "train-2"]


def test_a_shuffled_pool_depends_on_the_seed_only():
    first = splits.cut_pool(Sized(), list(range(100)), as_prompt, shuffle=True)
    assert first == splits.cut_pool(Sized(), list(range(100)), as_prompt, shuffle=True)
    assert first != splits.cut_pool(Sized(seed=8), list(range(100)), as_prompt, shuffle=True)
    labels = [p.label for ps in first.values() for p in ps]
    assert len(set(labels)) == 6


def test_a_pool_too_small_is_a_recipe_error_naming_what_it_holds():
    with pytest.raises(ConfigError, match=r"^task: seed_size \+ train_size \+ eval_size = 6 exceeds the 5 distinct "
                                          r"problems of kinds \['add'\]$"):
        splits.cut_pool(Sized(), range(5), as_prompt, what="problems of kinds ['add']")


def test_drawn_splits_do_not_shift_when_another_split_grows():
    draw = lambda rng: rng.randrange(10**9)
    small, large = splits.drawn_splits(Sized(), draw, as_prompt), splits.drawn_splits(Sized(train_size=50), draw, as_prompt)
    assert small["eval"] == large["eval"] and small["seed"] == large["seed"]
    assert large["train"][:3] == small["train"] and len(large["train"]) == 50


def test_missing_sized_split():
    assert splits.missing_sized_split(Sized(), "seed") is None
    assert splits.missing_sized_split(Sized(seed_size=0), "seed") == "task.seed_size > 0"


#: A digest of each generated task's splits, taken before the tasks shared this helper: what falls in
#: which split is unchanged (the shipped zoo models were warm-started on addition's seed split).
SMALL = {"addition": ({}, "34a8ba7d2f170f57"), "arithmetic": ({}, "4b023c43c4aac245"),
         "word_problems": ({"seed_size": 5}, "64064cac4448a510"),
         "drills": ({"seed_size": 5, "forms": ("add", "mul", "count")}, "4417bff092c02031"),
         "shapes": ({"seed_size": 5, "train_size": 6, "eval_size": 4}, "f67fdf6887bfeca5"),
         "expressions": ({}, "ef8ff16e93438fea"),
         "python_functions": ({"seed_size": 5, "train_size": 20, "eval_size": 10}, "41d2dce4c0f8c00d")}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_generated_task_keeps_its_splits(name):
    registry = build_registry(make_plugin_manager(autoload=False))
    keys, expected = SMALL[name]
    component = registry.get("task", name)
    task = component.factory(component.config_cls(**{"seed_size": 50, "train_size": 30, "eval_size": 20, **keys}), None)
    digest = hashlib.sha256()
    for split in splits.SPLITS:
        for p in task.split(split):
            digest.update(repr((p.id, p.text, p.label, p.solution, p.test_inputs)).encode())
            for image in p.images:
                digest.update(image.tobytes())
    assert digest.hexdigest()[:16] == expected
    assert component.traits.missing_split is splits.missing_sized_split  # the sized tasks' one trait


#: The second seed and eval prompt of each task at the sizes above, spelled out (the digest above
#: covers every prompt; these say what changed when it fails).
PINNED = {
    "addition": [("seed-1", "932+965=", 1897), ("eval-1", "420+409=", 829)],
    "arithmetic": [("seed-1", "5*8+81=", 121), ("eval-1", "18+57=", 75)],
    "word_problems": [("seed-1", "Maya has 24 apples. She shares her apples equally among 8 baskets and keeps one "
                                 "basket. How many apples does Maya have now? End with 'Answer: <number>'.", "3"),
                      ("eval-1", "Lena reads 41 pages on Monday. On Tuesday she reads 21 more pages. How many pages "
                                 "is the count now? End with 'Answer: <number>'.", "62")],
    "drills": [("seed-1", "What is 84 + 14? End with 'Answer: <number>'.", "98"),
               ("eval-1", "What is 5 * 66? End with 'Answer: <number>'.", "330")],
    "shapes": [("seed-1", "count red", 8), ("eval-1", "count green", 2)],
    "expressions": [("seed-1", "23,29,37=", ("47", "73", "173", "17")), ("eval-1", "-4,4,12=", ("20", "36", "76", "-20"))],
    "python_functions": [
        ("seed-1", "Write a Python function `f(n)` that returns n to the power 3. Answer with the function in a "
                   "```python code block.", ("0", "1", "343", "1728", "15625", "1000000", "-27")),
        ("eval-1", "Write a Python function `f(n)` that returns True when n is divisible by 8, else False. Answer "
                   "with the function in a ```python code block.", ("True", "False", "False", "False", "False",
                                                                   "False", "False"))],
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_generated_task_keeps_its_prompts_and_labels(name):
    registry = build_registry(make_plugin_manager(autoload=False))
    component = registry.get("task", name)
    config = component.config_cls(**{"seed_size": 50, "train_size": 30, "eval_size": 20, **SMALL[name][0]})
    task = component.factory(config, None)
    assert [(p.id, p.text, p.label) for p in (task.split("seed")[1], task.split("eval")[1])] == PINNED[name]
