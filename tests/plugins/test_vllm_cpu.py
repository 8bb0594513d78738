"""corl-vllm against a real vLLM: its CPU build (``tox -e vllm``), no GPU needed.

The fakes (test_engines.py) check the protocol; these check the engine: that a weight push reaches
what vLLM's CPU kernels read (its repacked linear layers and a tied head), that the engine then
samples with the trainer's log-probs, that a skipped push is caught for a float32 and a bf16
engine, and that a whole run trains through it. The model is ``zoo:llama-h32`` (heads of 32: the
narrowest vLLM's CPU attention runs). Where vLLM is not installed the module is skipped, except
under ``CORL_TEST_VLLM=1`` (the tox environment), where that is a failure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

import corl
from corl.builtin.policy import GRPOConfig, grpo
from corl.errors import TrainingError
from tests.kit import TINY, hf_agent, zoo_context

if not os.environ.get("CORL_TEST_VLLM"):
    pytest.importorskip("vllm", reason="vLLM is not installed (tox -e vllm installs its CPU build)")
import corl_vllm  # noqa: E402

EAGER = {"enforce_eager": True}  # no torch.compile warm-up: seconds, not a minute, per engine


@pytest.fixture(scope="module")
def task():
    from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

    return ArithmeticTask(ArithmeticConfig(seed_size=256, train_size=32, eval_size=8))


def engine_sampler(agent, task, **config):
    ctx = attrs.evolve(zoo_context(task, agent.name, 40), agent=agent)
    sampler = corl_vllm.vllm_sampler(corl_vllm.VLLMSamplerConfig(max_new_tokens=8, engine_args=EAGER, **config), ctx)
    return sampler, ctx


def old_vs_trainer(agent, rollout) -> float:
    """Largest |sampling-time - trainer| log-prob over the rollout's completion tokens."""
    with torch.no_grad():
        logp, _ = agent.token_logprobs(rollout.batch, torch.arange(rollout.batch.sequences.shape[0]))
    return float(((logp - rollout.batch.old_logprobs).abs() * rollout.batch.completion_mask).max())


def move(agent) -> None:
    """Change the trainer's weights as a step that a push must carry, by a margin no probe can miss:
    the output layer zeroed, so every token is equally likely (log-prob -log V) where the stale engine
    is sure of the tokens it sampled. A random perturbation (0.02 x N(0, 1) on every weight) was not
    always told from bf16 rounding (~0.055 allowed): a sampled token the model is sure of barely moves
    (two CI runs, vLLM's CPU build not deterministic from run to run)."""
    with torch.no_grad():
        agent.model.get_output_embeddings().weight.zero_()


def test_sample_step_sync_check_sample_through_the_cpu_engine(task, cache_dir, monkeypatch):
    agent = hf_agent("llama-h32", task, steps=40)
    sampler, ctx = engine_sampler(agent, task)
    try:
        assert sampler.engine.push_file is not None  # the CPU default: vLLM's own processes, pushes through shm
        assert sampler.floor < 1e-4  # a float32 engine scores the start weights as the float32 trainer does
        optimizer = grpo(GRPOConfig(lr=3e-3), ctx)
        prompts = task.split("train")[:4]
        rollout = sampler.sample(agent, prompts, 4)
        assert old_vs_trainer(agent, rollout) < 1e-4  # the first sample: the trainer's own log-probs
        for _ in range(2):
            before = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
            optimizer.step(rollout, [[float(s % 2) for s in range(4)] for _ in prompts])
            assert any(not torch.equal(p, before[n]) for n, p in agent.model.named_parameters())
            sampler.sync(agent)  # push (a vLLM model's load_weights alone never reaches its repacked layers)
            assert sampler.last_gap is not None and sampler.last_gap < 1e-4
            rollout = sampler.sample(agent, prompts, 4)
            # the engine now samples from the updated weights, the tied head included
            assert old_vs_trainer(agent, rollout) < 1e-4
        # a push that never arrives (TRL issue 5312's situation) is caught at the next check
        move(agent)
        monkeypatch.setattr(sampler.engine, "load_weights", lambda named: list(named))
        with pytest.raises(TrainingError, match="not sampling from the updated weights"):
            sampler.sync(agent)
    finally:
        ctx.closers.close()
    assert not sampler.engine.push_file.exists()  # the shared-memory file goes with the engine


