import threading

import pytest

from corl.builtin.tasks import extract, verifiers
from corl.builtin.tasks.extract import extract_answer, extract_label
from corl.builtin.tasks.verifiers import IntegerVerifier, MathVerifier
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



# MATH-style answers of every kind, as a data set's answer column holds them (MATH-500, DeepScaleR,
# OpenR1: no marker) and as a completion states them: alone, boxed, after "The answer is", and in a
# sentence without any marker. Each row: the answer field, the label it gives, an equivalent form.
BARE = [
    (r"\frac{1}{2}", r"\frac{1}{2}", "0.5"),  # was 2 (the last number)
    (r"\dfrac{9}{7}", r"\dfrac{9}{7}", r"\frac{9}{7}"),  # was 7
    (r"2\sqrt{3}", r"2\sqrt{3}", r"\sqrt{12}"),  # was 3
    ("x^2+1", "x^2+1", "1+x^2"),  # was 1
    ("(3, 4)", "(3, 4)", "(3,4)"),  # was 4
    ("2^{10}", "2^{10}", "1024"),  # was 10
    ("[2, 5)", "[2, 5)", "[2,5)"),  # a half-open interval
    (r"(-\infty, 3]", r"(-\infty, 3]", r"(-\infty,3]"),
    (r"(-\infty,-3)\cup(3,\infty)", r"(-\infty,-3)\cup(3,\infty)", r"(3,\infty)\cup(-\infty,-3)"),
    (r"\{1, 2, 3\}", r"\{1, 2, 3\}", r"\{3, 2, 1\}"),  # a set
    ("0, 1", "0, 1", r"\{0, 1\}"),  # a list of solutions is a set
    (r"\left( 3, \frac{\pi}{2} \right)", r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})"),
    ("6 - 5i", "6 - 5i", "6-5i"),
    (r"\$32,\!348", "32348", "32348.0"),
    (r"10\%", r"10\%", "0.1"),
    (r"12\text{ square units}", r"12\text{ square units}", "12"),
    (r"\text{(C)}", "(C)", "C"),  # a choice
    (r"\text{Evelyn}", "Evelyn", "evelyn"),  # text answers compare as words
    ("42", "42", "42.0"),
]


@pytest.mark.parametrize("field, label, other", BARE, ids=[row[0] for row in BARE])
def test_a_bare_answer_field_is_the_label_whole(field, label, other):
    assert extract_label(field) == label
    assert V.equivalent(other, label) and V.equivalent(label, other)


@pytest.mark.parametrize("field, label, other", BARE, ids=[row[0] for row in BARE])
def test_completions_state_the_same_answer_with_or_without_a_marker(field, label, other):
    completions = [rf"so the answer is \boxed{{{field}}}", f"The answer is ${field}$.", f"Answer: {field}",
                   f"We simplify, and so we get ${field}$.", f"Therefore {field}."]
    if not field.startswith(r"\text"):  # a math answer alone, no marker and no $...$
        completions.append(field)
    for text in completions:
        answer = extract_answer(text)
        assert answer is not None and V.equivalent(answer, label), (text, answer)


@pytest.mark.parametrize("text, answer", [
    (r"Therefore the sum is 2^{10}.", "2^{10}"),  # undelimited LaTeX in prose: not 10
    (r"hence 2\sqrt{3} is the length", r"2\sqrt{3}"),  # trailing words skipped
    ("so the interval is [2, 5).", "[2, 5)"),  # the sentence's period is not part of it
    ("The point is (3, 4)", "(3, 4)"),
    ("(so 5)", "5"),  # brackets the span cut in half go
    ("so x = 5", "5"),  # the last side of an equation, as math-verify reads one
    ("the roots are 2, 3", "2, 3"),
    ("She sold 48/2 = <<48/2=24>>24 clips", "24"),  # GSM8K calculator notes are not answers
    (r"the value is \(2\sqrt{3}\) indeed", r"2\sqrt{3}"),
    (r"The name is \text{Evelyn}.", "Evelyn"),
])
def test_no_marker_the_last_mathematics_in_the_prose(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text", ["Evelyn", "hello", "))", "we went home"])
def test_words_alone_answer_only_as_labels(text):
    # A completion of one word is not an answer (a collapsed policy agreeing on "the" earns nothing);
    # a label may be one ("Evelyn"); neither is a pair of brackets.
    assert extract_answer(text) is None
    assert extract_label(text) == (text if text[0].isalpha() else None)


