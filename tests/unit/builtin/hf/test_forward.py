"""The update's forward pass: each distinct prompt once for all its samples gives the hidden states
and gradients of running every row whole, with and without gradient checkpointing."""

import pytest
import torch

from corl.builtin.hf.backend import forward
from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.backend.forward import hidden_states
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.models import zoo
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from tests.kit import hf_agent


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


def run(agent, batch, rows, *, share: bool, checkpointing: bool):
    model = agent.model
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.zero_grad(set_to_none=True)
    model.train(checkpointing)
    try:
        hidden = hidden_states(model, batch.sequences[rows], batch.attention_mask[rows], batch.prompt_len,
                               root=False, share=share)
        loss = (hidden.sin() * batch.completion_mask[rows, :, None]).sum()
        loss.backward()
    finally:
        model.eval()
        model.activation_checkpointing_disable()
    return hidden.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", sorted(zoo.FAMILIES))
def test_shared_prompts_give_the_whole_rows_hidden_states_and_gradients(name, task, cache_dir, monkeypatch):
    agent = hf_agent(name, task)
    passes = []  # (rows, tokens) of every pass through the body
    body = forward._body
    monkeypatch.setattr(forward, "_body", lambda *a, **k: passes.append(tuple(k["input_ids"].shape)) or body(*a, **k))
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, task.split("train")[:4], 3)
    rows = torch.tensor([0, 1, 2, 4, 5, 9])  # 3 + 2 + 1 samples of three prompts
    whole, grads = run(agent, rollout.batch, rows, share=False, checkpointing=False)
    width = rollout.batch.sequences.shape[1]
    assert passes == [(6, width)]
    for checkpointing in (False, True):
        passes.clear()
        shared, shared_grads = run(agent, rollout.batch, rows, share=True, checkpointing=checkpointing)
        # three prompts once, then the six completions on their prompts' keys and values
        assert passes == [(3, rollout.batch.prompt_len), (6, width - rollout.batch.prompt_len)], checkpointing
        assert torch.allclose(shared, whole, atol=1e-5), checkpointing
        assert shared_grads.keys() == grads.keys()
        for n, g in grads.items():
            assert torch.allclose(shared_grads[n], g, atol=1e-4, rtol=1e-4), (n, checkpointing)
