"""Code answers: extraction, behaviour signatures, voting over them, and the two code tasks."""

import pytest

from corl.builtin.tasks.code import CodeVerifier, extract_program, signature
from corl.builtin.tasks.code_tasks import ExpressionsConfig, ExpressionsTask, PythonFunctionsConfig, PythonFunctionsTask
from corl.builtin.topology import AllPairsConfig, AllPairsRouter, GroundTruthRouter, RingRouter, SelfRouter
from corl.builtin.voting import MajorityConfig, MajorityVote
from corl.runtime.evaluation import votes_of
from corl.runtime.verify import BoundedVerifier, extract_all
from corl.sandbox import Limits, Outcome
from corl.types import NoConfig, Prompt, Rollout, Routed, VoteContext

LABEL_CTX = VoteContext("label")  # an agent's own labels (the built-in aggregators read no more of it)

FAST = Limits(wall_seconds=1.0, memory_mb=256)
PROMPT = Prompt("p", "3,5,7=", label=("9", "13", "23", "-1"), test_inputs=(3, 5, 10, -2))


@pytest.fixture(scope="module")
def verifier():
    return CodeVerifier("expression", limits=FAST)


def test_extract_program_takes_the_last_fenced_block_or_the_bare_text():
    assert extract_program("  2*x+3 \n") == "2*x+3"
    assert extract_program("Here:\n```python\ndef f(n):\n    return 1\n```\nor\n```\ndef f(n):\n    return 2\n```") \
        == "def f(n):\n    return 2"
    assert extract_program("```py\ndef f(n):\n    return n") == "def f(n):\n    return n"  # cut off by max tokens


def test_signature_rules():
    ok, crash = Outcome(output="1"), Outcome(error="crash:ZeroDivisionError")
    assert signature([ok, crash]) == ("1", "!crash:ZeroDivisionError")
    assert signature([crash, crash]) is None  # crashes on every input: no vote
    assert signature([Outcome(error="syntax")]) is None
    assert signature([ok, Outcome(error="timeout")]) is None  # a limit says more about the machine


def test_equivalent_programs_written_differently_are_one_vote(verifier):
    texts = ["2*x+3", "x*2+3", "3+2*x", "x+x+3", "(x*4+6)//2", "2*x+4"]
    (row,) = verifier.extract_batch([PROMPT], [texts])
    assert len(set(row[:5])) == 1 and row[0] == PROMPT.label
    assert row[5] != row[0]


def test_a_crashing_or_unparseable_program_is_no_vote(verifier):
    (row,) = verifier.extract_batch([PROMPT], [["1/0", "2*x+", "undefined_name", "", "1/(x-3)"]])
    assert row[:4] == [None, None, None, None]
    assert row[4] == ("!crash:ZeroDivisionError", "0.5", "0.142857143", "-0.2")  # crashing on one input is behaviour


def test_majority_over_signatures_picks_the_behaviour_most_programs_share(verifier):
    # By text, "2*x+4" is the most common answer; by behaviour, the three spellings of 2x+3 win.
    texts = ["2*x+4", "2*x+4", "2*x+3", "x*2+3", "3+x*2", "1/0", "1/0", "1/0"]
    rollout = Rollout("a", (PROMPT,), (tuple(texts),), ((1,) * 8,), ((0.0,) * 8,))
    votes = votes_of(rollout, BoundedVerifier(verifier, 1.0))
    (label,) = MajorityVote(MajorityConfig()).aggregate(votes, verifier, LABEL_CTX)
    assert label.answer == PROMPT.label and label.share == pytest.approx(3 / 5)


def rewards(routed):
    return routed.rewards if isinstance(routed, Routed) else routed


