"""Built-in visual task: count the shapes of one colour in an image the project renders itself.

Each image is a grid of cells; a cell is empty or holds one shape (square, circle or triangle) of
one colour, with a random size and offset inside its cell. The prompt asks for one colour
(``count red``); the answer is how many shapes of that colour the image holds, an exact integer.
Images are drawn with PIL from the task's seed, so the splits are the same on every machine.
"""

from __future__ import annotations

import random
from typing import Literal

import attrs

from corl.builtin.tasks.generated import GeneratedTask
from corl.builtin.tasks.splits import Splits, drawn_splits
from corl.builtin.tasks.verifiers import IntegerVerifier
from corl.context import RegistryView
from corl.hookspecs import hookimpl
from corl.types import Prompt

v = attrs.validators
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (50, 80, 230), "yellow": (230, 200, 30)}
SHAPES = ("square", "circle", "triangle")


@attrs.frozen
class ShapesConfig:
    colours: tuple[Literal["red", "green", "blue", "yellow"], ...] = attrs.field(
        default=("red", "green", "blue"), validator=v.min_len(1),
        metadata={"help": "shape colours drawn (and asked about)"})
    # 4 x 8 = 32 pixels: one cell per 8x8 patch of the zoo's vision towers (a 3x3 grid of 10-pixel
    # cells, split across patches, left both tiny VLMs at the modal answer after 800 steps).
    grid: int = attrs.field(default=4, validator=[v.ge(1), v.le(8)], metadata={"help": "cells per image side"})
    cell: int = attrs.field(default=8, validator=[v.ge(6), v.le(64)], metadata={"help": "pixels per cell side"})
    fill: float = attrs.field(default=0.4, validator=[v.gt(0), v.le(1)],
                              metadata={"help": "probability that a cell holds a shape"})
    seed_size: int = attrs.field(default=4000, validator=v.ge(0),
                                 metadata={"help": "labeled examples for warm-starting zoo models"})
    train_size: int = attrs.field(default=1024, validator=v.ge(1),
                                  metadata={"help": "unlabeled Co-RL prompts (labels kept hidden, for monitoring)"})
    eval_size: int = attrs.field(default=500, validator=v.ge(0),
                                 metadata={"help": "held-out labeled prompts for evaluation"})
    seed: int = attrs.field(default=1234, metadata={"help": "seed of the rendered images and questions"})


def render(cells, grid: int, cell: int):
    """An RGB image of ``cells`` (``{(row, col): (colour, shape, size, dx, dy)}``) on white."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (grid * cell, grid * cell), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for (row, col), (colour, shape, size, dx, dy) in cells.items():
        x0, y0 = col * cell + dx, row * cell + dy
        box = (x0, y0, x0 + size - 1, y0 + size - 1)
        rgb = COLOURS[colour]
        if shape == "square":
            draw.rectangle(box, fill=rgb)
        elif shape == "circle":
            draw.ellipse(box, fill=rgb)
        else:
            draw.polygon([(x0 + size / 2, y0), (x0, y0 + size - 1), (x0 + size - 1, y0 + size - 1)], fill=rgb)
    return image


def draw_example(rng: random.Random, config: ShapesConfig):
    """One (image, question, answer) drawn from ``rng``."""
    cells = {}
    for row in range(config.grid):
        for col in range(config.grid):
            if rng.random() < config.fill:
                size = rng.randint(max(3, config.cell // 2), config.cell - 1)
                cells[row, col] = (rng.choice(config.colours), rng.choice(SHAPES), size,
                                   rng.randint(0, config.cell - size), rng.randint(0, config.cell - size))
    colour = rng.choice(config.colours)
    answer = sum(1 for c, *_ in cells.values() if c == colour)
    return render(cells, config.grid, config.cell), f"count {colour}", answer


class ShapesTask(GeneratedTask):
    """Labeled seed, unlabeled train and labeled eval splits of rendered images, each from its own stream."""

    name, Config = "shapes", ShapesConfig
    help = "rendered images: count the shapes of one colour (vision-language agents)"
    verifier = IntegerVerifier()

    def make_splits(self, config: ShapesConfig) -> Splits:
        # one stream per split: sizes never shift another split
        return drawn_splits(config, lambda rng: draw_example(rng, config), lambda id, example: Prompt(
            id=id, text=example[1], label=example[2], images=(example[0],)))


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    ShapesTask.register(registry)
