"""The data layouts people bring, each end to end: the sample files under data/ (written by
scripts/make_layout_samples.py) validated as a recipe's [task], read into splits, and run."""

import json

import pytest

from corl.builtin.tasks.data import DataConfig, DataTask
from corl.builtin.tasks.verifiers import MathVerifier
from corl.context import Context
from corl.errors import CorlError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.testing import fake_recipe, run_tiny
from tests.kit import ROOT

pytest.importorskip("pyarrow")

SYSTEM = "You are a careful mathematician. Reason step by step and put the final answer in \\boxed{}."
MATH500_ANSWERS = [r"\left( 3, \frac{\pi}{2} \right)", r"\frac{1}{2}", r"\dfrac{9}{7}", r"2\sqrt{3}", "x^2+1", "(3, 4)",
                   "2^{10}", r"[2, 5) \cup (5, \infty)", "1, 3", "Evelyn"]

# layout: (its [task] keys, the labels its rows give, how its first prompt begins)
LAYOUTS = {
    "math500": ({"train": "data/math500_sample.jsonl", "prompt_field": "problem", "answer_field": "answer"},
                MATH500_ANSWERS, "Convert the point $(0,3)$"),
    "chat_messages": ({"train": "data/chat_sample.jsonl", "prompt_field": "messages", "answer_field": "messages"},
                      [r"\left( 3, \frac{\pi}{2} \right)", r"\frac{1}{2}", r"\dfrac{9}{7}", r"2\sqrt{3}", "x^2+1"],
                      f"{SYSTEM}\n\nConvert the point"),
    "trl_conversational": ({"train": "data/trl_sample.jsonl", "prompt_field": "prompt", "answer_field": "solution"},
                           MATH500_ANSWERS[5:], f"{SYSTEM}\n\nWhat is the vertex"),
    "verl": ({"train": "data/verl_sample.parquet", "prompt_field": "prompt",
              "answer_field": "reward_model.ground_truth"},
             ["72", "10", "5", "624", *MATH500_ANSWERS[:4]], "Natalia sold clips"),
    "gsm8k": ({"train": "data/gsm8k_sample.jsonl"}, None, "Natalia sold clips"),
    "math": ({"train": "data/math_sample.jsonl", "prompt_field": "problem", "answer_field": "solution"}, None,
             "Compute $\\frac{1}{6}"),
}


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


def task_table(layout: str) -> dict:
    keys, _, _ = LAYOUTS[layout]
    return {"type": "jsonl", **keys, "eval": keys["train"]}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_validates_and_reads_into_labeled_splits(layout, registry):
    # a zoo model warm-starts on the labeled seed split: these files are labeled, so each is its own seed
    recipe = {"agents": [{"name": "a", "model": "zoo:llama-tiny"}], "topology": {"type": "self"},
              "task": {**task_table(layout), "seed": LAYOUTS[layout][0]["train"]}}
    spec = load_recipe(recipe, registry=registry, source=str(ROOT / "recipe.toml"))
    task = DataTask(spec.task.config, Context(spec=spec, seed=0))
    _, labels, begins = LAYOUTS[layout]
    evals = task.split("eval")
    assert evals[0].text.startswith(begins) and all(p.label is not None for p in evals)
    if labels is not None:
        assert [p.label for p in evals] == labels
    assert [p.text for p in task.split("train")] == [p.text for p in evals]


def test_the_bare_answer_column_and_the_boxed_solution_agree():
    # MATH-500 holds both: the labels from `answer` (no marker) and from `solution` (\boxed{}) are one answer
    verifier = MathVerifier()
    keys = {"train": "data/math500_sample.jsonl", "eval": "data/math500_sample.jsonl", "prompt_field": "problem"}
    bare = DataTask(DataConfig(**keys, answer_field="answer"), Context(spec=_Spec(), seed=0)).split("eval")
    boxed = DataTask(DataConfig(**keys, answer_field="solution"), Context(spec=_Spec(), seed=0)).split("eval")
    assert all(verifier.equivalent(b.label, a.label) for a, b in zip(bare, boxed))


class _Spec:
    source = str(ROOT / "recipe.toml")


