"""The real engines, where they and a GPU are present (skipped otherwise, as in CI).

A model folder comes from CORL_ENGINE_MODEL (any small causal LM the engine supports, e.g. a
local Qwen2.5-0.5B-Instruct), else the zoo's tiny Llama with heads of 32. Each test runs in its own
process (one in-process vLLM engine per process): `pytest tests/plugins/test_engines_gpu.py -k vllm`;
`python bench/gpu_check.py --engines` runs it per engine and prints its figures. Not yet run: no GPU
has been lent with an engine installed.
"""

import importlib.util
import os

import pytest
import torch

from corl.context import Context

KINDS = [k for k in ("vllm", "sglang") if importlib.util.find_spec(k) is not None]
pytestmark = pytest.mark.skipif(not (KINDS and torch.cuda.is_available()), reason="needs vLLM or SGLang and a GPU")


def make_agent(task, folder):
    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig
    from tests.kit import zoo_context

    model = folder or "zoo:llama-h32"
    return HFAgent(HFAgentConfig(model=model, device="cuda", dtype="bfloat16" if folder else "float32"),
                   zoo_context(task, "gpu"))


@pytest.mark.parametrize("kind", KINDS)
def test_sample_step_sync_sleep_on_the_real_engine(kind, cache_dir):
    from corl.builtin.policy import GRPOConfig, grpo
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
    from corl.errors import TrainingError

    module = importlib.import_module(f"corl_{kind}")
    task = ArithmeticTask(ArithmeticConfig(seed_size=64, train_size=32, eval_size=8))
    agent = make_agent(task, os.environ.get("CORL_ENGINE_MODEL"))
    ctx = Context(spec=None, seed=0, agent=agent, agent_name="gpu")
    config_cls = module.VLLMSamplerConfig if kind == "vllm" else module.EngineSamplerConfig
    sampler = getattr(module, f"{kind}_sampler")(config_cls(max_new_tokens=16, memory=0.3), ctx)
    optimizer = grpo(GRPOConfig(lr=1e-3), ctx)
    prompts = task.split("train")[:8]
    rollout = sampler.sample(agent, prompts, 4)
    with torch.no_grad():  # the engine's sampling-time log-probs against the trainer's
        logp, _ = agent.token_logprobs(rollout.batch, torch.arange(32))
    gap = ((logp - rollout.batch.old_logprobs).abs() * rollout.batch.completion_mask).max()
    print(f"RESULT {kind}: max |trainer - engine| sampling log-prob {float(gap):.4f}, floor {sampler.floor:.4f}")
    assert gap < 0.1
    for _ in range(2):  # step, push (after the engine slept), check, sample again
        optimizer.step(rollout, [[float(i % 2) for i in range(4)] for _ in prompts])
        sampler.sync(agent)
        print(f"RESULT {kind}: probe gap after sync {sampler.last_gap:.4f}")
        rollout = sampler.sample(agent, prompts, 4)
    # TRL issue 5312's situation: the engine woken from sleep without a push, while the trainer moved on
    with torch.no_grad():
        agent.model.get_input_embeddings().weight.mul_(-1.0)
    sampler.engine.wake()
    sampler.asleep = False
    with pytest.raises(TrainingError, match="not sampling from the updated weights"):
        sampler.check(agent)
