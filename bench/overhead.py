"""Co-RL overhead and sampler efficiency on the embedded default (prints a table; never a test).

  python bench/overhead.py [--steps 20]

1. Step time for K = 1, 2, 3 agents against K x the single-agent step, with the time spent
   outside sampling and the policy update (voting, routing, metrics, logging) as a share.
2. Generated tokens per second of the hf sampler against the forward passes alone at the same
   batch (the same KV-cached prefill and decode steps, argmax instead of sampling, no
   bookkeeping): what the sampler adds on top of the model.
Run on an idle machine: two torch processes on 2 cores slow each other far more than 2x.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import load_recipe
from corl.runtime import Run

AGENTS = [("llama", "zoo:llama-tiny"), ("qwen2", "zoo:qwen2-tiny"), ("neox", "zoo:gpt-neox-tiny")]


def build(k: int, out: str) -> Run:
    recipe = {"run": {"steps": 0, "observers": ["jsonl"], "output_dir": out},
              "agents": [{"name": n, "model": m} for n, m in AGENTS[:k]],
              "voting": {"n_votes": 16, "n_train": 8}, "topology": {"type": "ring" if k > 1 else "self"},
              "eval": {"size": 0}}
    Path(out).mkdir(parents=True, exist_ok=True)
    pm = make_plugin_manager()
    run = Run(load_recipe(recipe, registry=registry_of(pm)), pm=pm, log=lambda m: None)
    run.setup()
    run.pm.hook.corl_on_run_start(run=run)
    return run


def step_times(run: Run, steps: int) -> tuple[float, float]:
    """Median step seconds and the median share outside sampling and updating."""
    totals, overhead = [], []
    for step in range(1, steps + 1):
        m = run.step(step)
        inner = sum(a["time/sample"] + a["time/update"] for a in m.agents.values())
        totals.append(m.seconds)
        overhead.append((m.seconds - inner) / m.seconds)
    return statistics.median(totals[2:]), statistics.median(overhead[2:])


def sampler_efficiency(run: Run, batch_prompts: int = 64, n: int = 8, new_tokens: int = 6) -> tuple[float, float]:
    slot = run.agents[0]
    prompts = run.train[:batch_prompts]
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        rollout = slot.sampler.sample(slot.agent, prompts, n)
        times.append(time.perf_counter() - t0)
    generated = sum(sum(x) for x in rollout.lengths)
    model = slot.agent.model
    enc = slot.agent.encode([p.text for p in prompts])
    ids, mask = enc["input_ids"], enc["attention_mask"]
    width = rollout.batch.completion_mask.shape[1]
    fwd = []
    with torch.no_grad():
        for _ in range(5):  # the same forward passes as the sampler (one prefill per prompt), nothing else
            t0 = time.perf_counter()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(n)
            token = out.logits[:, -1:].argmax(-1).repeat_interleave(n, 0)
            m, last = mask.repeat_interleave(n, 0), pos[:, -1:].repeat_interleave(n, 0)
            for _ in range(width - 1):
                m, last = torch.cat([m, torch.ones_like(token)], 1), last + 1
                out = model(input_ids=token, attention_mask=m, position_ids=last, cache=cache, use_cache=True)
                cache, token = out.cache, out.logits[:, -1:].argmax(-1)
            fwd.append(time.perf_counter() - t0)
    return generated / statistics.median(times), generated / statistics.median(fwd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from corl.plugins import corl_version

    print(f"corl {corl_version()}; torch {torch.__version__}; {torch.get_num_threads()} threads; "
          "32 prompts x 16 votes (8 trained) per agent and step")
    rows, single = [], None
    with tempfile.TemporaryDirectory() as out:
        for k in (1, 2, 3):
            run = build(k, f"{out}/k{k}")
            seconds, overhead = step_times(run, args.steps)
            single = single or seconds
            rows.append((k, seconds, seconds / (k * single), overhead))
            if k == 1:
                sampled, limit = sampler_efficiency(run)
    print("\n| agents | step s (median) | vs K x single | outside sample+update |")
    print("|---|---|---|---|")
    for k, seconds, ratio, overhead in rows:
        print(f"| {k} | {seconds:.3f} | {ratio:.2f} | {overhead:.1%} |")
    print(f"\nhf sampler: {sampled:,.0f} generated tokens/s; KV-cached forward passes alone: {limit:,.0f} tokens/s "
          f"(the sampler reaches {sampled / limit:.0%} of that)")


if __name__ == "__main__":
    main()
