"""A reduced docs/results/claims.md comparison end to end (`tox -e slow`, minutes): shipped paper recipes
of both regimes, shrunk, over two seeds, with the shipped claims that concern them."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.kit import TINY

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "recipes" / "paper"
RECIPES = ["held_out_pair_hetero", "held_out_pair_homo_copies", "test_time_pair_hetero", "test_time_self_reward"]


def subset_claims(path: Path) -> None:
    """recipes/paper/claims.toml restricted to the claims about RECIPES (the same file format)."""
    data = tomllib.loads((PAPER / "claims.toml").read_text())
    lines = []
    for name, regime in data["regimes"].items():
        lines += [f"[regimes.{name}]", f'title = "{regime["title"]}"', f'recipes = "{regime["recipes"]}"', ""]
    for c in data["claims"]:
        if c["recipe"] in RECIPES and c.get("baseline", c["recipe"]) in RECIPES:
            lines += ["[[claims]]", *(f'{k} = "{v}"' for k, v in c.items()), ""]
    path.write_text("\n".join(lines))


@pytest.mark.slow
def test_reduced_paper_comparison_writes_verdicts_for_both_regimes(tmp_path, cache_dir):
    claims = tmp_path / "claims.toml"
    subset_claims(claims)
    out = tmp_path / "paper"
    # the shipped zoo:*-add3 models need no warm-start: TINY without its zoo.* key
    shrink = [*(x for x in TINY if not x.startswith("zoo.")), "run.steps=6", "eval.every=3"]
    recipes = [str(PAPER / f"{name}.toml") for name in RECIPES]
    args = [sys.executable, "-m", "corl.cli", "compare", *recipes, str(claims), "--seeds", "0,1", "--out", str(out),
            *[x for item in shrink for x in ("--set", item)]]
    res = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)},
                         timeout=3600)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["recipes"]) == RECIPES and results["not_run"] == []
    verdicts = {c["text"]: c["verdict"] for c in results["claims"]}
    assert len(verdicts) >= 4 and set(verdicts.values()) <= {"holds", "fails", "not shown"}
    row = results["recipes"]["test_time_pair_hetero"]["agents"]["llama"]
    assert len(row["seeds"]["after"]) == len(row["seeds"]["se_after"]) == 2  # one figure per seed
    assert all(0 < se < 1 for se in row["seeds"]["se_after"])  # shipped bases score 45-80%: se is never 0
    table = (out / "results.md").read_text()
    assert "### Held-out protocol" in table and "### Test-time protocol (TTRL)" in table
    for text, v in verdicts.items():
        assert f"| {text} |" in table and f"**{v}**" in table
