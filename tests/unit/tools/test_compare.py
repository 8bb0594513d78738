"""corl compare's table: a mean and its spread over seeds, written as a reader expects them."""

from corl.tools.claims import mean_sd
from corl.tools.compare import _stats, render_markdown


def results(*changes):
    stat = _stats
    row = {"pass@1/before": stat([0.5] * len(changes)), "pass@1/after": stat([0.5 + c for c in changes]),
           "pass@1/change": stat(changes), "pass@1/best": stat([0.6] * len(changes)), "greedy/change": stat(changes)}
    return {"seeds": list(range(len(changes))), "recipes": {"ring": {
        "agents": {"llama": row}, "seconds": stat([60.0] * len(changes)), "error_correlation": None, "warnings": []}}}


def test_a_spread_is_unsigned_and_named_with_the_plus_minus_sign():
    assert mean_sd({"mean": 0.062, "sd": 0.018, "n": 3}, 100, "+.1f") == "+6.2 ± 1.8"
    table = render_markdown(results(0.05, 0.07, 0.06))
    assert "| +6.0 ± 1.0 |" in table and "+-" not in table


def test_one_seed_has_no_spread_to_show():
    assert _stats([0.3]) == {"mean": 0.3, "sd": None, "n": 1}
    assert mean_sd(_stats([0.3])) == "0.300 ± n/a"
    table = render_markdown(results(0.062))
    assert "| +6.2 ± n/a |" in table and "0.000" not in table.split("|---|")[-1]
