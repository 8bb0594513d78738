import time

from corl.runtime.verify import BoundedVerifier


class Pathological:
    """Hangs on some inputs, as a symbolic-math comparison can."""

    def extract(self, text):
        while text == "hang":
            pass
        return text

    def equivalent(self, a, b):
        while "hang" in (a, b):
            pass
        return a.strip() == b.strip()


def test_a_hanging_answer_counts_as_no_answer():
    v = BoundedVerifier(Pathological(), seconds=0.2)
    with v.armed():
        start = time.perf_counter()
        assert v.extract("hang") is None
        assert v.extract("42") == "42"
        assert v.equivalent("42", "hang") is False
        assert v.equivalent("42", " 42") is True
        assert time.perf_counter() - start < 2
    assert v.timeouts == 2


def test_unarmed_or_unbounded_calls_pass_through():
    v = BoundedVerifier(Pathological(), seconds=0)
    with v.armed():
        assert v.extract("x") == "x"
    assert BoundedVerifier(Pathological(), seconds=1).extract("y") == "y"
