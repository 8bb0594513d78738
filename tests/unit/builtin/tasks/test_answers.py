import threading

import pytest

from corl.builtin.tasks.answers import MathVerifier, extract_answer
from corl.protocols import AnswerVerifier
from corl.runtime.verify import BoundedVerifier


@pytest.mark.parametrize("text, answer", [
    (r"so the probability is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),  # nested braces
    (r"first \boxed{3}, on reflection \boxed{\frac{a}{b^{2}}}", r"\frac{a}{b^{2}}"),  # the last one wins
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
    (r"\fbox{7}", "7"),
    (r"hence \boxed 5", "5"),
    (r"\boxed{\text{(B)}}", "(B)"),  # a unit-less \text{} wrapper goes
    (r"\boxed{5\text{ cm}}", r"5\text{ cm}"),  # a unit stays
    (r"\boxed{1,\!000}", "1000"),
    (r"\boxed{\$42}", "42"),
    ("She sold 48/2 = <<48/2=24>>24 clips.\n#### 1,234", "1234"),  # GSM8K, thousands comma
    ("#### 72\n", "72"),
    (r"The answer is $\frac{3}{4}$.", r"\frac{3}{4}"),
    ("the ANSWER is 3.5. Then 7 more words 99", "3.5"),  # up to the end of the sentence, not 99
    ("Answer: -7\nchecked with 12", "-7"),
    ("Final Answer: The final answer is $42$. I hope it is correct.", "42"),  # the last anchor
    ("I had 3 apples and 4.5 pears, so -12", "-12"),  # last number, negative
    ("10 + 2 = 12, then 12 - 0.25 = 11.75", "11.75"),  # decimals; earlier numbers ignored
    ("from 3 to 10-3, that is 7", "7"),  # a minus after a digit is subtraction
    ("in all 1,234 marbles", "1234"),
    ("she ate 3/4 of the pie", "3/4"),
    ("it costs $42.", "42"),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text", ["", "no numbers here", r"\boxed{}", "The answer is .", r"cut off \boxed{\frac{1}{"])
def test_no_answer_is_none(text):
    assert extract_answer(text) is None


def test_a_truncated_boxed_falls_back_to_an_earlier_format():
    assert extract_answer("#### 9\n" + r"\boxed{\frac{1}{") == "9"


def test_format_order_boxed_before_hashes_before_answer_is():
    assert extract_answer("The answer is 1.\n#### 2\n" + r"\boxed{3}") == "3"
    assert extract_answer("The answer is 1.\n#### 2") == "2"
    assert extract_answer("The answer is 1. I counted 5.") == "1"


V = MathVerifier()


def test_is_an_answer_verifier_that_corl_bounds():
    assert isinstance(V, AnswerVerifier) and MathVerifier.bounded is False
    assert V.extract("so \\boxed{12}") == "12" and V.extract("nothing") is None


@pytest.mark.parametrize("group", [
    ["1/2", "0.5", r"\frac{1}{2}", r"\dfrac12", r"\tfrac{1}{2}", ".5"],
    ["42", "42.0", V.extract("$42"), V.extract("42."), V.extract("\\$42")],
    ["1000", V.extract("1,000"), "1000.00"],
    [r"-\frac{3}{4}", "-0.75", "-3/4"],
])
def test_one_answer_in_many_forms(group):
    for a in group:
        for b in group:
            assert V.equivalent(a, b), (a, b)


def test_symbolic_equivalence_through_math_verify():
    assert V.equivalent("x^2+2x+1", "(x+1)^2")
    assert V.equivalent(r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2")
    assert not V.equivalent("x^2+1", "(x+1)^2")


@pytest.mark.parametrize("a, b", [("1/2", "2"), ("0.33", "1/3"), ("42", "24"), ("-1", "1"), ("1/0", "0"),
                                  (r"\frac{1}{2}", r"\frac{1}{3}"), ("x+1", "x+2")])
def test_different_answers(a, b):
    assert not V.equivalent(a, b) and not V.equivalent(b, a)


def test_garbage_and_none_are_false_not_errors():
    assert not V.equivalent(r"\frac{", "1")
    assert not V.equivalent(None, "1") and not V.equivalent("1", None)
    assert not V.equivalent("}}}{{{", r"\sqrt{")
    huge = "9" * 5000  # past int()'s digit limit: no fast path, and no error either
    assert V.equivalent(huge, huge) and not V.equivalent(huge, "1/2")


def test_works_under_corls_time_bound_and_off_the_main_thread():
    bounded = BoundedVerifier(MathVerifier(), seconds=5.0)
    with bounded.armed():
        assert bounded.equivalent("x^2+2x+1", "(x+1)^2") and not bounded.equivalent("x^2", "x^3")
        assert bounded.extract(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    out = []  # math-verify's own timeouts need the main thread (SIGALRM); elsewhere it runs without them
    thread = threading.Thread(target=lambda: out.append(MathVerifier().equivalent("2x+2", "2(x+1)")))
    thread.start()
    thread.join()
    assert out == [True]
