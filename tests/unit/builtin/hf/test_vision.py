"""Vision-language agents: the processor path behind the hf agent and sampler, on both tiny designs."""

import json

import attrs
import pytest
import torch
from PIL import Image

from corl.builtin.hf.models import sources
from corl.builtin.hf.vision import inputs as vision_inputs
from corl.builtin.hf.vision import make_vision_agent, make_vision_sampler
from corl.builtin.hf.vision import zoo as vision_zoo
from corl.builtin.hf.vision.agent import VisionAgent
from corl.builtin.hf.vision.config import HFVisionAgentConfig, VisionSamplerConfig
from corl.builtin.hf.vision.sampler import VisionSampler
from corl.builtin.policy import GRPOConfig, grpo
from corl.builtin.tasks.shapes import ShapesConfig, ShapesTask
from corl.errors import CorlError
from corl.types import Prompt
from tests.kit import zoo_context


@pytest.fixture(scope="module")
def task():
    return ShapesTask(ShapesConfig(seed_size=32, train_size=16, eval_size=4))


def agent_for(name, task, **kw):
    ctx = zoo_context(task, name, steps=3, batch_size=8)
    return make_vision_agent(HFVisionAgentConfig(model=f"zoo:{name}", **kw), ctx), ctx


@pytest.mark.parametrize("name", sorted(vision_zoo.FAMILIES))
def test_sampling_logprobs_match_the_training_forward(name, task, cache_dir):
    agent, ctx = agent_for(name, task)
    assert isinstance(agent, VisionAgent)
    sampler = make_vision_sampler(VisionSamplerConfig(temperature=0.7, top_p=0.9, max_new_tokens=4), attrs.evolve(ctx, agent=agent))
    assert isinstance(sampler, VisionSampler)
    prompts = task.split("train")[:6]
    assert len({len(p.text) for p in prompts}) > 1  # "count red" / "count green": left padding is exercised
    rollout = sampler.sample(agent, prompts, 3)
    batch = rollout.batch
    assert len(rollout.texts) == 6 and all(len(t) == 3 for t in rollout.texts)
    assert len(batch.images) == 18 and "pixel_values" in batch.images[0]
    with torch.no_grad():
        logp, entropy = agent.token_logprobs(batch, torch.tensor([17, 0, 5, 9]))
    rows = [17, 0, 5, 9]
    diff = ((logp - batch.old_logprobs[rows]).abs() * batch.completion_mask[rows]).max()
    assert float(diff) < 1e-4
    assert (entropy >= 0).all()


@pytest.mark.parametrize("name", sorted(vision_zoo.FAMILIES))
def test_the_image_reaches_the_model(name, task, cache_dir):
    agent, _ = agent_for(name, task)
    text = task.split("train")[0].text
    black, white = Image.new("RGB", (32, 32)), Image.new("RGB", (32, 32), (255, 255, 255))
    ids, mask, images = agent.encode([Prompt("a", text, images=(black,)), Prompt("b", text, images=(white,))])
    assert torch.equal(ids[0], ids[1])  # same text, so only the pixels differ
    with torch.no_grad():
        logits = agent.model(**agent.forward_inputs(ids, mask, images)).logits[:, -1]
    assert not torch.allclose(logits[0], logits[1])


def test_zoo_steps_sets_one_agents_warm_start(task, cache_dir):
    messages = []
    ctx = attrs.evolve(zoo_context(task, steps=3, batch_size=8), log=messages.append)
    short = make_vision_agent(HFVisionAgentConfig(model="zoo:llava-tiny", zoo_steps=1), ctx)
    default = make_vision_agent(HFVisionAgentConfig(model="zoo:llava-tiny"), ctx)
    assert any("warm-starting 1 supervised steps" in m for m in messages)
    a, b = dict(short.model.named_parameters()), dict(default.model.named_parameters())
    assert any(not torch.equal(a[k], b[k]) for k in a)  # 1 step vs the spec's 3: two cached models


