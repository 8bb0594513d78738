"""Per-agent prompt formats: chat template for instruct models, plain / few-shot template for base models."""

import pytest

from corl.builtin.hf.backend.prompts import check_template, cut_at_stop, format_prompts
from corl.builtin.hf.models import zoo
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


#: Like many instruct templates (Qwen2.5's), it writes a default system prompt when given none.
DEFAULTING = ("{% if messages[0]['role'] != 'system' %}system:You are a helpful assistant.\n{% endif %}"
              "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}"
              "{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.fixture
def defaulting():
    tok = zoo.build_tokenizer()
    tok.chat_template = DEFAULTING
    return tok


def trl_render(tokenizer, messages):
    """What TRL's maybe_apply_chat_template does with a conversational prompt that ends in a user turn."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_a_conversational_row_is_rendered_as_trl_renders_it(defaulting):
    from corl.types import Prompt

    row = [{"role": "system", "content": "You are a tutor."}, {"role": "user", "content": "1+1?"},
           {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+3?"}]
    prompt = Prompt("p", "You are a tutor.\n\n2+3?", messages=tuple((m["role"], m["content"]) for m in row))
    (text,), special = format_prompts(defaulting, [prompt], "chat", system="ignored: the row has its own")
    assert text == trl_render(defaulting, row) and special is False
    # its system turn is kept as a system turn (not folded into the user's), so no default one is added
    assert text == ("system:You are a tutor.\nuser:1+1?\nassistant:2\nuser:2+3?\nassistant:")
    (raw,), _ = format_prompts(defaulting, [prompt], "raw", "Q: {prompt}")
    assert raw == "Q: You are a tutor.\n\n2+3?"  # a base model reads the flattened text


def test_the_agents_system_prompt_and_template_apply_only_where_the_row_leaves_room(defaulting):
    from corl.types import Prompt

    no_system = Prompt("p", "2+3?", messages=(("user", "2+3?"),))
    (text,), _ = format_prompts(defaulting, [no_system], "chat", "{prompt} Think.", system="Be brief.")
    assert text == trl_render(defaulting, [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "2+3? Think."}])
    (bare,), _ = format_prompts(defaulting, [no_system], "chat")
    assert bare == trl_render(defaulting, [{"role": "user", "content": "2+3?"}])  # the template's own default only
