"""Rebuilding the shipped zoo models reproduces their files bit for bit (`pytest -m slow`, about 1-3
minutes a model on a free core). The rebuild is deterministic for one torch build at one thread;
on another CPU or torch version float sums may round differently and a digest may differ (the
shipped files are what every machine loads, which is why they are shipped)."""

import pytest

from corl.builtin.hf.models import shipped
from corl.builtin.tasks.addition import AdditionConfig, AdditionTask


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(shipped.SHIPPED))
def test_rebuilding_a_shipped_model_reproduces_its_weights(name, tmp_path):
    config = AdditionConfig(**{k: v for k, v in shipped.TASK.items() if k != "type"})
    examples = [(p.text, p.solution) for p in AdditionTask(config).split("seed")]
    assert shipped.rebuild(name, examples, tmp_path / name, log=print) == shipped.SHIPPED[name].sha256