def test_a_grpo_step_trains_through_the_image_inputs(task, cache_dir):
    agent, ctx = agent_for("idefics3-tiny", task)
    sampler = make_vision_sampler(VisionSamplerConfig(max_new_tokens=3), attrs.evolve(ctx, agent=agent))
    rollout = sampler.sample(agent, task.split("train")[:4], 4)
    before = [p.detach().clone() for p in agent.model.model.vision_model.parameters()]
    optimizer = grpo(GRPOConfig(lr=1e-2, scale_rewards=False), attrs.evolve(ctx, agent=agent))
    metrics = optimizer.step(rollout, [[1.0, 0.0, 0.0, 1.0]] * 4)
    assert metrics["nonfinite"] == 0 and metrics["grad_norm"] > 0
    after = list(agent.model.model.vision_model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the vision tower learned too


def test_zoo_processor_round_trips_through_save_pretrained(tmp_path, task, cache_dir):
    agent, _ = agent_for("llava-tiny", task)
    agent.save(str(tmp_path))
    assert sources.vision_config_in(tmp_path)
    config = HFVisionAgentConfig(model=str(tmp_path))
    again = make_vision_agent(config, zoo_context(task, "x", steps=3, batch_size=8))
    prompts = task.split("eval")[:2]
    a, b = agent.encode(prompts), again.encode(prompts)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2][0]["pixel_values"], b[2][0]["pixel_values"])


def test_text_and_vision_models_each_need_their_own_agent_type(tmp_path):
    from corl.builtin.hf.models.sources import check_source

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    check_source(str(tmp_path), vision=False)
    with pytest.raises(ValueError, match='not a vision-language model .*type = "hf"'):
        check_source(str(tmp_path), vision=True)
    with pytest.raises(ValueError, match="a vision-language zoo model; give this agent type = \"hf_vision\""):
        check_source("zoo:llava-tiny", vision=False)
    with pytest.raises(ValueError, match="a text zoo model; give this agent type = \"hf\""):
        check_source("zoo:llama-tiny", vision=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    with pytest.raises(ValueError, match='a vision-language model .*type = "hf_vision"'):
        check_source(str(tmp_path), vision=False)


def test_collate_concatenates_rows_and_zero_pads_tiles():
    rows = [{"pixel_values": torch.ones(1, 1, 3, 4, 4)}, {"pixel_values": torch.ones(1, 2, 3, 4, 4)}, {}]
    out = vision_inputs.collate(rows)
    assert out["pixel_values"].shape == (2, 2, 3, 4, 4)
    assert out["pixel_values"][0, 1].abs().sum() == 0 and out["pixel_values"][1].min() == 1


def test_unreadable_images_are_one_line_errors(tmp_path):
    with pytest.raises(CorlError, match=r"^image .*missing\.png: no such file$"):
        vision_inputs.load_image(tmp_path / "missing.png")
    (tmp_path / "note.png").write_text("not pixels")
    with pytest.raises(CorlError, match=r"^image .*note\.png: not a readable image"):
        vision_inputs.load_image(tmp_path / "note.png")


def test_the_vision_sampler_honours_min_p_and_the_repetition_penalty(task, cache_dir):
    """The knobs the hf sampler has: passed to generate (a greedy pass with a penalty is generate's own),
    while the recorded log-probs stay the model's own, equal to the training forward."""
    name = sorted(vision_zoo.FAMILIES)[0]
    agent, ctx = agent_for(name, task)
    prompts = task.split("train")[:2]
    config = VisionSamplerConfig(temperature=0.7, min_p=0.05, repetition_penalty=1.5, max_new_tokens=4)
    rollout = make_vision_sampler(config, attrs.evolve(ctx, agent=agent)).sample(agent, prompts, 2)
    batch = rollout.batch
    with torch.no_grad():
        logp, _ = agent.token_logprobs(batch, torch.arange(4))
    assert float(((logp - batch.old_logprobs[:4]).abs() * batch.completion_mask[:4]).max()) < 1e-4
    penalised = make_vision_sampler(attrs.evolve(config, repetition_penalty=50.0), attrs.evolve(ctx, agent=agent))
    greedy = penalised.sample(agent, prompts[:1], 1, greedy=True).batch
    ids, mask, images = agent.encode(prompts[:1])
    with torch.no_grad():
        want = agent.model.generate(**agent.forward_inputs(ids, mask, images), do_sample=False, max_new_tokens=4,
                                    repetition_penalty=50.0, pad_token_id=agent.tokenizer.pad_token_id,
                                    eos_token_id=agent.tokenizer.eos_token_id,
                                    suppress_tokens=agent.media_tokens or None)
    got = greedy.completion_ids[0][: want.shape[1] - ids.shape[1]]
    assert got.tolist() == want[0, ids.shape[1]:].tolist()
