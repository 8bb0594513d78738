"""Peak memory (RSS) of `corl run` by configuration (prints a table; never a test).

  python bench/memory.py [--steps 4]

Each variant is a fresh `corl run` of the default recipe (recipes/three_agent_ring.toml) in its own
process with small overrides; its peak RSS is the kernel's ru_maxrss of that process (os.wait4),
so nothing of one variant stays in the next. The zoo models must already be cached (run the
default recipe once).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

RECIPE = "recipes/three_agent_ring.toml"
VARIANTS = {
    "three agents (default: no KL, no reference model)": [],
    "three agents, KL 0.05 (a frozen reference per agent)": [f"agents[{i}].optimizer.kl=0.05" for i in range(3)],
    "three agents, micro_batch_size 32": [f"agents[{i}].optimizer.micro_batch_size=32" for i in range(3)],
    "one agent (llama, self-reward)": ["topology.type=self"],
}


def peak_rss(overrides: list[str], steps: int, out: str) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one run."""
    sets = [f"run.steps={steps}", "eval.size=0", f"run.output_dir={out}", "run.checkpoint_every=0", *overrides]
    cmd = [sys.executable, "-m", "corl.cli", "run", RECIPE] + [x for s in sets for x in ("--set", s)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench/memory.py: {' '.join(cmd)} failed:\n{proc.stderr.read()}")
    return usage.ru_maxrss / 1024, seconds  # Linux reports KiB


def _imports_rss() -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import torch, transformers, corl.runtime, corl.builtin.hf"])
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    rows = [("imports only (python, torch, transformers, corl)", *_imports_rss())]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, overrides) in enumerate(VARIANTS.items()):
            if label.startswith("one agent"):
                overrides = overrides + ["agents=[{name='llama', model='zoo:llama-tiny'}]"]
            rows.append((label, *peak_rss(overrides, args.steps, f"{tmp}/v{i}")))
    print(f"peak RSS of `corl run {RECIPE}` ({args.steps} steps, eval off), one process per variant\n")
    print("| variant | peak RSS MB | wall s |")
    print("|---|---|---|")
    for label, mb, seconds in rows:
        print(f"| {label} | {mb:.0f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
