"""Per-agent prompt formats: the same task text reaches every agent, each in its own format.

* ``chat``: the text (through ``prompt_template``) as one user turn, with an optional system turn,
  rendered by the tokenizer's chat template with the generation prompt (instruct models). A
  conversational row (:attr:`corl.types.Prompt.messages`) is rendered as TRL's
  ``maybe_apply_chat_template`` renders it: its own turns passed to the template as they are, with
  ``add_generation_prompt``; ``prompt_template`` fills its last user turn and ``system_prompt`` is
  added only when the row has no system turn of its own. The template alone decides what else to
  write (a default system prompt of its own when it is given none, as under TRL).
* ``raw``: ``prompt_template`` filled with the text, as plain text (base models; the template may
  hold few-shot examples, e.g. ``"Question: 2+3?\\nAnswer: 5\\n\\nQuestion: {prompt}\\nAnswer:"``).
* ``auto``: chat when the tokenizer has a chat template, else raw.

An agent's ``chat_template`` (inline Jinja, or a file relative to the recipe) replaces its
tokenizer's own: :func:`use_chat_template` sets it on the tokenizer, so the sampler, the update,
``corl data preview`` and the saved checkpoints all render with it.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from corl.errors import CorlError
from corl.types import Prompt

_JINJA = ("{%", "{{")  # what makes a chat_template value a template rather than a file path


def check_template(instance, attribute, value: str) -> None:
    """attrs validator: a format string whose only field is ``{prompt}``."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
    except ValueError:  # an unmatched brace
        fields = []
    if set(fields) != {"prompt"}:
        raise ValueError("must be a format string whose only field is {prompt} (write {{ and }} for braces)")


def check_chat_template(instance, attribute, value: str) -> None:
    """attrs validator of ``chat_template``: inline Jinja must compile (a file is read, and checked, where
    the recipe's folder is known: :func:`chat_template_text`)."""
    if any(mark in value for mark in _JINJA):
        _compile(value)
    elif not value.strip():
        raise ValueError("is empty; give a Jinja template or the path of a template file")


def _compile(template: str) -> None:
    import jinja2

    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        why = str(exc.message).splitlines()[0].replace(": ", " - ")  # (a recipe error line is cut at ': ')
        raise ValueError(f"is not a valid Jinja template (line {exc.lineno} of the template, {why})") from None


def chat_template_text(value: str | None, recipe: str | None, who: str) -> str | None:
    """The Jinja text of a ``chat_template`` value: inline, or read from a file relative to the recipe
    file ``recipe`` (the working directory for a recipe given as a table)."""
    if value is None or any(mark in value for mark in _JINJA):
        return value
    from pathlib import Path

    base = Path(recipe).parent if recipe and not recipe.startswith("<") else Path.cwd()
    path = base / Path(value).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise CorlError(f"{who}: chat_template {value!r}: cannot read {path} ({exc.strerror or exc})") from None
    try:
        _compile(text)
    except ValueError as exc:
        raise CorlError(f"{who}: chat_template {path} {exc}") from None
    return text


def use_chat_template(tokenizer, template: str | None) -> None:
    """Make ``template`` (when given) the tokenizer's chat template."""
    if template is not None:
        tokenizer.chat_template = template


def uses_chat(tokenizer, prompt_format: str) -> bool:
    return prompt_format == "chat" or (prompt_format == "auto" and bool(tokenizer.chat_template))


def format_prompts(tokenizer, prompts: Sequence[str | Prompt], prompt_format: str = "auto",
                   template: str = "{prompt}", system: str | None = None,
                   who: str = "agent") -> tuple[list[str], bool]:
    """The strings to tokenize (one per prompt: a text, or a :class:`~corl.types.Prompt` whose
    conversation a chat-format agent renders) and whether the tokenizer should add its special
    tokens (BOS). A chat template writes its own BOS, so chat strings are tokenized without them."""
    if not uses_chat(tokenizer, prompt_format):
        return [template.format(prompt=_text(p)) for p in prompts], True
    if not tokenizer.chat_template:
        raise CorlError(f"{who}: prompt_format = 'chat' but the tokenizer has no chat template; "
                        "use prompt_format = 'raw' with a prompt_template")
    return [tokenizer.apply_chat_template(chat_messages(p, template, system), tokenize=False,
                                          add_generation_prompt=True) for p in prompts], False


def chat_messages(prompt: str | Prompt, template: str = "{prompt}", system: str | None = None) -> list[dict[str, str]]:
    """The messages a chat template gets for ``prompt``: a row's own conversation as it is (its last
    user turn through ``template``; ``system`` only when it has no system turn), else the text as one
    user turn after ``system``."""
    turns = list(prompt.messages) if isinstance(prompt, Prompt) else []
    if not turns:
        head = [{"role": "system", "content": system}] if system else []
        return [*head, {"role": "user", "content": template.format(prompt=_text(prompt))}]
    *before, (role, last) = turns
    messages = [{"role": r, "content": c} for r, c in before] + [{"role": role, "content": template.format(prompt=last)}]
    if system and not any(r == "system" for r, _ in turns):
        messages.insert(0, {"role": "system", "content": system})
    return messages


def _text(prompt: str | Prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt.text


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first stop string (which the model may have begun to write)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]