def test_a_bf16_engine_passes_a_correct_push_and_fails_a_skipped_one(task, cache_dir, monkeypatch):
    agent = hf_agent("llama-h32", task, steps=40)
    sampler, ctx = engine_sampler(agent, task, dtype="bfloat16")
    try:
        assert sampler.dtype == "bfloat16" and sampler.floor > 0  # bf16 rounding, measured on the start weights
        optimizer = grpo(GRPOConfig(lr=3e-3), ctx)
        prompts = task.split("train")[:4]
        for _ in range(2):
            rollout = sampler.sample(agent, prompts, 4)
            optimizer.step(rollout, [[float(s % 2) for s in range(4)] for _ in prompts])
            sampler.sync(agent)  # passes: within the tolerance plus twice the bf16 floor
        sampler.sample(agent, prompts, 4)  # fresh probes
        move(agent)
        monkeypatch.setattr(sampler.engine, "load_weights", lambda named: list(named))
        with pytest.raises(TrainingError, match="not sampling from the updated weights"):
            sampler.sync(agent)
    finally:
        ctx.closers.close()


def test_the_cpu_engine_passes_the_conformance_checks(task, cache_dir):
    from corl.context import StopToken
    from corl.testing import conformance

    agent, stop = hf_agent("llama-h32", task, steps=40), StopToken()
    ctx = attrs.evolve(zoo_context(task, agent.name, 40), agent=agent, stop=stop)
    sampler = corl_vllm.vllm_sampler(corl_vllm.VLLMSamplerConfig(max_new_tokens=8, engine_args=EAGER), ctx)
    try:
        prompts = task.split("train")[:3]
        conformance.check_sampler(agent, sampler, prompts)
        conformance.check_stop(sampler, agent, prompts, stop)
    finally:
        ctx.closers.close()


def test_sleep_is_refused_on_the_cpu_at_its_key(task, cache_dir):
    agent = hf_agent("llama-h32", task, steps=40)
    with pytest.raises(corl.errors.CorlError, match=r"sampler\.sleep: sleep = true needs a GPU engine"):
        engine_sampler(agent, task, sleep=True)


def test_a_run_whose_agents_sample_through_vllm(tmp_path, cache_dir):
    sampler = {"type": "vllm", "max_new_tokens": 6, "engine_args": EAGER}
    recipe = {"run": {"name": "vllm-cpu", "threads": 2}, "topology": {"type": "ring"},
              "agents": [{"name": "a", "model": "zoo:llama-h32", "sampler": sampler},
                         {"name": "b", "model": "zoo:llama-h32", "zoo_seed": 1, "sampler": sampler}]}
    summary = corl.run(recipe, [*TINY, f"run.output_dir={tmp_path}", "run.observers=['jsonl']", "eval.size=4",
                                "eval.k=2"])
    assert set(summary["agents"]) == {"a", "b"}
    train = [x for x in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if x["kind"] == "train"]
    assert len(train) == 2 and any(x["agents"][a].get("grad_norm", 0) > 0 for x in train for a in "ab")
    assert not list(Path("/dev/shm").glob(f"corl-vllm-{os.getpid()}-*"))  # the pushes' files went with the engines


def test_the_in_process_layout_keeps_the_trainers_thread_count(task, cache_dir, tmp_path):
    """process = "same" (the GPU default) on the CPU: pushes by reference, and vLLM's worker replacing
    torch.set_num_threads in this process must not swallow run.threads (one engine per process:
    a child Python runs it)."""
    code = f"""
import attrs, torch, sys
sys.path.insert(0, {str(os.getcwd())!r})
from corl.builtin.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from tests.kit import hf_agent, zoo_context
import corl_vllm
task = ArithmeticTask(ArithmeticConfig(seed_size=256, train_size=32, eval_size=8))
agent = hf_agent("llama-h32", task, steps=40)
torch.set_num_threads(1)
ctx = attrs.evolve(zoo_context(task, "a", 40), agent=agent)
sampler = corl_vllm.vllm_sampler(corl_vllm.VLLMSamplerConfig(max_new_tokens=6, process="same",
                                 engine_args={{"enforce_eager": True}}), ctx)
rollout = sampler.sample(agent, task.split("train")[:2], 2)
with torch.no_grad():
    logp, _ = agent.token_logprobs(rollout.batch, torch.arange(4))
torch.set_num_threads(2)
print("RESULT", sampler.engine.push_file, torch.get_num_threads(),
      float(((logp - rollout.batch.old_logprobs).abs() * rollout.batch.completion_mask).max()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)})
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    assert line, out.stderr[-3000:]
    _, push_file, threads, gap = line[0].split()
    assert push_file == "None" and int(threads) == 2 and float(gap) < 1e-4
