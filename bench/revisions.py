"""The default recipe's step at two revisions of this repository, side by side (prints a table).

  python bench/revisions.py BEFORE [--after REV] [--steps 20] [--rounds 3] [--threads 1]
  python bench/revisions.py HEAD --set-after 'agents[0].compile_update=true' ...   # a key's effect, one revision

What a change did to the default three-agent step, measured in one run: BEFORE (any git revision)
is checked out into a temporary `git worktree`; AFTER is this checkout as it stands (or another
revision, likewise). Each side runs `corl run recipes/three_agent_ring.toml` from its own tree, with
that tree first on PYTHONPATH so its own corl is imported (eval off, no checkpoints, the recipe's
`run.threads` unless --threads), in processes that alternate before, after, after, before, ... so
both see the same machine. A process's figure is the median of its steps' seconds after 2
warm-ups, from its metrics.jsonl, with the agents' sampling and update seconds summed per step; the
table gives the median over processes. ``--set-before`` / ``--set-after`` add a recipe override to
one side (repeatable): the same revision on both sides then measures a key.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "recipes/three_agent_ring.toml"


def checkout(rev: str, stack: ExitStack) -> Path:
    """A temporary worktree of ``rev``, removed at the end."""
    where = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(where), rev], check=True)
    stack.callback(subprocess.run, ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)
    return where


def one_run(tree: Path, steps: int, threads: int | None, extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        sets = [f"run.steps={steps}", "eval.size=0", f"run.output_dir={out}", "run.checkpoint_every=0",
                "run.observers=['jsonl']"] + ([f"run.threads={threads}"] if threads else []) + extra
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "corl.cli", "run", RECIPE, *(x for s in sets for x in ("--set", s))]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"bench/revisions.py: {' '.join(cmd)} in {tree} failed:\n{done.stderr[-3000:]}")
        rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("kind") == "train"][2:]
    phase = lambda key: statistics.median(sum(a[key] for a in r["agents"].values()) for r in train)
    return {"step": statistics.median(r["seconds"] for r in train), "sampling": phase("time/sample"),
            "update": phase("time/update")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before", help="a git revision (commit, tag, branch)")
    parser.add_argument("--after", default=None, help="a git revision (default: this checkout as it stands)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="process pairs, alternating before / after")
    parser.add_argument("--threads", type=int, default=None, help="run.threads (default: the recipe's)")
    parser.add_argument("--set-before", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for the before side only (repeatable)")
    parser.add_argument("--set-after", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for the after side only (repeatable)")
    args = parser.parse_args()
    extra = {"before": args.set_before, "after": args.set_after}
    with ExitStack() as stack:
        trees = {"before": checkout(args.before, stack),
                 "after": checkout(args.after, stack) if args.after else ROOT}
        got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                got[side].append(one_run(trees[side], args.steps, args.threads, extra[side]))
                print(f"round {r + 1} {side}: {got[side][-1]['step']:.4f} s/step", flush=True)
    load = os.getloadavg()
    print(f"\n`{RECIPE}`, {args.steps} steps a process (2 warm-ups left out), {args.rounds} process pairs, "
          f"threads: {args.threads or 'the recipe'}; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}\n")
    print("| side | s/step | sampling s | update s |\n|---|---|---|---|")
    med = {side: {k: statistics.median(x[k] for x in v) for k in v[0]} for side, v in got.items()}
    for side in ("before", "after"):
        m, sets = med[side], "".join(f" --set {x}" for x in extra[side])
        print(f"| {side} ({args.before if side == 'before' else args.after or 'this checkout'}{sets}) | {m['step']:.4f} | "
              f"{m['sampling']:.4f} | {m['update']:.4f} |")
    for key in ("step", "sampling", "update"):
        print(f"{key}: after / before = {med['after'][key] / med['before'][key]:.3f}")


if __name__ == "__main__":
    main()
