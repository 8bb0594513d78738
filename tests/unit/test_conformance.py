"""corl.testing.conformance: the checks pass on corl's own components (the kit's fake agent, the
hf backend, the built-in optimizers) and fail, in one sentence, on components that break the
contract. The engine plugins pass them in tests/plugins/test_engines.py and test_vllm_cpu.py."""

import attrs
import pytest

from corl.builtin.policy import GRPOConfig, PolicyConfig, grpo, rloo
from corl.context import StopToken
from corl.testing import (
    FakeAgent,
    FakeAgentConfig,
    FakeOptimizer,
    FakeOptimizerConfig,
    FakeSampler,
    conformance,
    context,
)
from corl.types import Prompt

PROMPTS = [Prompt(f"p{i}", f"{i}+{i}=", 2 * i) for i in range(4)]


def fake(stop=None):
    ctx = context(agent_name="f", stop=stop)
    agent = FakeAgent(FakeAgentConfig(accuracy=0.4), ctx)
    return agent, FakeSampler(None, attrs.evolve(ctx, agent=agent))


def test_the_fake_agent_and_sampler_conform(tmp_path):
    agent, sampler = fake()
    conformance.check_sampler(agent, sampler, PROMPTS)
    conformance.check_agent_state(agent, tmp_path / "state")
    stop = StopToken()
    agent, sampler = fake(stop)
    conformance.check_stop(sampler, agent, PROMPTS, stop)


@pytest.mark.parametrize("make", [lambda ctx: grpo(GRPOConfig(lr=0.1), ctx), lambda ctx: rloo(PolicyConfig(lr=0.1), ctx),
                                  lambda ctx: grpo(GRPOConfig(lr=0.1, kl=0.1, minibatches=2), ctx),
                                  lambda ctx: FakeOptimizer(FakeOptimizerConfig(), ctx)],
                         ids=["grpo", "rloo", "grpo-kl-minibatches", "fake"])
def test_the_optimizers_conform_on_the_trainable_fake_agent(make, tmp_path):
    conformance.check_optimizer(make, tmp_path)


def test_the_hf_backend_conforms(tmp_path, cache_dir):
    from corl.builtin.hf.backend.config import HFSamplerConfig
    from corl.builtin.hf.backend.sampler import HFSampler
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
    from tests.kit import hf_agent, zoo_context

    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=16, eval_size=4))
    prompts = task.split("train")[:3]
    stop = StopToken()
    agent = hf_agent("llama-tiny", task)
    sampler = HFSampler(HFSamplerConfig(max_new_tokens=6), attrs.evolve(zoo_context(task, "llama-tiny"), agent=agent,
                                                                       stop=stop))
    conformance.check_sampler(agent, sampler, prompts)
    conformance.check_agent_state(agent, tmp_path / "state")
    conformance.check_stop(sampler, agent, prompts, stop)
    conformance.check_optimizer(lambda ctx: grpo(GRPOConfig(lr=1e-3), ctx), tmp_path / "opt",
                                make_agent=lambda ctx: hf_agent("llama-tiny", task),
                                make_sampler=lambda ctx: HFSampler(HFSamplerConfig(max_new_tokens=6)), prompts=prompts)


class OffTemperature(FakeSampler):
    """Keeps sampling-time log-probs at temperature 1 while drawing at 2: the first ratio is not 1."""

    def sample(self, agent, prompts, n, *, greedy=False, temperature=None):
        rollout = super().sample(agent, prompts, n, temperature=2.0)
        return attrs.evolve(rollout, batch=attrs.evolve(rollout.batch, temperature=1.0))


class Forgetful(FakeOptimizer):
    """Keeps a step count that changes its steps, but saves none of it."""

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.steps = 0

    def step(self, rollout, rewards):
        self.steps += 1
        self.lr = 5.0 / self.steps
        return super().step(rollout, rewards)


class Backwards(FakeOptimizer):
    def step(self, rollout, rewards):
        return super().step(rollout, [[1.0 - r for r in row] for row in rewards])


def test_the_checks_fail_in_one_sentence_on_what_breaks_the_contract(tmp_path):
    agent, _ = fake()
    with pytest.raises(AssertionError, match="nats away from its sampling-time log-prob"):
        conformance.check_sampler(agent, OffTemperature(None, context()), PROMPTS)
    with pytest.raises(AssertionError, match="differs after a save / load resume"):
        conformance.check_optimizer(lambda ctx: Forgetful(FakeOptimizerConfig(), ctx), tmp_path / "a")
    with pytest.raises(AssertionError, match="the update goes the wrong way"):
        conformance.check_optimizer(lambda ctx: Backwards(FakeOptimizerConfig(), ctx), tmp_path / "b")

    class Deaf(FakeSampler):
        def __init__(self, config=None, ctx=None):
            super().__init__(config, None)  # never keeps the run's stop token

    stop = StopToken()
    with pytest.raises(AssertionError, match="never called ctx.stop.check"):
        conformance.check_stop(Deaf(None, context(stop=stop)), agent, PROMPTS, stop)


def test_the_hf_batch_says_which_rows_were_cut_off_and_at_what_cap(cache_dir):
    """An optimizer's overlong filter reads both: the sampler's max_new_tokens and, per row, whether
    it ended (an EOS) or was cut off there."""
    import torch

    from corl.builtin.hf.backend.config import HFSamplerConfig
    from corl.builtin.hf.backend.sampler import HFSampler
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
    from tests.kit import hf_agent, zoo_context

    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=16, eval_size=4))
    prompts = task.split("train")[:3]
    agent = hf_agent("llama-tiny", task)
    for cap in (1, 12):
        sampler = HFSampler(HFSamplerConfig(max_new_tokens=cap), attrs.evolve(zoo_context(task, "llama-tiny"),
                                                                              agent=agent))
        batch = conformance.check_sampler(agent, sampler, prompts).batch
        lengths = batch.completion_mask.sum(1)
        last = batch.completion_ids.gather(1, (lengths - 1)[:, None])[:, 0]
        ended = last == agent.tokenizer.eos_token_id
        assert batch.max_new_tokens == cap
        assert torch.equal(batch.truncated, (lengths == cap) & ~ended)
        if cap == 1:  # one token holds an answer or its EOS, rarely both
            assert bool(batch.truncated.any())


def test_the_fake_agent_writes_multi_token_completions_of_several_lengths():
    """What check_optimizer now feeds an optimizer by default: padded rows of 1 to 3 tokens."""
    from corl.testing import FakeAgent, FakeAgentConfig, FakeSampler, context

    agent = FakeAgent(FakeAgentConfig(tokens=3), context())
    prompts = [Prompt(f"p{i}", f"{i}+{i}=", 2 * i) for i in range(4)]
    batch = conformance.check_sampler(agent, FakeSampler(None, context()), prompts, n=8).batch
    lengths = batch.completion_mask.sum(1)
    assert batch.completion_ids.shape == (32, 3) and set(lengths.tolist()) == {1, 2, 3}
    assert batch.max_new_tokens == 3 and not batch.truncated.any()
