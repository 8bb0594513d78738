"""recipes/cohort, recipes/weak and recipes/one_strong: every recipe validates, each pair differs only
where its name says, every base is shipped (no warm-start at load), the claims name only these
recipes, and the generator reproduces the committed files (so the tables in docs/results/claims.md cannot
drift from what `corl compare` runs)."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import load_recipe
from corl.tools.claims import is_claims_file, load_claims

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"cohort": ROOT / "recipes" / "cohort", "weak": ROOT / "recipes" / "weak",
           "one_strong": ROOT / "recipes" / "one_strong"}
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


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_base_is_shipped_so_step_0_is_the_same_on_every_machine(path, tmp_path, monkeypatch):
    """A warm-start stopped inside a learning transition lands elsewhere on another machine (issue 38:
    the weak cohort's came out 0.205 / 0.875 / 0.177 pass@1 on one): every agent here loads shipped
    weights from the package, and nothing is warm-started or cached at load."""
    from corl.builtin.hf.models import sources
    from corl.builtin.hf.models.catalog import SHIPPED_ZOO, shipped_folder

    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path))
    recipe = tomllib.loads(path.read_text())
    assert "zoo" not in recipe
    for a in recipe["agents"]:
        assert a["model"].removeprefix("zoo:") in SHIPPED_ZOO and not {k for k in a if k.startswith("zoo_")}, a
        folder = sources.resolve(a["model"], zoo_builder=lambda n: pytest.fail(f"{path.stem} warm-starts zoo:{n}"))
        assert folder == str(shipped_folder(a["model"].removeprefix("zoo:")))
    assert not list(tmp_path.iterdir())


def test_the_weak_cohort_is_weak_and_the_one_strong_cohort_has_one_strong_member():
    """The regimes the recipes intend, as each shipped base's documented pass@1 band says
    (tests/unit/builtin/hf/test_shipped.py measures every base against its band)."""
    from corl.builtin.hf.models.shipped import SHIPPED

    band = lambda a: SHIPPED[a["model"].removeprefix("zoo:")].pass1
    for path in FOLDERS["weak"].glob("weak_*.toml"):
        assert all(band(a)[1] <= 0.5 for a in tomllib.loads(path.read_text())["agents"]), path.name
    for path in FOLDERS["one_strong"].glob("one_strong_*.toml"):
        strong, *weak = tomllib.loads(path.read_text())["agents"]
        assert all(band(strong)[0] > band(a)[1] + 0.3 for a in weak), path.name


@pytest.mark.parametrize("kind", ["ring", "pooled"])
def test_the_upward_recipe_differs_from_its_baselines_only_in_its_topology(kind):
    read = lambda name: tomllib.loads((FOLDERS["one_strong"] / f"one_strong_{name}.toml").read_text())
    upward, other = read("upward"), read(kind)
    assert upward.pop("topology") == {"type": "upward"} and other.pop("topology")["type"] in ("ring", "all_pairs")
    upward["run"].pop("name"), other["run"].pop("name")
    assert upward == other


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
    module.main(tmp_path / "cohort", tmp_path / "weak", tmp_path / "one_strong")
    for name, folder in FOLDERS.items():
        written = {p.name: p.read_text() for p in (tmp_path / name).glob("*.toml")}
        assert written == {p.name: p.read_text() for p in RECIPES if p.parent == folder}
