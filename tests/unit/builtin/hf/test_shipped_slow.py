"""Rebuilding the shipped zoo models reproduces their files bit for bit (`pytest -m slow`, about 1-3
minutes a model on a free core). The rebuild is deterministic for one torch build at one thread;
on another CPU or torch version float sums may round differently and a digest may differ (the
shipped files are what every machine loads, which is why they are shipped)."""

import pytest

from corl.builtin.hf.models import shipped
from corl.builtin.tasks.addition import AdditionConfig, AdditionTask
from corl.builtin.tasks.shapes import ShapesConfig, ShapesTask


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(shipped.SHIPPED))
def test_rebuilding_a_shipped_model_reproduces_its_weights(name, tmp_path):
    config = AdditionConfig(**{k: v for k, v in shipped.TASK.items() if k != "type"})
    examples = [(p.text, p.solution) for p in AdditionTask(config).split("seed")]
    assert shipped.rebuild(name, examples, tmp_path / name, log=print) == shipped.SHIPPED[name].sha256


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(shipped.SHIPPED_VISION))
def test_rebuilding_a_shipped_vision_model_reproduces_its_weights(name, tmp_path):
    """The VLM pair's bases (2-6 minutes each on a free core: 1,100 and 3,000 warm-start steps)."""
    config = ShapesConfig(**{k: v for k, v in shipped.VISION_TASK.items() if k != "type"})
    prompts = ShapesTask(config).split("seed")
    assert shipped.rebuild_vision(name, prompts, tmp_path / name, log=print) == shipped.SHIPPED_VISION[name].sha256