def test_routers_reward_programs_that_behave_like_the_peer_label(verifier):
    mine = Rollout("a", (PROMPT,), (("x*2+3", "x+3", "1/0"),), ((1,) * 3,), ((0.0,) * 3,))
    peer = Rollout("b", (PROMPT,), (("3+x+x", "2*x+3", "x"),), ((1,) * 3,), ((0.0,) * 3,))
    votes = {"a": votes_of(mine, verifier), "b": votes_of(peer, verifier)}
    agg = MajorityVote(MajorityConfig())
    labels = {k: agg.aggregate(v, verifier, LABEL_CTX) for k, v in votes.items()}
    assert rewards(RingRouter(NoConfig()).route(votes, labels, verifier, agg))["a"] == [[1.0, 0.0, 0.0]]
    assert rewards(AllPairsRouter(AllPairsConfig()).route(votes, labels, verifier, agg))["a"] == [[1.0, 0.0, 0.0]]
    # on its own, a's two voting programs behave differently: the seeded tie-break picks one
    assert sum(rewards(SelfRouter(NoConfig()).route(votes, labels, verifier, agg))["a"][0]) == 1.0
    truth = rewards(GroundTruthRouter(NoConfig()).route(votes, labels, verifier, agg, [PROMPT.label]))
    assert truth["a"] == [[1.0, 0.0, 0.0]] and truth["b"] == [[1.0, 1.0, 0.0]]


def test_one_sandbox_call_per_batch_and_duplicates_run_once(verifier, monkeypatch):
    calls = []
    real = verifier.sandbox.run
    monkeypatch.setattr(verifier.sandbox, "run", lambda programs: calls.append(len(programs)) or real(programs))
    answers = extract_all(BoundedVerifier(verifier, 1.0), [PROMPT, PROMPT], [["2*x+3", "2*x+3"], ["x", "2*x+3"]])
    assert calls == [2] and answers[0] == [PROMPT.label, PROMPT.label]


def test_extract_without_the_prompt_is_an_error(verifier):
    with pytest.raises(TypeError, match="extract_batch"):
        verifier.extract("2*x+3")


def test_expressions_task_splits_and_labels_match_the_reference_programs():
    task = ExpressionsTask(ExpressionsConfig(seed_size=60, train_size=30, eval_size=30))
    seed, train, held_out = (task.split(s) for s in ("seed", "train", "eval"))
    assert len(seed) == 60 and len({p.text for p in seed + train + held_out}) == 120
    # the reference expressions, run in the sandbox, give the labels (and no prompt shows the test inputs)
    answers = task.verifier.extract_batch(seed, [[p.solution] for p in seed])
    assert [a[0] for a in answers] == [p.label for p in seed]
    assert len({p.solution for p in seed}) == 60 and any("x*" in p.solution for p in seed)


def test_python_functions_task_reference_solutions_pass_through_the_sandbox():
    task = PythonFunctionsTask(PythonFunctionsConfig(seed_size=20, train_size=20, eval_size=16))
    prompts = task.split("seed") + task.split("eval")
    assert all("```python" in p.text and "f(" in p.text for p in prompts)
    answers = task.verifier.extract_batch(prompts, [[f"Sure.\n{p.solution}\nDone."] for p in prompts])
    assert [a[0] for a in answers] == [p.label for p in prompts]
    wrong = task.verifier.extract_batch(prompts[:1], [["```python\ndef g(n):\n    return n\n```"]])
    assert wrong == [[None]]  # no function f: no vote


def test_python_functions_rejects_unknown_templates():
    with pytest.raises(ValueError, match="unknown templates"):
        PythonFunctionsConfig(templates=("multiple", "fizzbuzz"))


def test_zoo_tokenizer_grows_only_for_code_and_round_trips_it():
    from corl.builtin.hf.models import zoo

    assert zoo.chars_for([("1+2=", "3")]) == zoo.CHARS  # arithmetic models keep their cache keys
    chars = zoo.chars_for([("3,5,7=", "x*(x+2)+3")])
    assert chars.startswith(zoo.CHARS) and "x" in chars and " " in chars
    tok = zoo.build_tokenizer(chars)
    text = "def f(n):    return n ** 2"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
