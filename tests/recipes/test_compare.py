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


def _step0(run_dir: Path) -> tuple[dict, list]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [record] = [r for r in records if r["kind"] == "eval" and r["step"] == 0]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return record, [s for s in samples if s["kind"] == "eval" and s["step"] == 0]


def test_recipes_of_a_seed_share_the_step0_evaluation_that_each_would_have_made(tmp_path, cache_dir, monkeypatch):
    from corl.tools.compare import compare

    monkeypatch.setenv("CORL_CACHE_DIR", str(cache_dir))
    overrides = [*TINY, "run.steps=1", "run.threads=1", "run.observers=['jsonl']"]
    said: list[str] = []
    compare(["three_agent_ring", "self_reward"], [0], tmp_path / "both", overrides, log=said.append)
    assert "step 0: evaluation shared with three_agent_ring seed 0 (the same agents, evaluation settings and seed)" in said
    assert sum("evaluating 3 agent(s)" in line for line in said) == 1  # the step-0 evaluation ran once
    # what self-reward adopted is what it evaluates alone, record and logged samples alike
    compare(["self_reward"], [0], tmp_path / "alone", overrides, log=said.append)
    shared, alone = _step0(tmp_path / "both" / "self_reward" / "seed0"), _step0(tmp_path / "alone" / "self_reward" / "seed0")
    assert shared == alone and shared[1]
    assert shared[0] == _step0(tmp_path / "both" / "three_agent_ring" / "seed0")[0]


def test_the_evaluation_key_keeps_what_changes_an_evaluation():
    from corl.recipe import to_dict
    from corl.runtime import prepare
    from corl.tools.compare import evaluation_key

    key = lambda recipe, *sets: evaluation_key(to_dict(prepare(recipe, [*TINY, "run.threads=1", *sets])[1]))
    ring = key("three_agent_ring")
    assert key("self_reward") == ring == key("three_agent_ring", "run.steps=7", "eval.every=1")
    for changed in ("eval.k=2", "eval.temperature=0.5", "run.seed=1", "voting.min_share=0.6", "task.eval_size=24",
                    "agents[0].model='zoo:llama-tiny'", "agents[1].sampler.temperature=0.5", "run.threads=2"):
        assert key("three_agent_ring", changed) != ring, changed
