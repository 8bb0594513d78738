import pytest

from corl.builtin.shaping import Boxed, LengthConfig, LengthPenalty, Regex, RegexConfig
from corl.protocols import RewardShaping
from corl.traits import ShapingTraits, traits
from corl.types import NoConfig, Rollout


def rollout(texts, lengths=None):
    texts = tuple(tuple(row) for row in texts)
    lengths = lengths or tuple(tuple(len(t) for t in row) for row in texts)
    return Rollout(agent="a", prompts=(), texts=texts, lengths=tuple(map(tuple, lengths)),
                   confidences=tuple(tuple(0.0 for _ in row) for row in texts))


def test_boxed_rewards_a_closed_non_empty_box():
    texts = [[r"so \boxed{\frac{1}{2}}", r"\boxed{}", r"cut off \boxed{\frac{1}{", "no box: 42"],
             [r"\boxed{\{1, 2\}}", r"\boxed {7}", r"first \boxed{ } then \boxed{3}", r"\boxed{a\}"]]
    assert Boxed(NoConfig()).score(rollout(texts), None, None) == [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]


def test_regex_full_or_anywhere():
    think = RegexConfig(pattern=r"<think>.*?</think>\s*<answer>.*?</answer>", full=True)
    texts = [["<think>a\nb</think> <answer>3</answer>", "<think>a</think><answer>3</answer> and more", "<answer>3</answer>"]]
    assert Regex(think, None).score(rollout(texts), None, None) == [[1.0, 0.0, 0.0]]
    anywhere = RegexConfig(pattern=r"<answer>.*?</answer>")
    assert Regex(anywhere, None).score(rollout(texts), None, None) == [[1.0, 1.0, 1.0]]
    one_line = RegexConfig(pattern=r"<think>.*</think>", dotall=False)
    assert Regex(one_line, None).score(rollout(texts), None, None) == [[0.0, 1.0, 0.0]]


def test_length_penalty_is_dapos_soft_overlong_punishment():
    # max 100, buffer 20: 0 up to 80 tokens, then (80 - L) / 20 down to -1 at 100, -1 beyond
    term = LengthPenalty(LengthConfig(max_tokens=100, buffer=20), None)
    lengths = [[1, 80, 81, 90], [99, 100, 101, 400]]
    values = term.score(rollout([["x"] * 4] * 2, lengths), None, None)
    assert values == [[0.0, 0.0, -0.05, -0.5], [pytest.approx(-0.95), -1.0, -1.0, -1.0]]
    hard = LengthPenalty(LengthConfig(max_tokens=100), None)  # no buffer: a cliff
    assert [hard.value(n) for n in (100, 101)] == [0.0, -1.0]
    with pytest.raises(ValueError, match=r"buffer \(100\) must be below max_tokens \(100\)"):
        LengthConfig(max_tokens=100, buffer=100)


def test_the_built_in_terms_are_shaping_terms_that_read_no_labels():
    for term in (Boxed(NoConfig()), Regex(RegexConfig(pattern="x"), None), LengthPenalty(LengthConfig(8), None)):
        assert isinstance(term, RewardShaping) and traits("shaping", type(term)) == ShapingTraits(needs_labels=False)