@pytest.mark.parametrize("layout", ["verl", "chat_messages", "trl_conversational", "math500"])
def test_each_layout_runs_end_to_end(layout, tmp_path):
    recipe = fake_recipe(agents=2, **{"run.prompts_per_step": 4, "run.steps": 2, "eval.size": 4})
    recipe["task"] = {k: str(ROOT / v) if k in ("train", "eval") else v for k, v in task_table(layout).items()}
    summary = run_tiny(tmp_path, recipe)
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2] and summary["eval_prompts"] == 4
    # every train prompt has its label: monitoring metrics are computed
    assert all("label_accuracy" in m for r in train for m in r["agents"].values())


FIELD_ERRORS = [
    ({"answer_field": "reward_model"}, "verl_sample.parquet:1: field 'reward_model' is a table, not an answer (text or a "
     "number); name the key that holds it: 'reward_model.style', 'reward_model.ground_truth'"),
    ({"answer_field": "reward_model.truth"}, "verl_sample.parquet:1: missing field 'reward_model.truth'; eval rows need "
     "answers (fields of 'reward_model': style, ground_truth)"),
    ({"prompt_field": "reward_model"}, "verl_sample.parquet:1: field 'reward_model' is a table, not text or a list of "
     "chat messages"),
    ({"prompt_field": "prompt.content"}, "verl_sample.parquet:1: field 'prompt.content': 'prompt' is a list, not a table"),
    ({"prompt_field": "question"}, "verl_sample.parquet:1: missing field 'question' (fields: data_source, prompt, "
     "ability, reward_model, extra_info)"),
]


@pytest.mark.parametrize("change, message", FIELD_ERRORS)
def test_a_field_that_is_not_what_the_task_needs_is_one_line_naming_file_line_and_field(change, message):
    keys = {"train": "data/verl_sample.parquet", "eval": "data/verl_sample.parquet", "prompt_field": "prompt",
            "answer_field": "reward_model.ground_truth", **change}
    with pytest.raises(CorlError) as info:
        DataTask(DataConfig(**keys), Context(spec=_Spec(), seed=0))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("messages, message", [
    ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
     "field 'messages' is a conversation without a user turn (roles: system, assistant)"),
    ([{"role": "user", "content": {"text": "q"}}], "field 'messages': message 0 ('user') has no text content"),
    ([{"role": "user", "content": "q"}], "field 'messages' has no assistant turn; eval rows need answers"),
])
def test_conversations_the_task_cannot_use(tmp_path, messages, message):
    (tmp_path / "c.jsonl").write_text(json.dumps({"messages": messages}) + "\n")
    with pytest.raises(CorlError, match=r"c\.jsonl:1: " + message.replace("(", r"\(").replace(")", r"\)")):
        DataTask(DataConfig(train="c.jsonl", eval="c.jsonl", prompt_field="messages", answer_field="messages"),
                 Context(spec=type("S", (), {"source": str(tmp_path / "r.toml")})(), seed=0))


def test_content_parts_and_a_key_holding_a_dot(tmp_path):
    row = {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many? "},
                                                    {"type": "text", "text": "Count."}]}],
           "meta.answer": "7", "meta": {"answer": "8"}}
    (tmp_path / "p.jsonl").write_text(json.dumps(row) + "\n")
    task = DataTask(DataConfig(train="p.jsonl", eval="p.jsonl", prompt_field="prompt", answer_field="meta.answer"),
                    Context(spec=type("S", (), {"source": str(tmp_path / "r.toml")})(), seed=0))
    assert (task.split("eval")[0].text, task.split("eval")[0].label) == ("How many? Count.", "7")


