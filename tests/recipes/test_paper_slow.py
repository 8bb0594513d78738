"""A reduced docs/results.md comparison end to end (`tox -e slow`, minutes): shipped paper recipes
of both regimes, shrunk, over two seeds, with the shipped claims that concern them."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from corl.testing import TINY

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "recipes" / "paper"
RECIPES = ["strong_pair_hetero", "strong_pair_homo_copies", "weak_self_reward", "weak_pair", "weak_pair_early_stop"]


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
    shrink = [*TINY, "run.steps=6", "eval.every=3", "agents[0].zoo_steps=20", "agents[1].zoo_steps=20"]
    # the early-stop table exists only in weak_pair_early_stop: shrink its window in a copy
    recipes = []
    for name in RECIPES:
        text = re.sub(r"(?m)^window = \d+$", "window = 2", (PAPER / f"{name}.toml").read_text())
        (tmp_path / f"{name}.toml").write_text(text)
        recipes.append(str(tmp_path / f"{name}.toml"))
    args = [sys.executable, "-m", "corl.cli", "compare", *recipes, str(claims), "--seeds", "0,1", "--out", str(out),
            *[x for item in shrink for x in ("--set", item)]]
    res = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "CORL_CACHE_DIR": str(cache_dir)},
                         timeout=3600)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["recipes"]) == RECIPES and results["not_run"] == []
    verdicts = {c["text"]: c["verdict"] for c in results["claims"]}
    assert len(verdicts) >= 4 and set(verdicts.values()) <= {"holds", "fails", "not shown"}
    row = results["recipes"]["weak_pair"]["agents"]["llama"]
    # one figure per seed (a 20-step zoo model may score 0 everywhere: se 0 is then exact)
    assert len(row["seeds"]["after"]) == len(row["seeds"]["se_after"]) == 2
    assert all(0 <= se < 1 for se in row["seeds"]["se_after"])
    assert len(results["recipes"]["weak_pair_early_stop"]["stopped_at"]) == 2
    table = (out / "results.md").read_text()
    assert "### Strong base" in table and "### Weak base" in table
    for text, v in verdicts.items():
        assert f"| {text} |" in table and f"**{v}**" in table
