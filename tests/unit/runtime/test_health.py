"""The collapse warning says what it measured, and reads an optimizer's own rewards when it reports them."""

from corl.runtime.health import PATIENCE, Health


def steps(metrics, n=PATIENCE):
    health = Health()
    for step in range(1, n + 1):
        health.check(step, {"a": {"label_mode_share": 0.1, **metrics}}, 8)
    return health.warnings


def test_the_warning_names_the_reward_it_measured():
    (warning,) = steps({"reward_std": 0.0})
    assert "reward std ~0" in warning and "measured on the router's reward" in warning


def test_an_optimizers_own_reward_terms_are_what_it_reads_when_reported():
    """A router that rewards alike while the optimizer's overlong penalty still separates samples is no
    collapse; the optimizer's own flat rewards are one, named as such."""
    assert steps({"reward_std": 0.0, "optimizer_reward_std": 0.4}) == []
    (warning,) = steps({"reward_std": 0.3, "optimizer_reward_std": 0.0})
    assert "measured on the rewards its optimizer trained on, optimizer_reward_std" in warning
