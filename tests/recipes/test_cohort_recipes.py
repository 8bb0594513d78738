"""recipes/cohort and recipes/weak: every recipe validates, each pair differs only where its name
says, the claims name only these recipes, and the generator reproduces the committed files (so the
tables in docs/results/claims.md cannot drift from what `corl compare` runs)."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import load_recipe
from corl.tools.claims import is_claims_file, load_claims

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"cohort": ROOT / "recipes" / "cohort", "weak": ROOT / "recipes" / "weak"}
RECIPES = sorted(p for folder in FOLDERS.values() for p in folder.glob("*.toml") if not is_claims_file(p))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_validates(path):
    spec = load_recipe(str(path), registry=registry_of(make_plugin_manager()))
    assert spec.run.name == path.stem and spec.run.protocol == "held_out"


@pytest.mark.parametrize("kind", ["equal", "unequal"])
def test_the_reliability_pair_differs_only_in_its_vote(kind):
    read = lambda voting: tomllib.loads((FOLDERS["cohort"] / f"{kind}_pooled_{voting}.toml").read_text())
    majority, reliability = read("majority"), read("reliability")
    assert (majority["voting"].pop("type"), reliability["voting"].pop("type")) == ("majority", "reliability")
    majority["run"].pop("name"), reliability["run"].pop("name")
    assert majority == reliability


def test_the_weak_cohort_starts_every_agent_early_in_its_warm_start():
    for path in FOLDERS["weak"].glob("weak_*.toml"):
        recipe = tomllib.loads(path.read_text())
        assert all(a["model"].startswith("zoo:") and a["zoo_stop"] < recipe["zoo"]["steps"] or
                   a["zoo_stop"] == recipe["zoo"]["steps"] for a in recipe["agents"]), path.name


@pytest.mark.parametrize("name", FOLDERS)
def test_claims_name_only_the_folders_recipes(name):
    stems = [p.stem for p in RECIPES if p.parent == FOLDERS[name]]
    claims = load_claims(FOLDERS[name] / "claims.toml", stems)
    assert claims["claims"] and all(c["recipe"] in stems and (c["baseline"] or c["recipe"]) in stems
                                    for c in claims["claims"])


def test_generator_reproduces_the_committed_recipes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_cohort_recipes", ROOT / "scripts" / "make_cohort_recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path / "cohort", tmp_path / "weak")
    for name, folder in FOLDERS.items():
        written = {p.name: p.read_text() for p in (tmp_path / name).glob("*.toml")}
        assert written == {p.name: p.read_text() for p in RECIPES if p.parent == folder}
