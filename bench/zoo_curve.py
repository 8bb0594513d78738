"""Where a zoo model's warm-start has sampling headroom: snapshots of one warm-start, every EVERY steps.

    python bench/zoo_curve.py RECIPE AGENT STEPS EVERY OUT [--keep-schedule] [--threads 1] [KEY.PATH=VALUE ...]

Warm-starts the recipe's agent AGENT (a ``zoo:`` text or vision model) for STEPS supervised steps on
the task's labeled seed split, with the recipe's ``[zoo]`` settings but a constant learning rate
after the warmup (``zoo.warmup_steps``, else 100: so that the snapshot at step S *is* the model a recipe gets with
``zoo.schedule = "constant"``, that warmup and ``zoo_steps = S``), and writes a model folder every EVERY steps to
OUT/step-S. With ``--keep-schedule`` the recipe's schedule is kept (cosine by default, decaying
over STEPS): snapshot S is then the model of ``zoo_steps = STEPS`` with ``zoo_stop = S``. Then evaluate them, e.g.

    for s in OUT/step-*; do corl eval RECIPE --model AGENT=$s --size 200 --json; done

and pick a step inside the learning transition where pass@1 is 30-70% and maj@k is well above it
(docs/results/claims.md: RL moves a base there). One torch thread: the trajectory is the recipe's only at
the thread count it was made with.
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import torch

from corl.builtin.hf.models import zoo
from corl.builtin.hf.models.config import zoo_config_for
from corl.builtin.hf.vision import zoo as vision_zoo
from corl.context import Context
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.runtime.build import Builder


def main(recipe: str, agent: str, steps: int, every: int, out: Path, overrides: list[str], keep: bool) -> None:
    torch.set_num_threads(THREADS)
    registry = build_registry(make_plugin_manager())
    spec = load_recipe(recipe, overrides, registry=registry)
    task = Builder(registry)("task", spec.task, Context(spec=spec, seed=spec.run.seed))
    (settings,) = [a.agent.config for a in spec.agents if a.name == agent]
    config = zoo_config_for(settings, spec.sections["zoo"])
    config = attrs.evolve(config, steps=steps, stop=None) if keep else \
        attrs.evolve(config, steps=steps, stop=None, schedule="constant", warmup_steps=config.warmup_steps or 100)
    name = settings.model.removeprefix("zoo:")
    vision = name in vision_zoo.FAMILIES
    module = vision_zoo if vision else zoo
    seed = list(task.split("seed"))
    done = [0]

    def snapshot_train(model, *args, check=lambda: None, **kwargs):
        def probe():
            check()
            if done[0] and done[0] % every == 0:
                model.eval()
                model.save_pretrained(out / f"step-{done[0]:05d}")
                model.train()
            done[0] += 1

        return train(model, *args, check=probe, **kwargs)

    train, module.train = module.train, snapshot_train
    try:
        if vision:
            model, processor = vision_zoo.warm_start(name, seed, config)
        else:
            examples = [(p.text, str(p.label) if p.solution is None else p.solution) for p in seed]
            model, processor = zoo.warm_start(zoo.FAMILIES[name], examples, config)
    finally:
        module.train = train
    model.save_pretrained(out / f"step-{steps:05d}")
    for folder in sorted(out.glob("step-*")):
        processor.save_pretrained(folder)
    print(f"{agent}: {len(list(out.glob('step-*')))} snapshots in {out} ({config})")


THREADS = 1  # --threads N anywhere in the arguments


if __name__ == "__main__":
    if "--threads" in sys.argv:
        THREADS = int(sys.argv.pop(sys.argv.index("--threads") + 1))
        sys.argv.remove("--threads")
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    rest = [a for a in sys.argv[6:] if a != "--keep-schedule"]
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]), rest,
         keep=len(rest) < len(sys.argv[6:]))
