import json
import re
from pathlib import Path

import attrs
import pytest

from corl.builtin.tasks.data import DataConfig, DataTask, Reader
from corl.builtin.tasks.files import BadRow, read_rows
from corl.builtin.tasks.verifiers import MathVerifier
from corl.context import Context
from corl.errors import ConfigError, CorlError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import load_recipe
from corl.types import Prompt
from tests.kit import ROOT


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def ctx_for(recipe: Path | str) -> Context:
    return Context(spec=attrs.make_class("Spec", {"source": attrs.field()})(str(recipe)), seed=0, log=lambda m: None)


@pytest.fixture
def gsm(tmp_path):
    write_jsonl(tmp_path / "data" / "train.jsonl", [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
        {"question": "Unlabeled question"},
    ])
    write_jsonl(tmp_path / "data" / "eval.jsonl", [
        {"question": "A crate holds 1,000 eggs; 2 crates?", "answer": "1000*2=2000\n#### 2,000"},
        "",  # blank lines are not rows
        {"question": "Half of 9?", "answer": "9/2 = \\boxed{\\frac{9}{2}}"},
    ])
    return tmp_path


def test_jsonl_splits_ids_templates_and_gsm8k_labels(gsm):
    config = DataConfig(train="data/train.jsonl", eval="data/eval.jsonl", template="Q: {prompt}\nA:")
    task = DataTask(config, ctx_for(gsm / "recipe.toml"))
    assert isinstance(task.verifier, MathVerifier)
    assert task.split("train") == (Prompt("train-1", "Q: Tom has 3 apples and buys 4. How many?\nA:", "7"),
                                   Prompt("train-2", "Q: Unlabeled question\nA:", None))
    assert [(p.id, p.label) for p in task.split("eval")] == [("eval-1", "2000"), ("eval-3", "\\frac{9}{2}")]
    assert task.split("seed") == () and task.skipped == {}
    # messages name a prompt by file and line (blank lines count: they are lines of the file)
    assert [p.origin for p in task.split("eval")] == [f"{gsm}/data/eval.jsonl:1", f"{gsm}/data/eval.jsonl:3"]


def test_a_reader_reads_the_first_rows_of_the_splits_asked_without_building_a_task(gsm):
    said = []
    reader = Reader(DataConfig(train="data/train.jsonl", eval="data/eval.jsonl"), str(gsm / "recipe.toml"), said.append)
    read = reader.read(("eval",), max_rows=1)
    assert [(p.id, p.label) for p in read["eval"]] == [("eval-1", "2000")] and read["train"] == read["seed"] == ()
    assert reader.rows_read == {"eval": 1} and reader.label_paths == {"eval-1": "hashes"} and said == []


def test_a_line_that_is_not_json_is_a_bad_row_in_its_place(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", ['{"question": "a"}', "{not json", "", '{"question": "b"}'])
    rows = list(read_rows("train", path))
    assert [line for line, _ in rows] == [1, 2, 4] and rows[0][1] == {"question": "a"}
    assert isinstance(rows[1][1], BadRow) and str(rows[1][1]).startswith("not JSON: ")


def test_relative_paths_follow_the_recipe_not_the_working_directory(gsm, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    task = DataTask(DataConfig(train="data/train.jsonl"), ctx_for(gsm / "recipe.toml"))
    assert len(task.split("train")) == 2
    with pytest.raises(CorlError, match=r"^task\.train: no such file: .*recipes/data/train\.jsonl$"):
        DataTask(DataConfig(train="data/train.jsonl"), ctx_for(gsm / "recipes" / "recipe.toml"))
    # A recipe given as a table has no folder: the working directory, or an absolute path.
    monkeypatch.chdir(gsm)
    assert len(DataTask(DataConfig(train="data/train.jsonl"), ctx_for("<recipe>")).split("train")) == 2
    assert len(DataTask(DataConfig(train=str(gsm / "data" / "train.jsonl")), None).split("train")) == 2


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"problem": ["1+1?", "Half of one?", "2+2?"],
                             "solution": ["\\boxed{2}", "It is \\boxed{\\dfrac12}.", "\\boxed{4}"]}),
                   tmp_path / "math.parquet")
    config = DataConfig(train="math.parquet", eval="math.parquet", prompt_field="problem",
                        answer_field="solution", limit=2)
    task = DataTask(config, ctx_for(tmp_path / "r.toml"))
    assert [(p.id, p.text, p.label) for p in task.split("eval")] == [("eval-1", "1+1?", "2"),
                                                                     ("eval-2", "Half of one?", "\\dfrac12")]
    assert task.verifier.equivalent(task.split("eval")[1].label, "0.5")
    assert task.split("eval")[1].origin == f"{tmp_path}/math.parquet row 2"
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(CorlError, match=r"^task\.train: cannot read .*bad\.parquet: "):
        DataTask(attrs.evolve(config, train="bad.parquet"), ctx_for(tmp_path / "r.toml"))


