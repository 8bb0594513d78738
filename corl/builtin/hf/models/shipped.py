"""The zoo models shipped trained inside the package, and how they were built (to rebuild them).

Three transformers families of the zoo's size (d 64, 4 layers, 0.15-0.2M parameters, under 1.1 MB
each), none needing a warm-start, so step 0 is the same on every machine and a first run starts in
seconds. Each was warm-started on the ``addition`` task's default labeled seed split (3-digit
operands, answers least-significant digit first, 20000 examples, task seed 1234) by
:func:`corl.builtin.hf.models.warmstart.train` with a constant learning rate after 100 warmup steps,
and stopped *inside* the sharp transition in which that family learns the task (10% -> 99% pass@1
within a few hundred steps): a base with sampling headroom (maj@8 well above pass@1) that RL can move
(docs/results/claims.md). ``zoo:llama-add3``, ``zoo:qwen2-add3``, ``zoo:neox-add3`` stop midway (the default
testbed); the ``-weak`` ones early (the weak cohort, recipes/weak; ``zoo:neox-add3-weak`` is also the
unequal cohort's weak third, recipes/cohort) and ``zoo:qwen2-add3-strong`` late (the strong member of
recipes/one_strong). A warm-start stopped inside a transition lands elsewhere on another machine
(the weak cohort's bases, warm-started at load on another machine, came out 20 / 88 / 18%
pass@1 instead of ~40%), which is why every base a recipe starts from mid-transition is shipped.

Two vision-language ones (:data:`SHIPPED_VISION`) are the VLM pair's matched bases
(recipes/vlm_pair_ring.toml): ``zoo:llava-shapes`` and ``zoo:idefics3-shapes``, the vision zoo's
``zoo:llava-tiny`` and ``zoo:idefics3-tiny`` warm-started on the ``shapes`` task's labeled seed split
as that recipe warm-started them at load before they shipped (LLaVA after 3,000 steps; Idefics3 stopped
inside its transition, at step 850 of 2,000 where the recipe stopped it at 1,100: the same warm-start
went through the transition earlier on the machine they were built on; :data:`SHIPPED_VISION`).

``scripts/make_zoo.py`` rebuilds them (``--check`` compares the sha256 of each rebuilt
``model.safetensors`` with :data:`SHIPPED` and :data:`SHIPPED_VISION`; the slow test ``tests/unit/builtin/hf/test_shipped_slow.py``
does the same). A rebuild is bit-for-bit on one torch build at one thread; another machine or
library version may stop elsewhere in the transition, which is why the weights are shipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from corl import logs
from corl.atomic import atomic_folder
from corl.builtin.hf.models import zoo
from corl.builtin.hf.models.catalog import SHIPPED_VISION_ZOO, SHIPPED_ZOO, VISION_ZOO, shipped_folder
from corl.builtin.hf.models.config import ZooConfig


@attrs.frozen
class ShippedModel:
    family: str
    warm_start: ZooConfig
    sha256: str  # the first 16 hex digits of model.safetensors' sha256
    #: its documented regime: pass@1 on a fixed small eval (the 200 eval prompts of an addition task with
    #: seed_size 0 and train_size 8, x 4 samples at temperature 1, torch seed 0; tests/unit/builtin/hf/
    #: test_shipped.py) lies in this band
    pass1: tuple[float, float]


def _constant(lr: float, steps: int) -> ZooConfig:
    return ZooConfig(steps=steps, lr=lr, batch_size=128, seed=0, schedule="constant", warmup_steps=100)


#: The tokenizer's characters: the zoo's plus ``|``, which the vocabulary these models were first
#: built with kept for a worked answer format (column digits and carries, then ``|`` and the answer).
CHARS = zoo.CHARS + "|"
#: The ``[task]`` whose seed split they were warm-started on (the addition task's defaults).
TASK = {"type": "addition", "digits": 3, "order": "reversed", "seed_size": 20000, "seed": 1234}
#: Step counts chosen inside each family's transition. The *-add3 ones: a probe evaluated every 100
#: steps (llama lr 3e-3 10% @1600 -> 63% @1800 -> 84% @2000; qwen2 lr 1e-3 11% @1200 -> 57% @1300; neox
#: lr 3e-3 33% @700 -> 58% @800; qwen2 at 3e-3 never left 0% in 3000 steps). The weak and strong ones,
#: on another machine (where the same warm-starts run faster through the transition): pass@1 / maj@8
#: on 200 eval prompts x 8, every 100 steps (every 20 or 10 near the stop): llama lr 1e-3 8% @1200 ->
#: 42% / 58% @1300; qwen2 lr 1e-3 21% @1500 -> 35% / 51% @1560 -> 57% @1600 -> 85% / 98% @1800; neox lr 3e-3 21% @570 ->
#: 32% / 52% @580 -> 42% @600 -> 79% @800 (docs/results/claims.md, "A weak cohort").
SHIPPED = {
    "llama-add3": ShippedModel("llama", _constant(3e-3, 1800), "d9d9d72005d56b94", (0.45, 0.8)),
    "qwen2-add3": ShippedModel("qwen2", _constant(1e-3, 1300), "9d7a197091925971", (0.45, 0.8)),
    "neox-add3": ShippedModel("gpt_neox", _constant(3e-3, 800), "2eaf0ae360cba285", (0.45, 0.8)),
    # the weak cohort (recipes/weak; neox also the unequal cohort's weak third, recipes/cohort)
    "llama-add3-weak": ShippedModel("llama", _constant(1e-3, 1300), "87a79b24062e18ae", (0.30, 0.47)),
    "qwen2-add3-weak": ShippedModel("qwen2", _constant(1e-3, 1560), "a41abd88a0737f07", (0.31, 0.48)),
    "neox-add3-weak": ShippedModel("gpt_neox", _constant(3e-3, 580), "39e83c7875216c2b", (0.23, 0.40)),
    # the strong member of recipes/one_strong
    "qwen2-add3-strong": ShippedModel("qwen2", _constant(1e-3, 1800), "0d1c45b7fdb0959b", (0.82, 0.96)),
}
assert {n: m.family for n, m in SHIPPED.items()} == SHIPPED_ZOO


@attrs.frozen
class ShippedVisionModel:
    base: str  # the vision zoo model it was warm-started from (zoo:llava-tiny, ...)
    warm_start: ZooConfig
    sha256: str  # the first 16 hex digits of model.safetensors' sha256
    #: its documented regime: greedy accuracy and pass@1 on a fixed small eval (the first 100 eval prompts
    #: of the VISION_TASK, greedy then x 4 samples at temperature 1, torch seed 0;
    #: tests/unit/builtin/hf/test_shipped.py) lie in these bands
    greedy: tuple[float, float]
    pass1: tuple[float, float]


#: The ``[task]`` whose seed split the vision ones were warm-started on (recipes/vlm_pair_ring.toml's:
#: the shapes task's defaults; each split has its own stream, so train and eval sizes change nothing).
VISION_TASK = {"type": "shapes", "seed_size": 4000, "seed": 1234}
_VLM_PAIR = ZooConfig(steps=2000, batch_size=64, lr=1e-3)  # recipes/vlm_pair_ring.toml's [zoo] before they shipped
#: The VLM pair's bases (docs/how-to/vision.md, "Shipped bases"), on 500 eval prompts x 8 (greedy / pass@1 /
#: maj@8). The recipe's own warm-starts, rebuilt on the machine these were made on, did not land where
#: docs/how-to/vision.md measured them (LLaVA 0.528 / 0.379 / 0.384, Idefics3 at step 1,100 0.530 / 0.391 /
#: 0.393): LLaVA's 3,000 steps stayed at the modal-answer plateau (0.304 / 0.239 / 0.206; zoo seeds 1 and 2
#: too: pass@1 0.235, 0.210) and is shipped as it came out; Idefics3 (the 2,000-step cosine) went through
#: its transition earlier (0.468 / 0.358 / 0.408 @800 -> 0.506 / 0.391 / 0.416 @850 -> 0.588 / 0.461 /
#: 0.482 @900 -> 0.699 pass@1 @1100), so it is stopped at 850, where the docs' step-1,100 snapshot was.
SHIPPED_VISION = {
    "llava-shapes": ShippedVisionModel("llava-tiny", attrs.evolve(_VLM_PAIR, steps=3000), "18cff12214b02eea",
                                       greedy=(0.20, 0.36), pass1=(0.18, 0.32)),
    "idefics3-shapes": ShippedVisionModel("idefics3-tiny", attrs.evolve(_VLM_PAIR, stop=850), "36af71b2414e59c1",
                                          greedy=(0.42, 0.60), pass1=(0.32, 0.50)),
}
assert {n: VISION_ZOO[m.base] for n, m in SHIPPED_VISION.items()} == SHIPPED_VISION_ZOO


def digest(folder: Path) -> str:
    """The first 16 hex digits of the sha256 of ``folder/model.safetensors``."""
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()[:16]


def rebuild(name: str, examples: Sequence[tuple[str, str]], out: Path,
            log: Callable[[str], None] = logs.logger.info) -> str:
    """Warm-start shipped model ``name`` again on ``examples`` (the TASK's seed split as (prompt,
    answer) pairs) into the folder ``out``, at one torch thread; returns its :func:`digest`."""
    spec = SHIPPED[name]
    return _rebuilt(lambda: zoo.warm_start(spec.family, examples, spec.warm_start, chars=CHARS), out, spec.sha256,
                    f"zoo:{name}: rebuilt {spec.warm_start.steps} steps", log)


def rebuild_vision(name: str, prompts: Sequence, out: Path, log: Callable[[str], None] = logs.logger.info) -> str:
    """Warm-start shipped vision model ``name`` again on ``prompts`` (the VISION_TASK's labeled seed
    split) into the folder ``out``, at one torch thread, as recipes/vlm_pair_ring.toml did at load;
    returns its :func:`digest`."""
    from corl.builtin.hf.vision import zoo as vision_zoo

    spec = SHIPPED_VISION[name]
    return _rebuilt(lambda: vision_zoo.warm_start(spec.base, prompts, spec.warm_start), out, spec.sha256,
                    f"zoo:{name}: rebuilt zoo:{spec.base} {spec.warm_start.describe()} steps", log)


def _rebuilt(build: Callable[[], tuple], out: Path, shipped: str, what: str, log: Callable[[str], None]) -> str:
    """``build()`` (a model and its tokenizer or processor) at one torch thread, as the shipped files
    were built (float sums depend on it), saved whole into ``out``; its :func:`digest`, logged against
    the shipped one."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tokenizer = build()
    finally:
        torch.set_num_threads(threads)
    with atomic_folder(Path(out)) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    got = digest(out)
    log(f"{what} -> {out} (sha256 {got}; shipped {shipped}, {'identical' if got == shipped else 'DIFFERENT'})")
    return got


def shipped_digest(name: str) -> str:
    """The :func:`digest` of the installed package's copy of ``name``."""
    return digest(shipped_folder(name))
