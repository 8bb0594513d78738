"""The recipe fragments the docs show validate: each ```toml block of a page, on a minimal recipe."""

import re
import tomllib

import pytest

from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from tests.kit import ROOT

PAGES = ["docs/how-to/data-and-evaluation.md", "docs/explanation/co-rl.md"]
BLOCKS = [(page, i, block) for page in PAGES
          for i, block in enumerate(re.findall(r"```toml\n(.*?)```", (ROOT / page).read_text(), re.DOTALL))]


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


@pytest.mark.parametrize("page, i, block", BLOCKS, ids=[f"{page}#{i}" for page, i, _ in BLOCKS])
def test_the_recipe_fragments_in_the_docs_validate(registry, page, i, block, tmp_path, monkeypatch):
    fragment = tomllib.loads(block)
    monkeypatch.chdir(tmp_path)  # a folder a fragment names (a reward model's) is the reader's: made here
    for term in fragment.get("shaping", []):
        if isinstance(term.get("model"), str):
            (tmp_path / term["model"]).mkdir(parents=True)
            (tmp_path / term["model"] / "config.json").write_text('{"model_type": "llama"}')
    recipe = {"agents": [{"name": "a", "model": "HuggingFaceTB/SmolLM2-360M-Instruct"},
                         {"name": "b", "model": "HuggingFaceTB/SmolLM2-360M-Instruct"}], "topology": {"type": "self"},
              **fragment}
    load_recipe(recipe, registry=registry)
