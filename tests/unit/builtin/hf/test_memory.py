"""The hf agent's memory paths: chunked log-probs, gradient checkpointing and per-phase autocast
give the same log-probs and gradients as the plain full-logits computation."""

import attrs
import pytest
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from tests.kit import zoo_context


@pytest.fixture(scope="module")
def setup(cache_dir):
    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=16, eval_size=0))
    ctx = zoo_context(task)
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny"), ctx)
    torch.manual_seed(0)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, task.split("train")[:6], 2)
    return ctx, rollout.batch


def _full(agent, batch, rows):
    """The reference: whole-vocabulary logits for the whole batch at once."""
    mask = batch.attention_mask[rows]
    logits = agent.model(input_ids=batch.sequences[rows], attention_mask=mask,
                         position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    logp = (logits[:, batch.prompt_len - 1: -1].float() / batch.temperature).log_softmax(-1)
    return logp.gather(-1, batch.sequences[rows, batch.prompt_len:].unsqueeze(-1)).squeeze(-1)


def _grads(agent, logp, batch):
    agent.model.zero_grad(set_to_none=True)
    (logp * batch.completion_mask).sum().backward()
    return {k: p.grad.clone() for k, p in agent.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk, checkpointing, chunked", [(7, False, True), (1, True, True), (10_000, True, True),
                                                        (1, False, False), (1, True, False)])
def test_chunked_and_checkpointed_logprobs_match_the_full_computation(setup, monkeypatch, chunk, checkpointing,
                                                                      chunked):
    import corl.builtin.hf.backend.agent as agent_module

    ctx, batch = setup  # (the tiny model's vocabulary is narrower than its width: chunks are asked for here)
    monkeypatch.setattr(agent_module, "logits_outweigh_hidden", lambda model, hidden: chunked)
    rows = torch.arange(len(batch.sequences))
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", logprob_chunk_tokens=chunk,
                                  gradient_checkpointing=checkpointing), ctx)
    reference = _full(agent, batch, rows)
    want = _grads(agent, reference, batch)
    logp, _ = agent.token_logprobs(batch, rows)
    assert torch.allclose(logp, reference, atol=1e-5)
    got = _grads(agent, logp, batch)
    assert want.keys() == got.keys() and all(torch.allclose(want[k], got[k], atol=1e-5) for k in want)
    assert not agent.model.training  # back in eval mode after a checkpointed forward


def test_log_probs_go_in_chunks_only_when_the_vocabulary_is_wider_than_the_hidden_states():
    from corl.builtin.hf.backend.agent import logits_outweigh_hidden

    class LM(torch.nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.head = torch.nn.Linear(64, vocab, bias=False)

        def get_output_embeddings(self):
            return self.head

    hidden = torch.zeros(4, 3, 64)
    assert logits_outweigh_hidden(LM(65), hidden) and not logits_outweigh_hidden(LM(64), hidden)
    assert not logits_outweigh_hidden(LM(19), hidden)


def test_a_narrow_vocabulary_goes_in_one_piece_without_recompute(setup, monkeypatch):
    import corl.builtin.hf.backend.agent as agent_module

    ctx, batch = setup
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", logprob_chunk_tokens=1), ctx)  # 1 token a chunk, if chunked
    calls, recomputed = [], []
    real = agent_module._chunk_logprobs
    monkeypatch.setattr(agent_module, "_chunk_logprobs", lambda *a: calls.append(a[1].shape) or real(*a))
    monkeypatch.setattr("torch.utils.checkpoint.checkpoint", lambda *a, **k: recomputed.append(1))
    logp, _ = agent.token_logprobs(batch, torch.arange(len(batch.sequences)))
    assert calls == [batch.completion_mask.shape + (agent.model.config.hidden_size,)] and not recomputed
    assert logp.shape == batch.completion_mask.shape


def test_bf16_phases_keep_float32_weights_and_close_logprobs(setup):
    ctx, batch = setup
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", sample_dtype="bfloat16", train_dtype="bfloat16"), ctx)
    logp, _ = agent.token_logprobs(batch, torch.arange(len(batch.sequences)))
    assert logp.dtype == torch.float32 and next(agent.model.parameters()).dtype == torch.float32
    assert (logp - _full(agent, batch, torch.arange(len(batch.sequences)))).abs().max() < 0.1


def test_frozen_embeddings_get_no_optimizer_state_and_stay_put(setup):
    from corl.builtin.policy import GRPOConfig, grpo

    ctx, batch = setup
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", freeze_embeddings=True), ctx)
    torch.manual_seed(0)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, ctx.task.split("train")[:2], 4)
    optimizer = grpo(GRPOConfig(lr=1e-2), attrs.evolve(ctx, agent=agent))
    embed = agent.model.get_input_embeddings().weight
    assert all(p is not embed for p in optimizer.params)
    before = {k: p.detach().clone() for k, p in agent.model.named_parameters()}
    assert optimizer.step(rollout, [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])["grad_norm"] > 0
    after = dict(agent.model.named_parameters())
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and not any("embed" in k for k in changed)


