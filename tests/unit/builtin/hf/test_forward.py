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


@pytest.mark.parametrize("window", [12, 4])
def test_sliding_window_layers_share_a_prompt_shorter_than_their_window(window, task, cache_dir, tmp_path,
                                                                         monkeypatch):
    """Gemma 3's sliding-window layers (a tiny one built here): a prompt shorter than the window is
    shared, and the model's sliding mask still hides what lies beyond the window (completions
    reach past it at window 12); a prompt longer than the window runs its rows whole. Both give the
    whole rows' hidden states and gradients."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig
    from tests.kit import zoo_context

    tok = zoo.build_tokenizer()
    config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=window,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=64,
                              pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                              eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Gemma3ForCausalLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    agent = HFAgent(HFAgentConfig(model=str(tmp_path)), zoo_context(task, "gemma"))
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6, temperature=1.0)).sample(agent, task.split("train")[:4], 3)
    prompt_len, width = rollout.batch.prompt_len, rollout.batch.sequences.shape[1]
    assert prompt_len < 12 < width  # window 12 holds the prompt but not whole rows; window 4 neither
    passes = []
    body = forward._body
    monkeypatch.setattr(forward, "_body", lambda *a, **k: passes.append(tuple(k["input_ids"].shape)) or body(*a, **k))
    rows = torch.tensor([0, 1, 2, 4, 5, 9])
    whole, grads = run(agent, rollout.batch, rows, share=False, checkpointing=False)
    for checkpointing in (False, True):
        passes.clear()
        shared, shared_grads = run(agent, rollout.batch, rows, share=True, checkpointing=checkpointing)
        if window == 12:  # the prompts once, then the completions on their keys and values
            assert passes == [(3, prompt_len), (6, width - prompt_len)], checkpointing
        else:  # the config says the cache would keep the window's tail alone: the rows run whole at once
            assert passes == [(6, width)], checkpointing
        assert torch.allclose(shared, whole, atol=1e-5), checkpointing
        assert shared_grads.keys() == grads.keys()
        for n, g in grads.items():
            assert torch.allclose(shared_grads[n], g, atol=1e-4, rtol=1e-4), (n, checkpointing)


def test_a_prompts_rows_add_their_gradients_as_indexing_does():
    """Handing a prompt's keys and values to its rows (``_rows_of``) gives indexing's values and,
    from the strided gradient a concatenation hands back, indexing's gradient bit for bit: every
    row's gradient added into its prompt's, none dropped or overwritten."""
    torch.manual_seed(0)
    x = torch.randn(3, 2, 5, 4, dtype=torch.float64).requires_grad_()
    index = torch.tensor([2, 0, 2, 1, 2, 0])
    upstream = torch.randn(6, 2, 9, 4, dtype=torch.float64)[:, :, 2:7]  # strided, like a cat's slice
    assert not upstream.is_contiguous()
    ours = forward._rows_of(x, index)
    (grad,) = torch.autograd.grad(ours, x, upstream)
    (expected,) = torch.autograd.grad(x[index], x, upstream)
    assert torch.equal(ours, x[index])
    assert torch.equal(grad, expected)
    assert torch.equal(grad[2], upstream[0] + upstream[2] + upstream[4])
    assert torch.equal(grad[1], upstream[3])
