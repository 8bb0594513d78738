"""recipes/paper: every recipe validates, the claims file names only them, and the generator
script reproduces the committed files (so the grid in docs/results/claims.md cannot drift)."""

import importlib.util
from pathlib import Path

import pytest

from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.tools.claims import is_claims_file, load_claims

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "recipes" / "paper"
RECIPES = sorted(p for p in PAPER.glob("*.toml") if not is_claims_file(p))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_paper_recipe_validates(path):
    spec = load_recipe(str(path), registry=build_registry(make_plugin_manager()))
    assert spec.run.name == path.stem


def test_claims_cover_both_regimes_and_name_only_shipped_recipes():
    claims = load_claims(PAPER / "claims.toml", [p.stem for p in RECIPES])
    assert set(claims["regimes"]) == {"held_out", "test_time"}
    assert all(claims["regimes"][r]["recipes"] for r in ("held_out", "test_time"))
    assert {c["regime"] for c in claims["claims"]} == {"held_out", "test_time"}
    # a claim compares recipes of one protocol only
    assert all(c["recipe"].startswith(c["regime"]) and (c.get("baseline") or c["recipe"]).startswith(c["regime"])
               for c in claims["claims"])


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_each_recipe_trains_under_the_protocol_its_name_says_with_the_grids_settings(path):
    """docs/results/claims.md's grid: 150 steps x 32 prompts, eval 1000 x 8; held_out_* train on the train
    split, test_time_* on the evaluated prompts."""
    spec = load_recipe(str(path), registry=build_registry(make_plugin_manager()))
    assert spec.run.protocol == ("test_time" if path.stem.startswith("test_time") else "held_out")
    assert (spec.run.steps, spec.run.prompts_per_step, spec.eval.size, spec.eval.k) == (150, 32, 1000, 8)


def test_generator_reproduces_the_committed_recipes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_paper_recipes", ROOT / "scripts" / "make_paper_recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    written = {p.name: p.read_text() for p in tmp_path.glob("*.toml")}
    assert written == {p.name: p.read_text() for p in RECIPES}