def test_integer_answers_and_limit(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(10)])
    task = DataTask(DataConfig(train="a.jsonl", seed="a.jsonl", answers="integer", limit=3), ctx_for(tmp_path / "r"))
    assert [(p.text, p.label) for p in task.split("seed")] == [("0+1=", 1), ("1+1=", 2), ("2+1=", 3)]
    assert task.verifier.extract("12") == 12 and task.verifier.extract("12 apples") is None
    write_jsonl(tmp_path / "a.jsonl", [{"question": "1+1=", "answer": "x"}])
    with pytest.raises(CorlError, match=r"a\.jsonl:1: no integer answer found in field 'answer': 'x'"):
        DataTask(DataConfig(train="a.jsonl", eval="a.jsonl", answers="integer"), ctx_for(tmp_path / "r"))


BAD_ROWS = [
    ('{"question": "ok", "answer": "1"}', None),
    ('{"question": "broken', r"not JSON: Unterminated string"),
    ('["a", "list"]', r"not a JSON object: \[\"a\", \"list\"\]"),
    ('{"prompt": "p", "answer": "1"}', r"missing field 'question' \(fields: prompt, answer\)"),
    ('{"question": "  ", "answer": "1"}', r"empty prompt in field 'question'"),
    ('{"question": "no label"}', r"missing field 'answer'; eval rows need answers"),
    ('{"question": "q", "answer": "the working is left to the reader as an exercise"}',
     r"no math answer found in field 'answer'"),  # (a word or short phrase is a text answer: "Evelyn")
]


@pytest.mark.parametrize("n", range(1, len(BAD_ROWS)))
def test_a_bad_row_is_an_error_naming_file_and_line(tmp_path, n, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data" / "train.jsonl", [{"question": "q"}])
    write_jsonl(tmp_path / "data" / "eval.jsonl", [BAD_ROWS[0][0], "", BAD_ROWS[n][0]])
    with pytest.raises(CorlError) as info:
        DataTask(DataConfig(train="data/train.jsonl", eval="data/eval.jsonl"), ctx_for(tmp_path / "r.toml"))
    message = str(info.value)
    assert message.startswith("data/eval.jsonl:3: ") and "\n" not in message
    assert re.search(BAD_ROWS[n][1], message), message


def test_train_rows_need_no_labels_but_need_prompts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "t.jsonl", [{"question": "no label"}, {"q": "x", "answer": "1"}])
    with pytest.raises(CorlError, match=r"^t\.jsonl:2: missing field 'question' \(fields: q, answer\)$"):
        DataTask(DataConfig(train="t.jsonl"), None)


def test_skip_mode_counts_and_reports_what_it_skips(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"question": "fine"}, "{oops", {"question": ""}, {"question": "also fine"}])
    write_jsonl(tmp_path / "eval.jsonl", [row for row, _ in BAD_ROWS])
    logged = []
    ctx = attrs.evolve(ctx_for(tmp_path / "r.toml"), log=logged.append)
    task = DataTask(DataConfig(train="train.jsonl", eval="eval.jsonl", on_bad_row="skip"), ctx)
    assert [p.id for p in task.split("train")] == ["train-1", "train-4"]
    assert [p.id for p in task.split("eval")] == ["eval-1"]
    assert task.skipped == {"train": 2, "eval": len(BAD_ROWS) - 1}
    assert len(logged) == 2 and logged[0].startswith("task.train: skipped 2 bad rows")
    assert "train.jsonl:2: not JSON" in logged[0]
    # limit counts prompts, not lines: skipped rows do not use it up
    task = DataTask(DataConfig(train="train.jsonl", on_bad_row="skip", limit=2), ctx)
    assert [p.id for p in task.split("train")] == ["train-1", "train-4"] and task.skipped == {"train": 2}


