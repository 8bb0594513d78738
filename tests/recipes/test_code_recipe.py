"""The code recipe through the CLI: `corl eval` and `corl cohort` on behaviour signatures (the run
itself is covered by test_shipped_recipes, which shrinks it the same way)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.kit import tiny_for

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "code_ring.toml"


def corl(*args, cache_dir):
    sets = [x for item in tiny_for(RECIPE) for x in ("--set", item)]
    return subprocess.run([sys.executable, "-m", "corl.cli", *args, *sets], capture_output=True, text=True,
                          env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)}, timeout=600)


def test_eval_and_cohort_score_programs_by_behaviour(cache_dir):
    res = corl("eval", str(RECIPE), "--json", "--k", "3", "--size", "8", cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert set(out["results"]) == {"llama", "qwen2", "neox"} and out["settings"]["prompts"] == 8
    for scores in out["results"].values():
        assert 0 <= scores["pass@1"] <= scores["pass@3"] <= 1 and 0 <= scores["maj@3"] <= 1
    assert len(out["cohort"]["agreement"]) == 3 and out["cohort"]["n"] == 8

    res = corl("cohort", str(RECIPE), "--json", "--prompts", "4", cache_dir=cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    cohort = json.loads(res.stdout)
    assert cohort["prompts"] == 4 and len(cohort["disagreement"]) == 3
    assert all(0 <= s <= 1 for s in cohort["strength"].values()) and cohort["ranked"]