def test_a_conversational_prompt_keeps_its_turns_for_the_chat_template():
    from corl.builtin.tasks.data import DataConfig, DataTask

    task = DataTask(DataConfig(train="data/trl_sample.jsonl", eval="data/trl_sample.jsonl", prompt_field="prompt",
                               answer_field="solution", template="{prompt}\nBe exact."), Context(spec=_Spec(), seed=0))
    first = task.split("eval")[0]
    assert [role for role, _ in first.messages] == ["system", "user"]  # the system turn stays a system turn
    assert first.messages[0][1].startswith("You are a careful mathematician.")
    assert first.messages[1][1].endswith("Enter your answer as an ordered pair.\nBe exact.")  # the task template
    assert first.text.startswith("You are a careful mathematician.") and first.text.endswith("\nBe exact.")
    chat = DataTask(DataConfig(train="data/chat_sample.jsonl", prompt_field="messages", answer_field="messages"), Context(spec=_Spec(), seed=0))
    assert all(p.messages[-1][0] == "user" for p in chat.split("train"))  # the reference answer's turn is not shown
    plain = DataTask(DataConfig(train="data/gsm8k_sample.jsonl"), Context(spec=_Spec(), seed=0))
    assert plain.split("train")[0].messages == ()


# -- corl validate: the first rows of each file, checked as the run reads them ------------------------


def validate_data(task: dict, rows: int = 50) -> list[str]:
    from corl.recipe.validate import data_problems

    registry = build_registry(make_plugin_manager(autoload=False))
    recipe = {"agents": [{"name": "a", "model": "HuggingFaceTB/SmolLM2-360M-Instruct"}], "topology": {"type": "self"},
              "task": task}
    return data_problems(load_recipe(recipe, registry=registry, source=str(ROOT / "recipe.toml")), registry, rows)


def run_error(task: dict) -> str:
    """What building the task says (the run builds it before any model loads)."""
    with pytest.raises(CorlError) as info:
        DataTask(DataConfig(**{k: v for k, v in task.items() if k != "type"}), Context(spec=_Spec(), seed=0))
    return str(info.value)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_validate_catches_a_missing_file_and_a_wrong_field_in_every_layout(layout):
    table = task_table(layout)
    assert validate_data(table) == []
    missing = {**table, "train": "data/missing.jsonl"}
    assert validate_data(missing) == [run_error(missing)] == ["task.train: no such file: data/missing.jsonl"]
    wrong_prompt = {**table, "prompt_field": "questoin"}
    (train, evals) = validate_data(wrong_prompt)
    assert train == evals == run_error(wrong_prompt)  # the same file: the same line the run gives
    assert train.startswith(f"{table['train']}:1: missing field 'questoin' (fields: ")  # file and line (or row)
    wrong_answer = {**table, "answer_field": "solutoin"}
    (line,) = validate_data(wrong_answer)  # train rows need no answer; eval rows do
    assert line == run_error(wrong_answer) and "missing field 'solutoin'; eval rows need answers (fields" in line


def test_validate_reads_dotted_paths_chat_messages_and_images(tmp_path):
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    rows = [{"prompt": [{"role": "user", "content": "count"}], "reward_model": {"ground_truth": "3"}, "image": "ok.png"},
            {"prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "3"}, "image": "gone.png"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"type": "jsonl", "train": str(tmp_path / "rows.jsonl"), "prompt_field": "prompt",
            "answer_field": "reward_model.ground_truth", "image_field": "image"}
    assert validate_data(task, rows=1) == []  # only the first row read
    (line,) = validate_data(task)
    assert line.endswith("rows.jsonl:2: field 'prompt' is a conversation without a user turn (roles: system)")
    assert validate_data({**task, "answer_field": "reward_model.truth", "eval": task["train"]}, rows=1) == [
        f"{tmp_path}/rows.jsonl:1: missing field 'reward_model.truth'; eval rows need answers (fields of "
        "'reward_model': ground_truth)"]
    rows[0]["image"] = "gone.png"
    (tmp_path / "rows.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (line,) = validate_data(task)
    assert line.endswith("rows.jsonl:1: image 'gone.png' (field 'image'): no such file " + str(tmp_path / "gone.png"))


def test_validate_checks_a_saved_datasetdict_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"question": ["1+2="], "answer": ["#### 3"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "gsm8k"))
    assert validate_data({"type": "jsonl", "train": f"{tmp_path}/gsm8k::train"}) == []
    (line,) = validate_data({"type": "jsonl", "train": f"{tmp_path}/gsm8k::test"})
    assert line.startswith("task.train: ") and "has no split 'test'; its splits: train" in line