def test_missing_empty_and_unsupported_files(tmp_path):
    ctx = ctx_for(tmp_path / "r.toml")
    write_jsonl(tmp_path / "t.jsonl", [{"question": "q"}])
    with pytest.raises(CorlError, match=r"^task\.eval: no such file: .*nope\.jsonl$"):
        DataTask(DataConfig(train="t.jsonl", eval="nope.jsonl"), ctx)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(CorlError, match=r"^task\.train: .*empty\.jsonl has no prompts$"):
        DataTask(DataConfig(train="empty.jsonl"), ctx)
    write_jsonl(tmp_path / "skipped.jsonl", ["nope"])
    with pytest.raises(CorlError, match=r"skipped\.jsonl has no prompts"):
        DataTask(DataConfig(train="skipped.jsonl", on_bad_row="skip"), ctx)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"question": "ok"}\n{"question": "caf\xe9"}\n')
    with pytest.raises(CorlError, match=r"latin1\.jsonl:2: not UTF-8 text \(byte 18\)$"):
        DataTask(DataConfig(train="latin1.jsonl"), ctx)
    (tmp_path / "t.csv").write_text("question\nq\n")
    with pytest.raises(CorlError, match=r"unsupported file type '\.csv'; use \.jsonl or \.parquet"):
        DataTask(DataConfig(train="t.csv"), ctx)


@pytest.fixture(scope="module")
def registry():
    return build_registry(make_plugin_manager(autoload=False))


RECIPE = {
    "agents": [{"name": "a", "model": "zoo:llama-tiny"}, {"name": "b", "model": "zoo:qwen2-tiny"}],
    "voting": {"n_votes": 4, "n_train": 4},
    "task": {"type": "jsonl", "train": "data/train.jsonl", "eval": "data/eval.jsonl", "answers": "integer"},
}


def test_recipes_validate_the_task_table(registry):
    with pytest.raises(ConfigError) as info:  # zoo models warm-start on the seed file: without one, on nothing
        load_recipe(RECIPE, registry=registry)
    assert info.value.problems == tuple(
        f"<recipe>: agents[{i}].model: zoo:{name} needs a labeled seed split to warm-start on; the jsonl task has "
        'none: give task.seed = "FILE" (labeled rows) or a model folder' for i, name in enumerate(["llama-tiny",
                                                                                                 "qwen2-tiny"]))
    assert load_recipe(RECIPE, ["zoo.steps=0"], registry=registry).task.config.seed is None  # untrained: asked for
    spec = load_recipe(RECIPE, ["task.seed=data/seed.jsonl"], registry=registry)
    assert spec.task.type == "jsonl" and spec.task.config.train == "data/train.jsonl"
    assert spec.task.config.answers == "integer" and spec.task.config.seed == "data/seed.jsonl"
    with pytest.raises(ConfigError) as info:
        load_recipe(RECIPE, ["task.answers=roman", "task.template=Q: {question}", "task.trian=x", "task.limit=-1"],
                    registry=registry)
    assert sorted(info.value.problems) == [
        "<recipe>: task.answers: invalid value 'roman': valid are 'math', 'integer', 'tag:NAME' (e.g. 'tag:answer') "
        "or 'regex:PATTERN'",
        "<recipe>: task.limit: invalid value -1: must be >= 0",
        "<recipe>: task.template: invalid value 'Q: {question}': must be a format string whose only field is "
        "{prompt} (write {{ for a brace)",
        "<recipe>: task.trian: unknown key; valid keys here: answer_field, answers, eval, fallback_labels, image_field, "
        "limit, on_bad_row, prompt_field, seed, template, train",
    ]
    with pytest.raises(ConfigError, match=r"task\.train: missing required key"):
        load_recipe({**RECIPE, "task": {"type": "jsonl"}}, registry=registry)