def test_a_worked_solution_without_a_marker_labels_its_last_mathematics():
    assert extract_label("She has 3+4 = 7 apples.") == "7"
    assert extract_label("#### 2^{10}") == "2^{10}" and extract_label(r"It is \boxed{(3, 4)}.") == "(3, 4)"


def test_text_answers_never_reach_sympy():
    # to sympy, "Evelyn" and "Nevely" are the same product of six symbols
    assert not V.equivalent("Evelyn", "Nevely") and V.equivalent("New York", "new  york")
    assert not V.equivalent("Evelyn", "5") and not V.equivalent("even", "odd")


@pytest.mark.parametrize("a, b", [("(3, 4)", "(4, 3)"), ("[2, 5)", "(2, 5)"), (r"\{1, 2, 3\}", r"\{1, 2\}"),
                                  ("(C)", "D"), ("2^{10}", "1000")])
def test_structures_that_differ(a, b):
    assert not V.equivalent(a, b) and not V.equivalent(b, a)


def test_plain_numbers_never_call_math_verify(monkeypatch):
    def refuse(*args):
        raise AssertionError("math-verify called on a plain number")

    monkeypatch.setattr(extract, "_parse", refuse)
    monkeypatch.setattr(verifiers, "_parse", refuse)
    for text in ["I had 3 apples and 4.5 pears, so -12", "#### 1,234", r"\boxed{\frac{1}{2}}", "so 3/4 of it", "72"]:
        assert extract_answer(text) is not None
    assert V.equivalent("0.5", r"\frac{1}{2}") and not V.equivalent("1/3", "0.33")
    assert IntegerVerifier.bounded and IntegerVerifier().label("12") == 12


def test_extraction_parses_under_corls_time_bound():
    bounded = BoundedVerifier(MathVerifier(), seconds=5.0)
    with bounded.armed():
        assert bounded.extract("Therefore the sum is 2^{10}.") == "2^{10}"
        assert bounded.extract("so we get x^2+1 as the polynomial") == "x^2+1"
    assert bounded.timeouts == 0


# -- reasoning models' formats, units and currency, non-answers --------------------------------------


