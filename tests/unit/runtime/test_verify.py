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


class HangingBatch:
    """A verifier that sees the prompts (a BatchVerifier) and hangs on one of them."""

    def extract(self, text):
        return text

    def equivalent(self, a, b):
        return a == b

    def extract_batch(self, prompts, texts):
        while any(p.text == "hang" for p in prompts):
            pass
        return [[t.upper() for t in row] for row in texts]


def test_a_batch_verifier_is_bounded_by_the_answer_timeout():
    """(Before: a BatchVerifier ran without any bound.) Each completion's share of the bound, for
    the whole batch; past it, the batch gives no answers and counts its completions."""
    from corl.types import Prompt

    v = BoundedVerifier(HangingBatch(), seconds=0.1)
    with v.armed():
        start = time.perf_counter()
        assert v.extract_batch([Prompt("1", "hang")], [["a", "b"]]) == [[None, None]]
        assert time.perf_counter() - start < 2
        assert v.extract_batch([Prompt("2", "fine")], [["a", "b"]]) == [["A", "B"]]
    assert v.timeouts == 2


def test_a_batch_verifier_that_declares_its_own_bound_runs_without_ours():
    from corl.types import Prompt

    class Sandboxed(HangingBatch):
        bounded = True  # a sandbox with its own limits

        def extract_batch(self, prompts, texts):
            time.sleep(0.3)
            return [[t for t in row] for row in texts]

    v = BoundedVerifier(Sandboxed(), seconds=0.05)
    with v.armed():
        assert v.extract_batch([Prompt("1", "x")], [["a"]]) == [["a"]]
    assert v.timeouts == 0


def test_a_hanging_verifier_stops_on_sigint(tmp_path):
    """(Before: a hanging BatchVerifier ignored Ctrl-C; only SIGKILL ended the run.) With no time
    bound at all (run.answer_timeout = 0), a SIGINT stops the run within the grace period, naming
    the verifier, with exit status 130."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import corl
        from corl.testing import fake_recipe, run_tiny

        class Hangs:
            def extract(self, text):
                return text
            def equivalent(self, a, b):
                return a == b
            def extract_batch(self, prompts, texts):
                print("hanging", flush=True)
                while True:
                    pass

        class Task:
            def __init__(self, config, ctx):
                self.inner = ctx.build("task", "arithmetic", {{"seed_size": 0, "train_size": 16, "eval_size": 8}})
                self.verifier = Hangs()
            def split(self, name):
                return self.inner.split(name)

        class Plugin:
            @corl.hookimpl
            def corl_register_components(self, registry):
                registry.add("task", "hangs", Task, corl.NoConfig)

        recipe = fake_recipe(**{{"run.answer_timeout": 0, "eval.size": 0, "run.observers": []}})
        recipe["task"] = {{"type": "hangs"}}
        try:
            run_tiny({str(tmp_path / "out")!r}, recipe, plugins=[Plugin()])
        except corl.CorlError as exc:
            print(exc, flush=True)
            sys.exit(exc.exit_code)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "hanging"
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "stopped by SIGINT during step 1: task 'hangs'" in out and "verifier did not return within 2 s" in out
    assert "nothing was checkpointed yet" in out
