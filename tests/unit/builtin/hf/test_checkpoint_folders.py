"""A whole-run checkpoint's agent folder (``checkpoints/step-*/agents/<name>/``) is a Hugging Face
folder: ``from_pretrained`` loads the trained weights, tokenizer and processor from it."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

from corl.builtin.hf.models import zoo
from corl.builtin.hf.vision import make_vision_agent
from corl.builtin.hf.vision import zoo as vision_zoo
from corl.builtin.hf.vision.config import HFVisionAgentConfig
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from corl.builtin.tasks.shapes import ShapesConfig, ShapesTask
from tests.kit import hf_agent, zoo_context


def nudge(model):
    """Change every weight, so a folder that loads the base model instead fails the comparison."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)


def same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key].to(sb[key].dtype), sb[key]), key


@pytest.mark.parametrize("name", sorted(zoo.FAMILIES))
def test_a_text_agents_checkpoint_loads_with_from_pretrained(name, tmp_path, cache_dir):
    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=8, eval_size=4))
    agent = hf_agent(name, task, steps=2)
    nudge(agent.model)
    agent.save_state(str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    same_weights(agent.model, model)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    text = task.split("train")[0].text
    assert tokenizer(text)["input_ids"] == agent.tokenizer(text)["input_ids"]
    ids = torch.tensor([agent.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, agent.model(ids).logits, atol=1e-5)
    again = hf_agent(name, task, steps=2)
    again.load_state(str(tmp_path))  # resume reads the same folder
    same_weights(agent.model, again.model)


@pytest.mark.parametrize("name", sorted(vision_zoo.FAMILIES))
def test_a_vision_agents_checkpoint_loads_with_from_pretrained(name, tmp_path, cache_dir):
    task = ShapesTask(ShapesConfig(seed_size=32, train_size=4, eval_size=2))
    agent = make_vision_agent(HFVisionAgentConfig(model=f"zoo:{name}"), zoo_context(task, name, steps=2, batch_size=8))
    nudge(agent.model)
    agent.save_state(str(tmp_path))
    same_weights(agent.model, AutoModelForImageTextToText.from_pretrained(tmp_path))
    processor = AutoProcessor.from_pretrained(tmp_path)
    assert type(processor) is type(agent.processor)
    assert processor.chat_template == agent.processor.chat_template