@pytest.mark.parametrize("text, answer", [
    ("<think>3 + 4 is 7, times 6</think><answer>42</answer>", "42"),
    ("<think>maybe \\boxed{41}</think>\n<answer>\n42\n</answer>", "42"),  # the tag, not a box in the thinking
    ("<think>so 40</think> The answer is \\boxed{42}.", "42"),  # after the thinking
    ("<answer>\\boxed{\\frac{1}{2}}</answer>", r"\frac{1}{2}"),  # markers inside the tag still apply
    ("<answer>Paris</answer>", "Paris"),  # an answer stated in its tag may be a word
    ("Final answer: 42 dollars", "42"),
    ("The answer is 42 dollars.", "42"),
    ("It costs $42", "42"),
    ("The total is USD 1,250.", "1250"),
    ("Answer: €7.50", "7.50"),
    ("Answer: 12 square feet", "12"),
    ("The answer is 42 percent.", "42%"),
    ("The answer is 2 pi.", "2 pi"),  # words that are mathematics stay
])
def test_reasoning_formats_and_units(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("a, b", [(extract_answer("Final answer: 42 dollars"), "42"), (extract_answer("$42"), "42"),
                                  ("42%", "42"), ("42%", "0.42"), (r"10\%", "10")])
def test_units_currency_and_percent_equal_the_number(a, b):
    # a percent is math-verify's: 42% equals 42 and 0.42
    assert V.equivalent(a, b) and V.equivalent(b, a)


@pytest.mark.parametrize("text", ["I do not know", "N/A", "n/a.", "See solution", "Unknown", "\\boxed{N/A}",
                                  "The answer is: I don't know.", "<answer>N/A</answer>", "<think>hmm, 5?</think><answer>4"])
def test_non_answers_are_never_answers_or_labels(text):
    assert extract_answer(text) is None and extract_label(text) is None


@pytest.mark.parametrize("text, path", [
    ("<answer>42</answer>", "tag"), (r"so \boxed{7}", "boxed"), ("work\n#### 72", "hashes"),
    ("The answer is 5.", "answer_is"), (r"\frac{1}{2}", "whole"), ("Evelyn", "whole"),
    ("She has 3+4 = 7 apples.", "fallback"),  # a GSM8K solution that lost its #### line
    ("I do not know 5 things", "fallback"),
])
def test_each_label_says_how_it_was_found(text, path):
    label, found = extract.extract_label_path(text)
    assert label is not None and found == path and found in extract.PATHS
    assert extract.extract_label_path("N/A") == (None, "none") == extract.extract_label_path(r"\boxed{N/A}")
    assert extract.extract_label_path("))") == (None, None)


def test_tag_and_regex_extractors_read_only_their_place():
    from corl.builtin.tasks.extractors import verifier_for

    tag = verifier_for("tag:answer")
    assert tag.extract("<think>x</think><answer>42 dollars</answer>") == "42"
    assert tag.extract("The answer is 42.") is None  # the format is part of the task
    assert tag.label("#### 7") == "7" and tag.equivalent("0.5", "1/2")  # labels and comparison as math
    regex = verifier_for(r"regex:FINAL=(\S+)")
    assert regex.extract("FINAL=1 then FINAL=$3") == "3" and regex.extract("final 3") is None
    whole = verifier_for(r"regex:\d+ apples")
    assert whole.extract("I have 12 apples") == "12"  # no group: the whole match, its units dropped
    assert isinstance(verifier_for("integer"), IntegerVerifier) and isinstance(verifier_for("math"), MathVerifier)


@pytest.mark.parametrize("value, problem", [
    ("tag:", "a tag name is letters"), ("regex:(a)(b)", "has 2 groups"), ("regex:(", "is not a regular expression"),
    ("regex:x*", "matches the empty text"), ("boxed", "valid are 'math', 'integer', 'tag:NAME' (e.g. 'tag:answer') or 'regex:PATTERN'"),
])
def test_a_bad_extractor_is_one_line_at_its_key_path(value, problem):
    from corl.errors import ConfigError
    from corl.plugins import build_registry, make_plugin_manager
    from corl.recipe import load_recipe

    recipe = {"task": {"type": "jsonl", "train": "t.jsonl", "answers": value},
              "agents": [{"name": "a", "model": "x/y"}], "topology": {"type": "self"}}
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, registry=build_registry(make_plugin_manager(autoload=False)))
    (line,) = info.value.problems
    assert line.startswith(f"<recipe>: task.answers: invalid value {value!r}: ") and problem in line


@pytest.mark.parametrize("text", [
    "End with 'Answer: <number>.",  # the instruction echoed back
    "Answer: </strong>", "Answer: <br>", "Answer: the", "The answer is: is", "Answer: [your answer]",
    "Answer: {answer}", "**Answer:** <number>", "Answer: Paris",  # a word alone after a marker of a completion
])
def test_junk_after_a_marker_is_no_answer(text):
    assert extract_answer(text) is None


def test_equal_junk_never_agrees_with_itself():
    echoes = ["End with 'Answer: <number>'.", "End with 'Answer: <number>'"]
    answers_ = [extract_answer(t) for t in echoes]
    assert answers_ == [None, None] and not V.equivalent(*answers_)


