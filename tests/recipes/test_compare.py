"""corl compare: several recipes over several seeds, tabulated."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.kit import TINY

ROOT = Path(__file__).resolve().parents[2]


def test_compare_runs_recipes_over_seeds_and_tabulates(tmp_path, cache_dir):
    out = tmp_path / "cmp"
    args = [sys.executable, "-m", "corl.cli", "compare", "three_agent_ring", "self_reward", "--seeds", "0,1",
            "--out", str(out), *[x for item in [*TINY, "run.observers=['jsonl']"] for x in ("--set", item)]]
    env = {**os.environ, "CORL_CACHE_DIR": str(cache_dir)}
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and list(results["recipes"]) == ["three_agent_ring", "self_reward"]
    for rec in results["recipes"].values():
        assert set(rec["agents"]) == {"llama", "qwen2", "neox"}
        change = rec["agents"]["llama"]["pass@1/change"]
        assert change["n"] == 2 and change["sd"] >= 0
    ring = results["recipes"]["three_agent_ring"]["agents"]["neox"]
    summaries = [json.loads((out / "three_agent_ring" / f"seed{s}" / "summary.json").read_text()) for s in (0, 1)]
    expected = sum(s["agents"]["neox"]["after"]["pass@1"] for s in summaries) / 2
    assert abs(ring["pass@1/after"]["mean"] - expected) < 1e-12
    table = (out / "results.md").read_text()
    assert "| three_agent_ring | llama |" in table and "| self_reward | llama |" in table
    # a second call reuses the finished runs
    again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0 and again.stderr.count("done before, reusing") == 4
    changed = subprocess.run([*args, "--set", "run.steps=3"], capture_output=True, text=True, env=env, timeout=900)
    assert changed.returncode == 2
    assert "holds a run of a different recipe (run.steps: 2 -> 3); use another --out" in changed.stderr
