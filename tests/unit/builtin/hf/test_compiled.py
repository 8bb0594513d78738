"""``compile_update``: the update's pass with gradients runs through ``torch.compile``'s body (and
nothing else does), inductor's cache goes into corl's cache folder, a compiler failure is said once
and the update runs eager; the slow test compiles for real and compares with eager."""

import pytest
import torch
from torch._dynamo.exc import TorchDynamoException

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.hf.models.config import ZooConfig
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from corl.testing import context


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))


def agent_for(task, logs, **changes):
    ctx = context(agent_name="a", task=task, sections={"zoo": ZooConfig(steps=5)}, log=logs.append)
    return HFAgent(HFAgentConfig(model="zoo:llama-tiny", **changes), ctx)


class FakeCompile:
    """``torch.compile`` that records what it wraps and every call of the wrapper (with the grad mode),
    running the module itself, or raising ``error``."""

    def __init__(self, error=None):
        self.compiled, self.calls, self.error = [], [], error

    def __call__(self, module, **options):
        self.compiled.append((module, options))

        def wrapper(**inputs):
            self.calls.append(torch.is_grad_enabled())
            if self.error is not None:
                raise self.error
            return module(**inputs)

        return wrapper


def update_pass(agent, batch, rows):
    agent.model.zero_grad(set_to_none=True)
    logp, _ = agent.token_logprobs(batch, rows)
    (logp * batch.completion_mask[rows]).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in agent.model.named_parameters() if p.grad is not None}


def rollout_of(agent, task):
    torch.manual_seed(0)
    return HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(agent, task.split("train")[:4], 3)


def test_only_the_updates_pass_with_gradients_runs_the_compiled_body(task, cache_dir, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    fake, logs = FakeCompile(), []
    monkeypatch.setattr(torch, "compile", fake)
    agent, eager = agent_for(task, logs, compile_update=True), agent_for(task, [])
    rollout = rollout_of(agent, task)
    assert fake.compiled == [] and fake.calls == []  # sampling stays eager, and nothing compiles before the update
    rows = torch.tensor([0, 1, 2, 4, 5, 9])
    logp, grads = update_pass(agent, rollout.batch, rows)
    [(body, options)] = fake.compiled
    assert body is agent.model.get_decoder() and options == {"dynamic": True}
    assert fake.calls == [True, True]  # the shared prompts' pass, then the completions'
    want, want_grads = update_pass(eager, rollout.batch, rows)
    assert torch.equal(logp, want) and grads.keys() == want_grads.keys()
    assert all(torch.equal(grads[n], g) for n, g in want_grads.items())
    with torch.no_grad():
        agent.token_logprobs(rollout.batch, rows)
    agent.freeze_reference()
    agent.token_logprobs(rollout.batch, rows, reference=True)
    update_pass(agent, rollout.batch, rows)
    assert fake.calls == [True] * 4 and len(fake.compiled) == 1  # compiled once, reused
    # a call over one row or one distinct prompt runs eager (a size of 1 would compile again)
    for one, compiled_calls in ((torch.tensor([4]), 0), (torch.tensor([0, 1, 2]), 1)):  # (rows 0-2: one prompt)
        fake.calls.clear()
        logp, grads = update_pass(agent, rollout.batch, one)
        want, want_grads = update_pass(eager, rollout.batch, one)
        assert fake.calls == [True] * compiled_calls
        assert torch.equal(logp, want) and all(torch.equal(grads[n], g) for n, g in want_grads.items())
    folder = str(cache_dir / "inductor")
    assert [line for line in logs if "compile_update" in line] == [
        f"agent 'a': compile_update: the update's body is compiled on its first pass, or loaded from inductor's "
        f"cache in {folder}"]
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == folder


def test_a_cache_folder_of_the_users_own_is_kept(task, cache_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch, "compile", FakeCompile())
    logs = []
    agent = agent_for(task, logs, compile_update=True)
    update_pass(agent, rollout_of(agent, task).batch, torch.arange(4))
    assert any(line.endswith(f"cache in {tmp_path}") for line in logs), logs


def test_a_recomputed_pass_stays_eager(task, cache_dir, monkeypatch):
    fake = FakeCompile()
    monkeypatch.setattr(torch, "compile", fake)
    agent = agent_for(task, [], compile_update=True, gradient_checkpointing=True)
    update_pass(agent, rollout_of(agent, task).batch, torch.arange(4))
    assert fake.calls == []


def test_a_sharded_model_stays_eager_and_says_so(task, cache_dir, monkeypatch):
    fake, logs = FakeCompile(), []
    monkeypatch.setattr(torch, "compile", fake)
    agent = agent_for(task, logs, compile_update=True, shard="fsdp")
    update_pass(agent, rollout_of(agent, task).batch, torch.arange(4))
    assert fake.compiled == [] and fake.calls == []
    assert "agent 'a': compile_update: a sharded model's update runs eager" in logs


def test_a_compiler_failure_is_said_once_and_the_update_runs_eager(task, cache_dir, monkeypatch):
    fake, logs = FakeCompile(error=TorchDynamoException("InvalidCxxCompiler: no working C++ compiler found\nmore")), []
    monkeypatch.setattr(torch, "compile", fake)
    agent, eager = agent_for(task, logs, compile_update=True), agent_for(task, [])
    rollout = rollout_of(agent, task)
    rows = torch.arange(6)
    for _ in range(2):
        logp, grads = update_pass(agent, rollout.batch, rows)
        want, want_grads = update_pass(eager, rollout.batch, rows)
        assert torch.equal(logp, want) and all(torch.equal(grads[n], g) for n, g in want_grads.items())
    assert fake.calls == [True]  # tried once
    failures = [line for line in logs if "failed" in line]
    assert failures == ["agent 'a': compile_update: torch.compile failed (TorchDynamoException: InvalidCxxCompiler: "
                        "no working C++ compiler found); the update runs eager"]


def test_an_error_of_the_model_itself_is_not_hidden(task, cache_dir, monkeypatch):
    monkeypatch.setattr(torch, "compile", FakeCompile(error=ValueError("a shape the model rejects")))
    agent = agent_for(task, [], compile_update=True)
    with pytest.raises(ValueError, match="a shape the model rejects"):
        update_pass(agent, rollout_of(agent, task).batch, torch.arange(4))


@pytest.mark.slow
def test_the_compiled_update_matches_eager_within_float_order(task, cache_dir):
    """A real inductor compile (a minute or so on a CPU core): log-probs and gradients as eager's up
    to the float order of fused kernels, for two row counts without a second compile."""
    logs = []
    agent, eager = agent_for(task, logs, compile_update=True), agent_for(task, [])
    rollout = rollout_of(agent, task)
    for rows in (torch.arange(12), torch.tensor([0, 3, 4, 7, 8])):
        logp, grads = update_pass(agent, rollout.batch, rows)
        want, want_grads = update_pass(eager, rollout.batch, rows)
        assert (logp - want).abs().max() < 1e-4
        for n, g in want_grads.items():
            assert torch.allclose(grads[n], g, atol=1e-4, rtol=1e-3), n
    assert not any("failed" in line for line in logs), logs