@pytest.mark.parametrize("text, answer", [
    ("Answer: 21 (as Bob gave away 4 stickers)", "21"),
    ("Answer: 21 apples (10 + 11)", "21"),
    ("Answer: 42 pens", "42"),
    ("Answer: 21, since 10 + 11 = 21.", "21"),
    ("Answer: 21 because she picked 11 more", "21"),
    ("**Answer:** **21**", "21"),
    ("Answer: <strong>21</strong>", "21"),
    ("Answer: $21.", "21"),
    ("Answer: 21.", "21"),
    (r"Answer: \boxed{21}", "21"),
    ("The answer is 1,234 marbles; she counted twice.", "1234"),
    ("Answer: the total is 12 + 5 = 17 apples, because she picked 5", "17"),
    ("Answer: 17\n\nEnd with 'Answer: <number>'.", "17"),  # an echo after the answer: the answer stands
    ("12 + 5 = 17. End with 'Answer: <number>'.", "17"),  # no placeholder for the fallback either
    ("#### 21 eggs (7 x 3)", "21"),
    ("Answer: 2 + 3 = 5", "2 + 3 = 5"),  # mathematics continues the number: not 2 (math-verify reads it as 5)
    ("Answer: 42% of them", "42%"),
    ("The number 6 is the answer that is left over from the original 9.", "6"),  # named before the marker
])
def test_a_number_stated_with_units_and_a_clause_is_read(text, answer):
    found = extract_answer(text)
    assert found == answer
    assert V.equivalent(found, extract_label(answer))


@pytest.mark.parametrize("text, answer", [
    ("Omar has 10 - 10 = 0 dollars left.\nTherefore, Omar has 10 - 10", None),  # cut off by the token limit
    ("This is 12 + 12 = 24 passengers.\n\nTherefore", None),
    ("This is 12 + 12 = 24 passengers.\n\nThe answer is 24", "24"),  # a marker is read, cut off or not
    ("Maya picks 5 more apples. So she has 12 + 5 = 17 apples.", "17"),  # finished: the fallback reads it
    ("so -12", "-12"),  # one unfinished line: a short answer
    ("46 - 12 = 34. Number of passengers: 34\n\n", "34"),  # a line it ended (before a stop string): finished
])
def test_a_completion_cut_off_while_working_states_no_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text, answer", [
    # a list: options, steps or questions of its own, or different bare answers a line each
    ("a. 12.\nb. 18.\nc. 24.\n", None),
    ("a) 3,933 girls\nb) 3,943 boys\n", None),
    ("1. Omar has 40 dollars.\n2. He earns 2 dollars. So, 2 * 40 = 80 dollars in total.\n3. Omar earns 2 dollars.", None),
    ("1. Find the sides.\n2. Find the area.\n3.", None),
    ("Answers:\n2\n1\n(40, 3)", None),
    ("1. Maya has 5 apples.\n2. She picks 3 more.\n3. So she has 5 + 3 = 8 apples.", "8"),  # its last item concludes
    ("(a) 4 + 4 = 8", "8"),
    # the completion goes on past the statement that holds its last number
    ('Find it in the puzzle "A pen costs 3 dollars. How much does a pen cost?" in a conversation with you.', None),
    ("Total apples: 12 apples\nMaya's original apples = 4\nBy dividing them, Maya has an additional apple.", None),
    ("She has 50 - 18 = 6 dollars remaining. This is the answer.", "6"),  # only pointing back at it
    ("She has 12 + 5 = 17 apples. I hope it helps!", "17"),  # a courtesy
    ("She has 17 apples.\n\nLet me know if you have questions.", "17"),
    # a supposition that concludes nothing
    ("If there are 5 boxes, there are 6 eggs in 1 box.", None),
    ("If we add a box of 5 eggs, that would add 1.5 boxes, and the question is about boxes.", None),
    ("If we add 10 and 11, we get 21.", "21"),
    ("If she has 4 bags, 4 * 3 = 12 apples.", "12"),
    # a side remark relating two quantities
    ("The farmer has 4 more eggs than the average, which is 45% of the total eggs.", None),
    ("These 85 eggs are the same, which is 5 times more than the previous morning.", None),
    ("She has 12 + 5, which is 17 apples.", "17"),  # a quantity, not a relation
    ("Sara has 3 more apples than Tom.", "3"),  # no side remark
    ("So 45% of the eggs are kept.", "45%"),
])
def test_the_fallback_reads_only_a_result_the_completion_ends_on(text, answer):
    assert extract_answer(text) == answer
