"""corl data preview: each agent's exact prompt string (chat template applied, a conversational row's
own turns), the label and how it was found, from the tokenizer alone: no weights, no warm-start."""

import json

import pytest

from corl.cli import main
from tests.kit import ROOT

TEMPLATE = ("{% if messages[0]['role'] != 'system' %}system:You are a helpful assistant.\n{% endif %}"
            "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.fixture
def no_weights(monkeypatch):
    """Loading any model's weights fails the test."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("corl data preview loaded model weights")

    for name in ("AutoModelForCausalLM", "AutoModelForImageTextToText"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", refuse)
        monkeypatch.setattr(getattr(transformers, name), "from_config", refuse)


@pytest.fixture
def chat_model(tmp_path):
    """A model folder with a chat template (its config and tokenizer only: there are no weights to load)."""
    from transformers import LlamaConfig

    from corl.builtin.hf.models import zoo

    folder = tmp_path / "chat-model"
    tokenizer = zoo.build_tokenizer(zoo.CHARS + zoo.EXTRA_CHARS)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2).save_pretrained(folder)
    return folder


def test_preview_shows_each_agents_exact_string_label_and_path(tmp_path, chat_model, no_weights, capsys, monkeypatch):
    monkeypatch.setenv("CORL_CACHE_DIR", str(tmp_path / "cache"))
    recipe = tmp_path / "r.toml"
    recipe.write_text(f"""
[task]
type = "jsonl"
train = "{ROOT}/data/trl_sample.jsonl"
eval = "{ROOT}/data/trl_sample.jsonl"
seed = "{ROOT}/data/trl_sample.jsonl"
prompt_field = "prompt"
answer_field = "solution"

[[agents]]
name = "chat"
model = "{chat_model}"
system_prompt = "Not used: the rows have their own system turn."

[[agents]]
name = "tiny"
model = "zoo:llama-tiny"

[topology]
type = "ring"
""")
    assert main(["data", "preview", str(recipe), "--rows", "2", "--split", "eval", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in (ROOT / "data" / "trl_sample.jsonl").read_text().splitlines()[:2]]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    expected = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    assert out["agents"]["chat"]["rendered"] == expected  # as TRL renders a conversational prompt
    assert expected[0].startswith("system:You are a careful mathematician.")  # the row's own system turn
    assert out["agents"]["tiny"]["rendered"][0] == "\n\n".join(m["content"] for m in rows[0]["prompt"])  # raw: flattened
    assert [(p["label"], p["label_path"]) for p in out["prompts"]] == [("(3, 4)", "whole"), ("2^{10}", "whole")]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))  # no warm-start

    assert main(["data", "preview", str(recipe), "--rows", "1"]) == 0
    text = capsys.readouterr().out
    assert "trl_sample.jsonl:1: label (3, 4) (found by: whole)\n----\n" + expected[0] + "\n----\n" in text
    assert "== agent chat (hf, " in text and "== agent tiny (hf, zoo:llama-tiny) ==" in text


def test_preview_mistakes_are_one_line(tmp_path, capsys):
    assert main(["data", "preview", str(ROOT / "recipes" / "data_file.toml"), "--rows", "0"]) == 2
    assert capsys.readouterr().err.strip() == "corl: error: --rows 0: must be at least 1"
    assert main(["data", "preview", str(ROOT / "recipes" / "data_file.toml"), "--set", "task.prompt_field=q"]) == 2
    assert capsys.readouterr().err.strip() == "corl: error: data/arith_seed.jsonl:1: missing field 'q' (fields: question, answer)"
