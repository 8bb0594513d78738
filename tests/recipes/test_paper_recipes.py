"""recipes/paper: every recipe validates, the claims file names only them, and the generator
script reproduces the committed files (so the grid in docs/results.md cannot drift)."""

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
    assert set(claims["regimes"]) == {"strong", "weak"}
    assert all(claims["regimes"][r]["recipes"] for r in ("strong", "weak"))
    assert {c["regime"] for c in claims["claims"]} == {"strong", "weak"}


def test_generator_reproduces_the_committed_recipes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_paper_recipes", ROOT / "scripts" / "make_paper_recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    written = {p.name: p.read_text() for p in tmp_path.glob("*.toml")}
    assert written == {p.name: p.read_text() for p in RECIPES}
