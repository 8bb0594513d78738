"""Claims' verdicts (corl.tools.claims): the margin rule, each test, and the claims file's checks."""

import pytest

from corl.errors import ConfigError
from corl.tools.claims import evaluate_claims, is_claims_file, load_claims, render, verdict


def agent(before, after, se=0.0, frozen=False, std=(0.4, 0.4), length=(3.0, 3.0)):
    """An agent row of results.json from per-seed pass@1 before / after (fractions)."""
    stat = lambda xs: {"mean": sum(xs) / len(xs), "sd": 0.0, "n": len(xs)}  # noqa: E731
    row = {"seeds": {"before": before, "after": after, "se_before": [se] * len(before), "se_after": [se] * len(after)},
           "frozen": frozen, "reward_std_trend": list(std), "completion_length_trend": list(length)}
    for m in ("pass@1", "greedy", "maj@8"):
        for when, xs in (("before", before), ("after", after), ("best", after)):
            row[f"{m}/{when}"] = stat(xs)
    return row


def recipe(**agents):
    return {"agents": agents, "seconds": {"mean": 60.0, "sd": 0.0, "n": 3}, "error_correlation": 0.3,
            "warnings": [], "stopped_at": [None] * 3}


BASE = [0.50, 0.50, 0.50]


def test_improves_needs_every_agent_beyond_two_seed_sds_and_the_eval_error():
    up = recipe(a=agent(BASE, [0.53, 0.53, 0.53]), b=agent(BASE, [0.52, 0.53, 0.54]))
    assert verdict({"test": "improves", "recipe": "r"}, {"r": up})["verdict"] == "holds"
    # b: +3 points, seed sd 1; se 1 point per eval -> change se 1.41 -> margin 2.83: still holds
    noisy = recipe(a=agent(BASE, [0.53] * 3, se=0.01), b=agent(BASE, [0.52, 0.53, 0.54], se=0.01))
    v = verdict({"test": "improves", "recipe": "r"}, {"r": noisy})
    assert v["verdict"] == "holds" and "margin 2.8" in v["statistic"]
    # se 2 points -> margin 5.7: +3 is within the noise
    assert verdict({"test": "improves", "recipe": "r"},
                   {"r": recipe(a=agent(BASE, [0.53] * 3, se=0.02))})["verdict"] == "not shown"
    # one agent significantly down: the claim fails
    mixed = recipe(a=agent(BASE, [0.53] * 3), b=agent(BASE, [0.45] * 3))
    assert verdict({"test": "improves", "recipe": "r"}, {"r": mixed})["verdict"] == "fails"
    assert verdict({"test": "degrades", "recipe": "r"}, {"r": mixed})["verdict"] == "holds"
    assert verdict({"test": "no_harm", "recipe": "r"}, {"r": mixed})["verdict"] == "fails"
    assert verdict({"test": "no_harm", "recipe": "r"}, {"r": up})["verdict"] == "holds"


def test_a_frozen_judge_is_not_part_of_the_verdict():
    judged = recipe(a=agent(BASE, [0.53] * 3), judge=agent(BASE, [0.40] * 3, frozen=True))
    assert verdict({"test": "improves", "recipe": "r"}, {"r": judged})["verdict"] == "holds"


def test_beats_compares_cohort_mean_changes_beyond_the_margin():
    recipes = {"co": recipe(a=agent(BASE, [0.52] * 3), b=agent(BASE, [0.52] * 3)),
               "self": recipe(a=agent(BASE, [0.47] * 3), b=agent(BASE, [0.49] * 3)),
               "close": recipe(a=agent(BASE, [0.515, 0.525, 0.52]), b=agent(BASE, [0.52] * 3))}
    v = verdict({"test": "beats", "recipe": "co", "baseline": "self"}, recipes)
    assert v["verdict"] == "holds" and "+2.0 vs -2.0: +4.0" in v["statistic"]
    assert verdict({"test": "beats", "recipe": "self", "baseline": "co"}, recipes)["verdict"] == "fails"
    assert verdict({"test": "beats", "recipe": "co", "baseline": "close"}, recipes)["verdict"] == "not shown"
    assert verdict({"test": "not_worse", "recipe": "close", "baseline": "co"}, recipes)["verdict"] == "holds"
    assert verdict({"test": "not_worse", "recipe": "self", "baseline": "co"}, recipes)["verdict"] == "fails"


def test_stable_needs_the_baseline_to_collapse_for_a_holds():
    steady = recipe(a=agent(BASE, BASE))
    collapsed = recipe(a=agent(BASE, BASE, std=(0.4, 0.1)))
    longer = recipe(a=agent(BASE, BASE, length=(3.0, 4.5)))
    recipes = {"steady": steady, "collapsed": collapsed, "longer": longer}
    assert verdict({"test": "stable", "recipe": "steady", "baseline": "collapsed"}, recipes)["verdict"] == "holds"
    assert verdict({"test": "stable", "recipe": "steady", "baseline": "steady"}, recipes)["verdict"] == "not shown"
    assert verdict({"test": "stable", "recipe": "longer", "baseline": "collapsed"}, recipes)["verdict"] == "fails"


CLAIMS = """
[regimes.strong]
title = "Strong"
recipes = "strong_*"

[[claims]]
regime = "strong"
text = "Co-RL beats self"
test = "beats"
recipe = "strong_co"
baseline = "strong_self"

[[claims]]
regime = "strong"
text = "ring improves"
test = "improves"
recipe = "strong_ring"
"""


def test_claims_file_is_recognised_checked_and_rendered(tmp_path):
    path = tmp_path / "claims.toml"
    path.write_text(CLAIMS)
    recipe_file = tmp_path / "r.toml"
    recipe_file.write_text("[run]\nname = 'x'\n")
    assert is_claims_file(path) and not is_claims_file(recipe_file)
    names = ["strong_co", "strong_self", "strong_ring"]
    claims = load_claims(path, names)
    assert claims["regimes"]["strong"]["recipes"] == names
    results = {"seeds": [0, 1, 2], "eval_k": 8, "recipes": {
        "strong_co": recipe(a=agent(BASE, [0.52] * 3)), "strong_self": recipe(a=agent(BASE, [0.47] * 3))}}
    results["claims"] = evaluate_claims(claims, results)
    assert [c["verdict"] for c in results["claims"]] == ["holds", "not run"]
    text = render(results, claims)
    assert "### Strong" in text and "| Co-RL beats self | beats | strong_co vs strong_self |" in text
    assert "**holds**" in text and "**not run**" in text


@pytest.mark.parametrize("body, message", [
    ('[[claims]]\ntest = "wins"\nrecipe = "a"', r"claims\[0\]\.test: unknown test 'wins'"),
    ('[[claims]]\ntest = "beats"\nrecipe = "a"', r"claims\[0\]\.baseline: None is not a recipe"),
    ('[[claims]]\ntest = "improves"\nrecipe = "zz"', r"claims\[0\]\.recipe: 'zz' is not a recipe"),
    ('[[claims]]\ntest = "improves"\nrecipe = "a"\nregime = "x"', r"claims\[0\]\.regime: unknown regime 'x'"),
    ('[[claims]]\ntest = "improves"\nrecipe = "a"\nbaselin = "a"', r"claims\[0\]\.baselin: unknown key"),
])
def test_bad_claims_name_the_key(tmp_path, body, message):
    path = tmp_path / "claims.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_claims(path, ["a", "b"])