def test_the_shipped_data_recipe_loads_its_sample_files(registry):
    spec = load_recipe(ROOT / "recipes" / "data_file.toml", registry=registry)
    task = DataTask(spec.task.config, Context(spec=spec, seed=0))
    sizes = {name: len(task.split(name)) for name in ("seed", "train", "eval")}
    assert sizes == {"seed": 2000, "train": 512, "eval": 200} and spec.eval.size <= sizes["eval"]
    texts = [{p.text for p in task.split(name)} for name in ("seed", "train", "eval")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert set("".join(p.text + str(p.label) for p in task.split("seed"))) <= set("0123456789+*=")
    p = task.split("eval")[0]
    assert task.verifier.extract(str(eval(p.text.rstrip("=")))) == p.label


def test_sample_files_give_labels_in_every_row():
    sample = "data/gsm8k_sample.jsonl"
    task = DataTask(DataConfig(train=sample, eval=sample), ctx_for(ROOT / "x.toml"))
    assert len(task.split("eval")) >= 40 and all(p.label.isdigit() for p in task.split("eval"))
    math = DataTask(DataConfig(train="data/math_sample.jsonl", eval="data/math_sample.jsonl", prompt_field="problem",
                               answer_field="solution"), ctx_for(ROOT / "x.toml"))
    labels = {p.label for p in math.split("eval")}
    assert len(math.split("eval")) >= 30 and r"\frac{\sqrt{3}}{2}" in labels and any("frac" in x for x in labels)


def test_saved_datasets_dataset_is_read_from_local_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"question": ["1+2=", "3+4=", "5+6="], "answer": ["#### 3", "#### 7", "#### 11"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "single"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "dict"))
    task = DataTask(DataConfig(train=str(tmp_path / "single"), eval=str(tmp_path / "dict") + "::test"))
    assert [p.text for p in task.split("train")] == rows["question"]
    assert [p.label for p in task.split("eval")] == ["3", "7", "11"]
    with pytest.raises(CorlError, match=r"is a DatasetDict: name one of its splits; its splits: train, test \(e\.g\. "
                                        r"task\.train = \".*dict::train\"\)$"):
        DataTask(DataConfig(train=str(tmp_path / "dict")))
    with pytest.raises(CorlError, match="not a dataset saved with save_to_disk"):
        DataTask(DataConfig(train=str(tmp_path)))


def test_image_field_names_image_files_relative_to_the_data(tmp_path):
    from PIL import Image

    (tmp_path / "img").mkdir()
    Image.new("RGB", (8, 8), (255, 0, 0)).save(tmp_path / "img" / "a.png")
    write_jsonl(tmp_path / "train.jsonl", [{"question": "count red", "image": "img/a.png"},
                                            {"question": "both", "image": ["img/a.png", "img/a.png"]}])
    task = DataTask(DataConfig(train="train.jsonl", image_field="image"), ctx_for(tmp_path / "r.toml"))
    first, second = task.split("train")
    assert first.images == (str(tmp_path / "img" / "a.png"),) and len(second.images) == 2
    assert DataTask(DataConfig(train="train.jsonl"), ctx_for(tmp_path / "r.toml")).split("train")[0].images == ()


@pytest.mark.parametrize("row, message", [
    ({"question": "q", "image": "nope.png"}, r"train\.jsonl:2: image 'nope\.png' \(field 'image'\): no such file .*nope\.png$"),
    ({"question": "q", "image": "text.png"}, r"train\.jsonl:2: image 'text\.png' \(field 'image'\): not an image: .*text\.png$"),
    ({"question": "q"}, r"train\.jsonl:2: missing image field 'image' \(fields: question\)$"),
    ({"question": "q", "image": 3}, r"train\.jsonl:2: field 'image' must name an image file"),
])
def test_an_unreadable_image_is_an_error_naming_file_line_and_image(tmp_path, row, message):
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    (tmp_path / "text.png").write_text("not pixels")
    write_jsonl(tmp_path / "train.jsonl", [{"question": "fine", "image": "ok.png"}, row])
    with pytest.raises(CorlError, match=message) as info:
        DataTask(DataConfig(train="train.jsonl", image_field="image"), ctx_for(tmp_path / "r.toml"))
    assert "\n" not in str(info.value)


