"""vLLM's CPU build against corl's `hf` sampler, side by side in one process: tokens per second on the
same batch, and whole Co-RL steps (sample, GRPO update, weight sync), alternating A B A B.

    python bench/vllm_cpu.py [--model FOLDER] [--prompts 32] [--n 8] [--tokens 48] [--rounds 3]
                             [--threads 2] [--steps 2] [--layout child|same]

Needs vLLM's CPU build (`tox -e vllm` builds such an environment; or, from a checkout,
`pip install . './plugins/corl-vllm[cpu]'`).
The model defaults to SmolLM2-135M-Instruct (`pypi:smollm2-135m-instruct`, converted once by corl).
Both samplers draw ``--n`` completions of up to ``--tokens`` tokens for ``--prompts`` prompts at
temperature 1; tokens per second counts the completion tokens each actually produced. ``--layout``:
the vLLM engine in its own processes (`child`, the CPU default) or in this one (`same`). The hf sampler
runs in float32 and in bf16 autocast where this CPU has native bf16 (AMX / AVX512-BF16); the engine
in float32. Prints the load with every figure: compare ratios, not absolute times, on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pypi:smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=2, help="whole Co-RL steps per sampler per round (0: none)")
    ap.add_argument("--layout", choices=["child", "same"], default="child")
    args = ap.parse_args()

    import attrs
    import torch

    torch.set_num_threads(args.threads)
    import corl_vllm

    from corl.builtin.hf.backend.agent import HFAgent
    from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig, matmul_dtype
    from corl.builtin.hf.backend.sampler import HFSampler
    from corl.builtin.policy import GRPOConfig, grpo
    from corl.builtin.tasks.word_problems import WordProblemsConfig, WordProblemsTask
    from corl.testing import context

    task = WordProblemsTask(WordProblemsConfig(train_size=args.prompts, eval_size=8))
    prompts = list(task.split("train"))[: args.prompts]
    dtypes = ["float32"] + (["bfloat16"] if matmul_dtype("auto", "cpu") == "bfloat16" else [])
    ctx = context(agent_name="bench", task=task)
    agent = HFAgent(HFAgentConfig(model=args.model, prompt_format="chat"), ctx)
    ctx = attrs.evolve(ctx, agent=agent)
    hf = {d: HFSampler(HFSamplerConfig(max_new_tokens=args.tokens, batch_size=args.prompts * args.n), ctx)
          for d in dtypes}
    t0 = time.perf_counter()
    engine = corl_vllm.vllm_sampler(corl_vllm.VLLMSamplerConfig(
        max_new_tokens=args.tokens, process=args.layout, check_sync=True,
        engine_args={"max_model_len": 2048}), ctx)
    print(f"vLLM engine ({args.layout} process) built in {time.perf_counter() - t0:.0f} s ({load()}); "
          f"sync-check floor {engine.floor:.2e}")
    samplers = {**{f"hf {d}": s for d, s in hf.items()}, f"vllm {args.layout}": engine}

    def sample(name, sampler):
        if name.startswith("hf"):
            agent.config = attrs.evolve(agent.config, sample_dtype=name.split()[1])
        t = time.perf_counter()
        rollout = sampler.sample(agent, prompts, args.n)
        seconds = time.perf_counter() - t
        return rollout, sum(sum(row) for row in rollout.lengths) / seconds

    speeds: dict[str, list[float]] = {name: [] for name in samplers}
    try:
        sample(f"vllm {args.layout}", engine)  # the engine's first batch warms it up
        for r in range(args.rounds):
            for name, sampler in samplers.items():
                _, tps = sample(name, sampler)
                speeds[name].append(tps)
                print(f"round {r}: {name:<14} {tps:7.1f} tokens/s ({load()})", flush=True)
        print("\ntokens/s, median of the rounds, and against hf float32 (pairwise, same round):")
        base = speeds["hf float32"]
        for name, xs in speeds.items():
            ratio = statistics.median(x / b for x, b in zip(xs, base))
            print(f"  {name:<14} {statistics.median(xs):7.1f}   x{ratio:.2f}")
        if not args.steps:
            return
        print(f"\nwhole Co-RL steps (sample {args.prompts} x {args.n}, GRPO update at lr 1e-6, sync):")
        optimizer = grpo(GRPOConfig(lr=1e-6, micro_batch_size=16), ctx)
        times: dict[str, list[float]] = {"hf float32": [], f"vllm {args.layout}": []}
        for r in range(args.steps):
            for name in times:
                t = time.perf_counter()
                rollout, _ = sample(name, samplers[name])
                rewards = [[float(i % 2) for i in range(args.n)] for _ in prompts]
                optimizer.step(rollout, rewards)
                samplers[name].sync(agent)
                times[name].append(time.perf_counter() - t)
                print(f"step {r}: {name:<14} {times[name][-1]:6.1f} s ({load()})", flush=True)
        ratio = statistics.median(v / h for v, h in zip(times[f"vllm {args.layout}"], times["hf float32"]))
        print(f"  step time vllm / hf: x{ratio:.2f}")
    finally:
        ctx.closers.close()


if __name__ == "__main__":
    main()
