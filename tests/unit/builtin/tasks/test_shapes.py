"""The rendered shapes task: seeded, disjoint streams per split, and labels the pixels bear out."""

from collections import Counter

from corl.builtin.tasks.shapes import COLOURS, ShapesConfig, ShapesTask


def count_in_pixels(image, colour: str, grid: int, cell: int) -> int:
    """Cells whose pixels hold the colour: each shape lies inside its own cell."""
    rgb = COLOURS[colour]
    return sum(1 for row in range(grid) for col in range(grid)
               if any(image.getpixel((col * cell + x, row * cell + y)) == rgb
                      for x in range(cell) for y in range(cell)))


def test_labels_match_what_is_drawn():
    config = ShapesConfig(seed_size=0, train_size=40, eval_size=0)
    for prompt in ShapesTask(config).split("train"):
        colour = prompt.text.removeprefix("count ")
        (image,) = prompt.images
        assert image.size == (config.grid * config.cell,) * 2
        assert count_in_pixels(image, colour, config.grid, config.cell) == prompt.label


def test_splits_are_seeded_and_sized():
    config = ShapesConfig(seed_size=20, train_size=30, eval_size=10)
    a, b = ShapesTask(config), ShapesTask(config)
    for name, size in (("seed", 20), ("train", 30), ("eval", 10)):
        assert len(a.split(name)) == size
        assert [p.images[0].tobytes() for p in a.split(name)] == [p.images[0].tobytes() for p in b.split(name)]
    # a bigger seed split leaves the eval split as it was
    bigger = ShapesTask(ShapesConfig(seed_size=50, train_size=30, eval_size=10))
    assert [p.label for p in bigger.split("eval")] == [p.label for p in a.split("eval")]
    other = ShapesTask(ShapesConfig(seed_size=20, train_size=30, eval_size=10, seed=7))
    assert [p.images[0].tobytes() for p in other.split("eval")] != [p.images[0].tobytes() for p in a.split("eval")]


def test_answers_spread_over_several_counts():
    labels = Counter(p.label for p in ShapesTask(ShapesConfig(seed_size=0, train_size=400, eval_size=0)).split("train"))
    assert len(labels) >= 5 and max(labels.values()) < 0.4 * 400  # no single answer is a free pass