def test_a_missing_split_of_a_saved_datasetdict_is_named_with_the_ones_there(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    rows = {"question": ["1+2="], "answer": ["#### 3"]}
    (tmp_path / "recipes").mkdir()
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "data" / "gsm8k"))
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "data" / "one"))
    monkeypatch.chdir(tmp_path)
    ctx = ctx_for(tmp_path / "recipes" / "r.toml")  # paths relative to the recipe, shown relative to the cwd
    with pytest.raises(CorlError) as info:
        DataTask(DataConfig(train="../data/gsm8k::train", eval="../data/gsm8k::validation"), ctx)
    assert str(info.value) == ("task.eval: data/gsm8k has no split 'validation'; its splits: train, test "
                               "(e.g. task.eval = \"../data/gsm8k::train\")")
    with pytest.raises(CorlError) as info:
        DataTask(DataConfig(train="../data/one::train"), ctx)
    assert str(info.value) == ("task.train: data/one is one saved Dataset, not a DatasetDict with splits; drop "
                               "'::train' (task.train = \"../data/one\")")


DOUBTFUL = [
    {"question": "q1", "answer": "3+4=7\n#### 7"},
    {"question": "q2", "answer": "She has 3+4 = 7 apples."},  # a GSM8K solution that lost its #### line
    {"question": "q3", "answer": "I do not know 5 things"},  # the fallback's last number: 5
    {"question": "q4", "answer": "N/A"},
    {"question": "q5", "answer": "See solution"},
]


def test_doubtful_labels_are_reported_per_file_and_dropped_or_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "train.jsonl", DOUBTFUL)
    write_jsonl(tmp_path / "test.jsonl", DOUBTFUL)
    said = []
    ctx = attrs.evolve(ctx_for(tmp_path / "r.toml"), log=said.append)
    task = DataTask(DataConfig(train="train.jsonl", eval="test.jsonl"), ctx)  # the default: drop
    assert [(p.id, p.label) for p in task.split("eval")] == [("eval-1", "7")]
    assert [(p.id, p.label) for p in task.split("train")] == [("train-1", "7")]
    assert said[-1] == (
        "task.eval: test.jsonl: 4 of 5 rows have doubtful labels: 2 labeled only by the fallback (the last mathematics "
        "in field 'answer': no <answer>, \\boxed{}, '####' or 'The answer is'); 2 with no answer (N/A, I do not know, "
        "...); dropped (task.fallback_labels = \"drop\"; \"keep\" keeps the fallback labels); first, by line: "
        "2 'She has 3+4 = 7 apples.' -> 7, 3 'I do not know 5 things' -> 5, 4 'N/A' -> no label")
    assert task.label_paths["eval-1"] == "hashes" and len(task.doubtful["eval"]) == 4

    said.clear()
    kept = DataTask(DataConfig(train="train.jsonl", eval="test.jsonl", fallback_labels="keep"), ctx)
    # the eval split keeps a fallback label only when told, and says so; a non-answer is never a label
    assert [(p.id, p.label) for p in kept.split("eval")] == [("eval-1", "7"), ("eval-2", "7"), ("eval-3", "5")]
    assert [(p.id, p.label) for p in kept.split("train")] == [
        ("train-1", "7"), ("train-2", "7"), ("train-3", "5"), ("train-4", None), ("train-5", None)]
    assert "; fallback labels kept (task.fallback_labels = \"keep\"), rows with no answer dropped; " in said[-1]
    assert said[-1].startswith("task.eval: test.jsonl: 4 of 5 rows")
    assert "rows with no answer kept unlabeled" in said[0] and said[0].startswith("task.train: train.jsonl:")


def test_a_train_file_of_fallback_labels_only_says_why_it_has_no_prompts(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", DOUBTFUL[1:3])
    with pytest.raises(CorlError, match=r"task\.train: .*train\.jsonl has no prompts \(2 rows dropped for their "
                                        r"labels: task\.fallback_labels = \"keep\" keeps those labeled by the fallback\)"):
        DataTask(DataConfig(train="train.jsonl"), ctx_for(tmp_path / "r.toml"))


def test_a_bad_fallback_labels_value_is_one_line_at_its_key(registry):
    with pytest.raises(ConfigError) as info:
        load_recipe(RECIPE, ["task.fallback_labels=maybe", "task.seed=data/seed.jsonl"], registry=registry)
    assert info.value.problems == ("<recipe>: task.fallback_labels: invalid value 'maybe'; valid: 'drop', 'keep'",)
