"""What a resumed run may change: a key a saved recipe predates is no change when the current value
is its default, so a new recipe key never strands an older checkpoint."""

import json

import pytest

from corl import manifest
from corl.errors import CorlError
from corl.plugins import make_plugin_manager, registry_of
from corl.recipe import defaults_of, differences, load_recipe, to_dict
from corl.testing import FakePlugin, fake_recipe, run_tiny


@pytest.fixture(scope="module")
def spec():
    registry = registry_of(make_plugin_manager([FakePlugin()], autoload=False))
    return load_recipe(fake_recipe(**{"voting.min_share": 0.25}), registry=registry)


def older(recipe, *paths):
    """``recipe`` as a corl that predates the keys at ``paths`` saved it."""
    recipe = json.loads(json.dumps(recipe))
    for path in paths:
        *parents, last = path.split(".")
        node = recipe
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]
    return recipe


def test_a_key_the_saved_recipe_predates_is_no_change_at_its_default(spec):
    now = to_dict(spec)
    saved = older(now, "voting.tie_break", "eval.temperature", "agents.0.frozen", "agents.1.ranks", "shaping",
                  "observers", "run.protocol")
    assert differences(saved, now, defaults=defaults_of(spec)) == []
    assert differences(saved, now) != []  # without the defaults, every new key was a change


def test_a_key_the_saved_recipe_predates_is_a_change_away_from_its_default(spec):
    now = to_dict(spec)
    # min_share 0.25 and fake0's accuracy 0.4 are not their defaults; an agent's name has none
    saved = older(now, "voting.min_share", "agents.0.accuracy", "agents.1.accuracy", "agents.1.name")
    assert differences(saved, now, defaults=defaults_of(spec)) == ["agents[0].accuracy: (absent) -> 0.4",
                                                                   "agents[1].name: (absent) -> 'fake1'",
                                                                   "voting.min_share: (absent) -> 0.25"]


def test_an_older_checkpoint_resumes_without_force(tmp_path):
    out = tmp_path / "run"
    recipe = fake_recipe(**{"run.steps": 2, "run.checkpoint_every": 1})
    run_tiny(out, recipe)
    state = out / "checkpoints" / "step-000002" / "state.json"
    saved = json.loads(state.read_text())
    pristine = json.loads(json.dumps(saved))
    # as the corl before [[shaping]], observer tables, agents[i].ranks and voting.min_share wrote it
    saved["recipe"] = older(saved["recipe"], "shaping", "observers", "agents.0.ranks", "agents.1.ranks",
                            "agents.2.ranks", "voting.min_share")
    state.write_text(json.dumps(saved))
    manifest.write(state.parent)  # sealed as its corl wrote it (an edited file no longer verifies)
    summary = run_tiny(out, recipe, ["run.steps=3"], resume=True)
    assert summary["steps"] == 3

    # a key it predates whose value now is not its default is what the run trains with: refused
    pristine["recipe"] = older(pristine["recipe"], "voting.min_share")
    (out / "checkpoints" / "step-000003" / "state.json").write_text(json.dumps(pristine))
    manifest.write(out / "checkpoints" / "step-000003")
    with pytest.raises(CorlError, match=r"the recipe changed since this checkpoint \(voting.min_share: \(absent\) -> "
                                        r"0.5\); resume with the same recipe, or pass --force"):
        run_tiny(out, recipe, ["run.steps=4", "voting.min_share=0.5"], resume=True)
