"""Per-agent prompt formats: chat template for instruct models, plain / few-shot template for base models."""

import pytest

from corl.builtin.hf import zoo
from corl.builtin.hf.prompts import check_template, cut_at_stop, format_prompts
from corl.errors import CorlError

CHAT = ("{% if messages[0]['role'] == 'system' %}<bos>S:{{ messages[0]['content'] }}\n{% endif %}"
        "{% for m in messages if m['role'] == 'user' %}<bos>U:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}A:{% endif %}")


@pytest.fixture
def tokenizers():
    base = zoo.build_tokenizer()
    chat = zoo.build_tokenizer()
    chat.chat_template = CHAT
    return base, chat


def test_chat_format_wraps_the_template_filled_text_as_a_user_turn(tokenizers):
    _, chat = tokenizers
    texts, special = format_prompts(chat, ["2+3"], "auto", "Q {prompt}", system="be brief")
    assert texts == ["<bos>S:be brief\n<bos>U:Q 2+3\nA:"] and special is False  # the template writes BOS


def test_raw_format_is_the_template_with_special_tokens(tokenizers):
    base, chat = tokenizers
    few_shot = "Question: 1+1\nAnswer: 2\n\nQuestion: {prompt}\nAnswer:"
    for tok in (base, chat):  # raw ignores a chat template; auto without one is raw
        fmt = "raw" if tok is chat else "auto"
        texts, special = format_prompts(tok, ["2+3", "4+5"], fmt, few_shot)
        assert texts == [few_shot.format(prompt="2+3"), few_shot.format(prompt="4+5")] and special is True


def test_same_prompt_text_reaches_every_format(tokenizers):
    base, chat = tokenizers
    (raw,), _ = format_prompts(base, ["Maya has 3 apples."], "raw", "Question: {prompt}\nAnswer:")
    (wrapped,), _ = format_prompts(chat, ["Maya has 3 apples."], "chat")
    assert "Maya has 3 apples." in raw and "Maya has 3 apples." in wrapped and raw != wrapped


def test_chat_without_a_template_is_a_one_line_error(tokenizers):
    base, _ = tokenizers
    with pytest.raises(CorlError, match="agent 'x': prompt_format = 'chat' but the tokenizer has no chat template"):
        format_prompts(base, ["1"], "chat", who="agent 'x'")


@pytest.mark.parametrize("bad", ["no field", "{prompt} {other}", "{prompt", "{}"])
def test_templates_need_exactly_the_prompt_field(bad):
    with pytest.raises(ValueError, match=r"only field is \{prompt\}"):
        check_template(None, None, bad)
    check_template(None, None, "Q: {prompt} {{literal}}")


def test_cut_at_stop():
    assert cut_at_stop("12 + 5 = 17. Answer: 17\n\nQuestion: Sam has", ["Question:"]) == "12 + 5 = 17. Answer: 17\n\n"
    assert cut_at_stop("Answer: 3", ["Question:", "\n\n\n"]) == "Answer: 3"
    assert cut_at_stop("a\n\n\nb Question:", ["Question:", "\n\n\n"]) == "a"
