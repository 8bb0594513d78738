"""``compile_update`` against eager, one forward and backward pass of the update (prints a table).

  python bench/compile_update.py [--models llama-add3 qwen2-add3 neox-add3] [--rows 256] [--threads 1] [--repeats 12]

For each zoo model (default: the default recipe's three): two agents with the same weights, one with
``compile_update = true``, one sampled batch (32 prompts x 8 of the addition task, <= 6 new tokens),
then the update's log-probs of ``--rows`` rows and the backward of their sum, the two agents
alternating ``--repeats`` times in this process (the first two left out). Prints the first compiled
pass's seconds (the compile, or its load from ``$CORL_CACHE_DIR/inductor``), the medians, and how far
the compiled log-probs and gradients are from eager's. The default recipe's whole step with the key:
``python bench/revisions.py HEAD --set-after 'agents[0].compile_update=true' ...`` (docs/results/performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from corl.builtin.hf.backend.agent import HFAgent
from corl.builtin.hf.backend.config import HFAgentConfig, HFSamplerConfig
from corl.builtin.hf.backend.sampler import HFSampler
from corl.builtin.tasks.addition import AdditionConfig, AdditionTask
from corl.testing import context


def update_pass(agent, batch, rows):
    agent.model.zero_grad(set_to_none=True)
    logp, _ = agent.token_logprobs(batch, rows)
    (logp * batch.completion_mask[rows]).sum().backward()
    return logp.detach(), [p.grad.clone() for p in agent.model.parameters() if p.grad is not None]


def measure(name: str, rows: int, repeats: int, task) -> dict[str, float]:
    def agent(compiled: bool):
        return HFAgent(HFAgentConfig(model=f"zoo:{name}", compile_update=compiled), context(agent_name=name, task=task))

    compiled, eager = agent(True), agent(False)
    compiled.model.load_state_dict(eager.model.state_dict())
    torch.manual_seed(0)
    batch = HFSampler(HFSamplerConfig(max_new_tokens=6)).sample(eager, task.split("train")[:32], 8).batch
    index = torch.arange(min(rows, len(batch.sequences)))
    want, want_grads = update_pass(eager, batch, index)
    start = time.perf_counter()
    got, grads = update_pass(compiled, batch, index)
    first = time.perf_counter() - start
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(repeats):
        for side, who in (("eager", eager), ("compiled", compiled)):
            start = time.perf_counter()
            update_pass(who, batch, index)
            times[side].append(time.perf_counter() - start)
    med = {side: statistics.median(t[2:]) for side, t in times.items()}
    return {"first": first, **med, "logp": float((got - want).abs().max()),
            "grad": max(float((g - w).abs().max()) for g, w in zip(grads, want_grads))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["llama-add3", "qwen2-add3", "neox-add3"])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = AdditionTask(AdditionConfig(train_size=64, eval_size=8))
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rows} rows, load average at start "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}\n")
    print("| model | first compiled pass s | eager ms | compiled ms | compiled / eager | log-probs differ by | "
          "gradients differ by |\n|---|---|---|---|---|---|---|")
    for name in args.models:
        m = measure(name, args.rows, args.repeats, task)
        print(f"| zoo:{name} | {m['first']:.1f} | {m['eager'] * 1e3:.1f} | {m['compiled'] * 1e3:.1f} | "
              f"{m['compiled'] / m['eager']:.2f}x | {m['logp']:.1e} | {m['grad']:.1e} |", flush=True)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


if __name__ == "__main__":
    main()
