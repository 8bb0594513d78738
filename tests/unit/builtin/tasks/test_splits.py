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