def test_frozen_embeddings_are_stored_in_bf16_when_every_phase_is_bf16(setup, tmp_path):
    from corl.builtin.policy import GRPOConfig, grpo

    ctx, _ = setup
    config = HFAgentConfig(model="zoo:llama-tiny", freeze_embeddings=True, sample_dtype="bfloat16",
                           train_dtype="bfloat16", gradient_checkpointing=True)
    agent = HFAgent(config, ctx)
    embed = agent.model.get_input_embeddings().weight
    assert embed.dtype == torch.bfloat16 and not embed.requires_grad
    assert {p.dtype for p in agent.model.parameters() if p.requires_grad} == {torch.float32}
    # the residual stream stays float32: the looked-up embeddings are cast back
    assert agent.model.get_input_embeddings()(torch.tensor([[1, 2]])).dtype == torch.float32
    torch.manual_seed(0)
    rollout = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, ctx.task.split("train")[:2], 4)
    batch, rows = rollout.batch, torch.arange(8)
    logp, _ = agent.token_logprobs(batch, rows)  # the update sees what the sampler saw
    sampled = batch.old_logprobs[rows] * batch.completion_mask[rows]
    assert (logp * batch.completion_mask[rows] - sampled).abs().max() < 0.05
    optimizer = grpo(GRPOConfig(lr=1e-2), attrs.evolve(ctx, agent=agent))
    assert optimizer.step(rollout, [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])["grad_norm"] > 0
    assert agent.model.get_input_embeddings().weight.dtype == torch.bfloat16
    agent.save_state(tmp_path / "state")
    again = HFAgent(config, ctx)
    again.load_state(tmp_path / "state")
    for (name, a), (_, b) in zip(agent.model.named_parameters(), again.model.named_parameters()):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    # without bf16 phases the frozen matrix keeps the weights' dtype
    plain = HFAgent(HFAgentConfig(model="zoo:llama-tiny", freeze_embeddings=True), ctx)
    assert plain.model.get_input_embeddings().weight.dtype == torch.float32


def test_the_recompute_choice_follows_the_memory_estimate():
    from types import SimpleNamespace

    from corl.builtin.hf.backend import recompute

    smollm2 = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_hidden_layers=30)
    small = recompute.activation_bytes(smollm2, 8, 90)
    # by hand: 30 layers x 720 tokens x (10 x 576 + 4 x 1536 + 9 x 90) floats of 4 bytes
    assert small == 4 * 30 * 8 * 90 * (5760 + 6144 + 810)
    assert recompute.activation_bytes(smollm2, 16, 90) == 2 * small  # linear in rows
    assert recompute.activation_bytes(smollm2, 8, 180) > 2 * small  # superlinear in tokens (attention rows)
    assert not recompute.needed(small, 4 * 2**30) and recompute.needed(small, 2 * small - 1)
    assert recompute.needed(recompute.activation_bytes(smollm2, 256, 4096), 64 * 2**30)  # long rows: recompute
    assert recompute.available_bytes(torch.device("cpu")) > 0


@pytest.mark.parametrize("available, recomputed", [(2**40, False), (1, True)])
def test_auto_checkpointing_chooses_from_memory_logs_once_and_keeps_the_gradients(setup, monkeypatch, available,
                                                                                  recomputed):
    from corl.builtin.hf.backend import recompute

    ctx, batch = setup
    lines = []
    monkeypatch.setattr(recompute, "available_bytes", lambda device: available)
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny", gradient_checkpointing="auto"),
                    attrs.evolve(ctx, log=lines.append))
    rows = torch.arange(len(batch.sequences))
    want = _grads(agent, _full(agent, batch, rows), batch)
    mlp, calls = agent.model.model.layers[0].mlp, []
    forward = mlp.forward
    monkeypatch.setattr(mlp, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))  # (hooks miss recomputes)
    for _ in range(2):
        logp, _ = agent.token_logprobs(batch, rows)
        got = _grads(agent, logp, batch)
        assert want.keys() == got.keys() and all(torch.allclose(want[k], got[k], atol=1e-5) for k in want)
    # the first layer's MLP ran once per pass (prompt, completions), and the completions' again in backward
    # when recomputed (the prompt pass is never checkpointed: forward.py)
    assert len(calls) == 2 * (3 if recomputed else 2)
    assert len(lines) == 1 and f"gradient checkpointing {'on' if recomputed else 'off'} (auto)" in lines[0]
    assert "rows x" in lines[0] and "GiB available" in lines[0]
    with torch.no_grad():
        agent.token_logprobs(batch, rows)  # no gradient: nothing to recompute, nothing logged
    assert len(lines) == 1


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunk_logprobs_skip_the_division_by_a_temperature_of_one_and_equal_the_formula(setup, temperature):
    from torch.profiler import profile

    from corl.builtin.hf.backend.agent import _chunk_logprobs

    ctx, _ = setup
    agent = HFAgent(HFAgentConfig(model="zoo:llama-tiny"), ctx)
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, agent.model.config.hidden_size, requires_grad=True)
    target = torch.randint(0, agent.model.config.vocab_size, (3, 5))
    with profile() as prof:
        logp, entropy = _chunk_logprobs(agent.model, hidden, target, temperature)
    divisions = [e for e in prof.events() if e.name == "aten::div"]
    assert len(divisions) == (0 if temperature == 1 else 1)
    want_all = (agent.model.get_output_embeddings()(hidden).float() / temperature).log_softmax(-1)
    want = want_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(logp, want)  # bit for bit: x / 1 is x
    assert torch.equal(entropy, -(want_all.exp() * want_all).sum(-1).detach())
    got_grad, = torch.autograd.grad(logp.sum(), hidden)
    want_grad, = torch.autograd.grad(want.sum(), hidden)
    assert torch.equal(got_grad, want_grad)
