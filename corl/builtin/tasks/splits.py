"""The seed / train / eval splits of a generated task, cut one way for every task that sizes them.

A task sized by ``seed_size`` / ``train_size`` / ``eval_size`` (:class:`SizedSplits`) builds its
splits here: from one pool of distinct problems cut in that order (:func:`cut_pool`, shuffled by the
task's ``seed`` first where the pool is every problem there is), or from one random stream per split
(:func:`drawn_splits`, where a split's size must never shift what another holds). Prompt ids are
``{split}-{i}``. :func:`missing_sized_split` is such a task's ``missing_split`` trait.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from corl.errors import ConfigError
from corl.types import Prompt

SPLITS = ("seed", "train", "eval")
Item = TypeVar("Item")
Splits = dict[str, tuple[Prompt, ...]]


class SizedSplits(Protocol):
    """A task config that sizes its splits (and seeds which problem falls in which)."""

    seed_size: int
    train_size: int
    eval_size: int
    seed: int


def sizes(config: SizedSplits) -> dict[str, int]:
    """``{split: size}`` in :data:`SPLITS` order."""
    return {"seed": config.seed_size, "train": config.train_size, "eval": config.eval_size}


def missing_sized_split(config: SizedSplits, split: str) -> str | None:
    """The :class:`~corl.traits.TaskTraits` ``missing_split`` of a sized task: a split of size 0
    holds nothing."""
    return f"task.{split}_size > 0" if sizes(config).get(split) == 0 else None


def cut_pool(config: SizedSplits, pool: Sequence[Item], prompt: Callable[[str, Item], Prompt], *,
             shuffle: bool = False, what: str = "problems") -> Splits:
    """Consecutive seed, train and eval slices of ``pool``, each item made a prompt by
    ``prompt(id, item)``. With ``shuffle`` the pool (every problem there is) is shuffled by
    ``config.seed`` first; a pool smaller than the three sizes together is a recipe error naming
    ``what`` it holds."""
    wanted = sizes(config)
    need = sum(wanted.values())
    if need > len(pool):
        raise ConfigError(f"task: seed_size + train_size + eval_size = {need} exceeds the {len(pool)} distinct {what}")
    if shuffle:
        pool = list(pool)
        random.Random(config.seed).shuffle(pool)
    splits, start = {}, 0
    for name, size in wanted.items():
        splits[name] = tuple(prompt(f"{name}-{i}", item) for i, item in enumerate(pool[start:start + size]))
        start += size
    return splits


def drawn_splits(config: SizedSplits, draw: Callable[[random.Random], Item],
                 prompt: Callable[[str, Item], Prompt]) -> Splits:
    """Each split drawn from a random stream of its own (seeded by ``config.seed`` and the split's
    place), ``size`` calls of ``draw(rng)``: one split's size never changes another's prompts."""
    splits = {}
    for index, (name, size) in enumerate(sizes(config).items()):
        rng = random.Random(f"{config.seed}:{index}")
        splits[name] = tuple(prompt(f"{name}-{i}", draw(rng)) for i in range(size))
    return splits
