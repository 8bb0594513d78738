"""The full real-model recipe (tens of minutes on 2 CPU cores): `tox -e slow`."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit import real_models_missing

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "real_smollm2_gemma3.toml"


@pytest.mark.slow
@pytest.mark.skipif(real_models_missing(RECIPE) is not None, reason=str(real_models_missing(RECIPE)))
def test_real_recipe_trains_both_models_within_the_memory_goal(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "corl.cli", "run", str(RECIPE), "--set", f"run.output_dir={out}"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "held-out accuracy before -> after" in res.stdout
    # Converted models come from the cache; the run itself must stay under 6 GB peak RSS.
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 6 * 1024 * 1024
    summary = json.loads((out / "summary.json").read_text())["agents"]
    assert sorted(summary) == ["gemma3", "smollm2"]
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == json.loads((out / "recipe.json").read_text())["run"]["steps"]
    for r in train:
        for m in r["agents"].values():
            assert m["nonfinite"] == 0 and m["answered"] > 0.5  # free-text answers are read
    for s in summary.values():
        for when in ("before", "after"):
            assert 0 <= s[when]["greedy"] <= 1 and 0 <= s[when]["pass@1"] <= s[when]["pass@4"] <= 1
