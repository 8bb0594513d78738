"""Per-agent prompt formats: the same task text reaches every agent, each in its own format.

* ``chat``: the text (through ``prompt_template``) as one user turn, with an optional system turn,
  rendered by the tokenizer's chat template with the generation prompt (instruct models).
* ``raw``: ``prompt_template`` filled with the text, as plain text (base models; the template may
  hold few-shot examples, e.g. ``"Question: 2+3?\\nAnswer: 5\\n\\nQuestion: {prompt}\\nAnswer:"``).
* ``auto``: chat when the tokenizer has a chat template, else raw.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from corl.errors import CorlError


def check_template(instance, attribute, value: str) -> None:
    """attrs validator: a format string whose only field is ``{prompt}``."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
    except ValueError:  # an unmatched brace
        fields = []
    if set(fields) != {"prompt"}:
        raise ValueError("must be a format string whose only field is {prompt} (write {{ and }} for braces)")


def uses_chat(tokenizer, prompt_format: str) -> bool:
    return prompt_format == "chat" or (prompt_format == "auto" and bool(tokenizer.chat_template))


def format_prompts(tokenizer, texts: Sequence[str], prompt_format: str = "auto", template: str = "{prompt}",
                   system: str | None = None, who: str = "agent") -> tuple[list[str], bool]:
    """The strings to tokenize and whether the tokenizer should add its special tokens (BOS).

    A chat template writes its own BOS, so chat strings are tokenized without special tokens.
    """
    filled = [template.format(prompt=t) for t in texts]
    if not uses_chat(tokenizer, prompt_format):
        return filled, True
    if not tokenizer.chat_template:
        raise CorlError(f"{who}: prompt_format = 'chat' but the tokenizer has no chat template; "
                        "use prompt_format = 'raw' with a prompt_template")
    head = [{"role": "system", "content": system}] if system else []
    return [tokenizer.apply_chat_template([*head, {"role": "user", "content": t}], tokenize=False,
                                          add_generation_prompt=True) for t in filled], False


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first stop string (which the model may have begun to write)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]
