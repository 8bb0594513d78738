"""The three-agent ring in one process against one process per agent, on this machine (prints a table).

  python bench/processes.py [--steps 10]

Variants of `corl run recipes/three_agent_ring.toml` (eval off, no checkpoints), each timed from
its own metrics.jsonl (median step seconds after 2 warm-up steps, so start-up and zoo loading are
left out):
  * one process with 2 torch threads, and with 1 thread;
  * torchrun with 3 ranks (one agent each, gloo, 1 thread each);
  * torchrun with 2 ranks (llama and qwen2 on rank 0, neox on rank 1, by agents[i].ranks), 1 thread each.
On 2 cores, 3 ranks oversubscribe by one process; the table says what that costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = "recipes/three_agent_ring.toml"


def corl_cmd(nproc: int) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "corl.cli", "run", RECIPE]
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    return [torchrun, "--standalone", f"--nproc-per-node={nproc}", "-m", "corl.cli", "run", RECIPE]


def timed(nproc: int, threads: int, steps: int, out: str, extra: list[str] = ()) -> tuple[float, float]:
    sets = [f"run.steps={steps}", "eval.size=0", f"run.output_dir={out}", "run.checkpoint_every=0",
            f"run.threads={threads}", "run.observers=['jsonl']", *extra]
    cmd = corl_cmd(nproc) + [x for s in sets for x in ("--set", s)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench/processes.py: {' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    seconds = [r["seconds"] for r in rows if r.get("kind") == "train"]
    return statistics.median(seconds[2:]), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    variants = [("one process, 2 threads", 1, 2, []), ("one process, 1 thread", 1, 1, []),
                ("torchrun, 3 ranks (one agent each), 1 thread each", 3, 1, []),
                ("torchrun, 2 ranks (llama + qwen2 | neox), 1 thread each", 2, 1,
                 ["agents[0].ranks=[0]", "agents[1].ranks=[0]", "agents[2].ranks=[1]"])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, nproc, threads, extra) in enumerate(variants):
            rows.append((label, *timed(nproc, threads, args.steps, f"{tmp}/v{i}", extra)))
    base = rows[0][1]
    print(f"`corl run {RECIPE}`, {args.steps} steps, eval off; step = median seconds after 2 warm-up steps\n")
    print("| layout | s/step | vs one process, 2 threads | whole command s |")
    print("|---|---|---|---|")
    for label, step, wall in rows:
        print(f"| {label} | {step:.3f} | {base / step:.2f}x | {wall:.1f} |")


if __name__ == "__main__":
    main()
