"""Vision-language agents: transformers image-text-to-text models behind the ``hf`` agent and sampler.

The ``hf`` agent becomes a :class:`VisionAgent` when its model is a vision-language model (a
``zoo:`` name of :mod:`corl.vision_zoo`, or a model whose config has a ``vision_config``: LLaVA,
Idefics3 / SmolVLM, Qwen2-VL, ...). Prompts go through the model's own processor and chat template
(``{"type": "image"}`` parts, then the text), one prompt at a time, so every row keeps its own image
inputs (``pixel_values`` and whatever else the processor makes). Those inputs travel with the
rollout and go to ``generate`` and to the training forward pass alike, so the sampling-time
log-probs and the recomputed ones score the same thing.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from corl.builtin.hf import HFAgentConfig, HFSamplerConfig, SampleBatch, zoo_config_for
from corl.errors import CorlError
from corl.types import Prompt, Rollout

TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
#: Config keys of placeholder tokens the processor expands; sampling never emits them.
MEDIA_TOKEN_KEYS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                    "vision_end_token_id", "boi_token_id", "eoi_token_id")


def is_vision_model(source: str, trust_remote_code: bool = False) -> bool:
    """True when ``source`` (a recipe's ``model``) names an image-text-to-text model."""
    if source.startswith("zoo:"):
        from corl import vision_zoo

        return source[4:] in vision_zoo.FAMILIES
    if source.startswith(("pypi:", "gguf:")):  # the packaged and GGUF models are text models
        return False
    path = Path(source).expanduser()
    if path.is_dir():
        try:
            return "vision_config" in json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            return False  # the text agent reports the bad folder
    if source.startswith((".", "/", "~")):
        return False
    try:  # a hub id, where a hub is reachable
        from transformers import AutoConfig

        return hasattr(AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code), "vision_config")
    except Exception:  # noqa: BLE001 - unreachable or unknown: the text agent gives the message
        return False


def load_image(item: Any):
    """An RGB PIL image from a PIL image or an image file path; a bad file is a one-line error."""
    from PIL import Image, UnidentifiedImageError

    if hasattr(item, "convert"):
        return item if item.mode == "RGB" else item.convert("RGB")
    try:
        with Image.open(item) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise CorlError(f"image {item}: no such file") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise CorlError(f"image {item}: not a readable image ({type(exc).__name__})") from None


def collate(rows: Sequence[dict]) -> dict:
    """Per-row image inputs as one batch: each key concatenated along dim 0, in row order.

    That one rule fits both layouts: per-image tensors (LLaVA ``[1, C, H, W]``, Idefics3
    ``[1, N, C, H, W]``) and flattened patches (Qwen2-VL ``[patches, dim]`` with
    ``image_grid_thw``). Rows whose image tensors differ in shape beyond dim 0 (Idefics3 with
    different numbers of image tiles) are zero-padded, which is how its processor pads a batch.
    """
    import torch

    out = {}
    for key in dict.fromkeys(k for row in rows for k in row):
        parts = [row[key] for row in rows if key in row]
        if len({p.shape[1:] for p in parts}) > 1:
            widest = [max(p.shape[d] for p in parts) for d in range(1, parts[0].dim())]
            parts = [torch.nn.functional.pad(p, [x for d in reversed(range(1, p.dim()))
                                                 for x in (0, widest[d - 1] - p.shape[d])]) for p in parts]
        out[key] = torch.cat(parts)
    return out


def encode_prompts(processor, prompts: Sequence[Prompt], chat: bool, suffixes: Sequence[list[int]] | None = None):
    """Token ids (unpadded) and image inputs of each prompt, through the processor.

    ``chat`` wraps each prompt as a user turn (image parts, then the text) with the processor's chat
    template; otherwise the text follows one image token per image. ``suffixes`` (warm-start) are
    extra token ids appended to each prompt.
    """
    ids, images = [], []
    token = getattr(processor, "image_token", None) or "<image>"
    for i, prompt in enumerate(prompts):
        pictures = [load_image(item) for item in prompt.images]
        if chat:
            content = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": prompt.text}]
            text = processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = token * len(pictures) + prompt.text
        kwargs = {"images": [pictures]} if pictures else {}
        # A chat template writes its own BOS; raw text gets the tokenizer's special tokens.
        out = processor(text=[text], return_tensors="pt", add_special_tokens=not chat, **kwargs)
        row = out["input_ids"][0].tolist()
        ids.append(row + list(suffixes[i]) if suffixes is not None else row)
        images.append({k: v for k, v in out.items() if k not in TEXT_KEYS})
    return ids, images


def left_pad(rows: Sequence[Sequence[int]], pad: int):
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


@attrs.frozen
class VisionSampleBatch(SampleBatch):
    """A :class:`SampleBatch` plus each row's image inputs (``images[row]``, a dict of tensors)."""

    images: tuple = ()


class VisionAgent:
    """An image-text-to-text model with its processor; the ``hf`` agent for vision-language models."""

    def __init__(self, config: HFAgentConfig, ctx):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.name, self.config = ctx.agent_name, config
        source = config.model
        if source.startswith("zoo:"):
            from corl import vision_zoo

            zoo_config = zoo_config_for(config, ctx.spec.zoo)
            source = str(vision_zoo.resolve(source[4:], ctx.task.split("seed"), zoo_config, log=ctx.log))
        try:
            remote = config.trust_remote_code
            self.processor = AutoProcessor.from_pretrained(source, trust_remote_code=remote)
            self.model = AutoModelForImageTextToText.from_pretrained(source, dtype=getattr(torch, config.dtype),
                                                                     trust_remote_code=remote)
            self.model.to(config.device)
        except (OSError, ValueError, ImportError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
            raise CorlError(f"agent {self.name!r}: cannot load vision-language model {config.model!r}{offline}: "
                            f"{first}") from None
        tok = self.tokenizer = self.processor.tokenizer
        tok.padding_side = "left"
        if config.pad_token is not None:
            tok.pad_token = config.pad_token
        if tok.pad_token_id is None:
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no pad token; set "
                            f"pad_token in that agent's table" + (f" (its EOS token is {tok.eos_token!r})" if tok.eos_token else ""))
        if tok.eos_token_id is None:
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no EOS token")
        template = getattr(self.processor, "chat_template", None)
        if config.prompt_format == "chat" and not template:
            raise CorlError(f"agent {self.name!r}: prompt_format = 'chat' but the processor has no chat template")
        self.chat = config.prompt_format == "chat" or (config.prompt_format == "auto" and bool(template))
        # Qwen2-VL-style multimodal RoPE computes its own 3-D positions from the image grid.
        self.explicit_positions = not hasattr(getattr(self.model, "model", self.model), "get_rope_index")
        # A sampled image placeholder would ask the model for an image it was never given.
        config_ = self.model.config
        self.media_tokens = sorted({t for key in MEDIA_TOKEN_KEYS
                                    if isinstance(t := getattr(config_, key, None), int)})
        self.model.eval()  # no dropout: training log-probs must match sampling ones
        self.reference = None

    def encode(self, prompts: Sequence[Prompt]):
        """Left-padded ``input_ids`` / ``attention_mask`` and each prompt's image inputs."""
        ids, images = encode_prompts(self.processor, prompts, self.chat)
        input_ids, mask = left_pad(ids, self.tokenizer.pad_token_id)
        return input_ids, mask, images

    def parameters(self):
        return self.model.parameters()

    def freeze_reference(self) -> None:
        self.reference = copy.deepcopy(self.model).requires_grad_(False).eval()

    def forward_inputs(self, input_ids, attention_mask, images: Sequence[dict]) -> dict:
        """Keyword arguments of the model's forward / generate for these rows."""
        import torch

        device = self.model.device
        extra = {k: v.to(device) for k, v in collate(images).items()}
        if "pixel_values" in extra:
            extra["pixel_values"] = extra["pixel_values"].to(getattr(torch, self.config.dtype))
        return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device), **extra}

    def token_logprobs(self, batch: VisionSampleBatch, rows, *, reference: bool = False):
        import torch

        model = self.reference if reference else self.model
        if model is None:
            raise RuntimeError(f"agent {self.name!r}: reference log-probs asked before freeze_reference()")
        mask = batch.attention_mask[rows]
        inputs = self.forward_inputs(batch.sequences[rows], mask, [batch.images[int(r)] for r in rows])
        if self.explicit_positions:
            inputs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(**inputs).logits
        logits = logits[:, batch.prompt_len - 1: -1].float() / batch.temperature
        logp_all = logits.log_softmax(-1)
        target = batch.sequences[rows, batch.prompt_len:]
        logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def save(self, path: str) -> None:
        self.model.save_pretrained(path)
        self.processor.save_pretrained(path)

    def save_state(self, path: str) -> None:
        from safetensors.torch import save_model

        Path(path).mkdir(parents=True, exist_ok=True)
        save_model(self.model, str(Path(path) / "model.safetensors"))

    def load_state(self, path: str) -> None:
        from safetensors.torch import load_model

        load_model(self.model, str(Path(path) / "model.safetensors"), device=str(self.model.device))


class VisionSampler:
    """Batched ``generate`` with each row's image inputs; the ``hf`` sampler for a :class:`VisionAgent`."""

    def __init__(self, config: HFSamplerConfig, ctx=None):
        self.config = config
        if ctx is not None and ctx.agent is not None and ctx.task is not None:
            _check_length(ctx.agent, ctx.task, config.max_new_tokens)

    def sample(self, agent: VisionAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg, tok = self.config, agent.tokenizer
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        ids, mask, images = agent.encode(prompts)
        prompt_ids, prompt_mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        row_images = tuple(images[p] for p in range(len(prompts)) for _ in range(n))
        eos, pad = tok.eos_token_id, tok.pad_token_id
        pieces = []
        with torch.no_grad():
            for start in range(0, len(prompt_ids), cfg.batch_size):
                chunk = slice(start, start + cfg.batch_size)
                inputs = agent.forward_inputs(prompt_ids[chunk], prompt_mask[chunk], row_images[chunk])
                out = agent.model.generate(
                    **inputs, do_sample=not greedy, temperature=temp if not greedy else None,
                    top_p=cfg.top_p if not greedy else None, top_k=cfg.top_k or None,
                    max_new_tokens=cfg.max_new_tokens, pad_token_id=pad, eos_token_id=eos,
                    suppress_tokens=agent.media_tokens or None, output_logits=True, return_dict_in_generate=True)
                completion = out.sequences[:, prompt_ids.shape[1]:].cpu()
                # Raw logits, not processed scores: top-p / min-length masks must not leak in.
                logits = torch.stack(out.logits, 1).float().cpu() / temp
                pieces.append((completion, logits.log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)))
        width = max(c.shape[1] for c, _ in pieces)
        completion = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad) for c, _ in pieces])
        logp = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for _, lp in pieces])
        is_eos = completion == eos
        cmask = ((is_eos.cumsum(1) - is_eos.long()) == 0).long()  # up to and including the first EOS
        logp, lengths = logp * cmask, cmask.sum(1)
        texts = tok.batch_decode(completion.masked_fill(is_eos | (cmask == 0), pad), skip_special_tokens=True)
        conf = (logp.sum(1) / lengths.clamp(min=1)).tolist()
        batch = VisionSampleBatch(sequences=torch.cat([prompt_ids, completion], 1),
                                  attention_mask=torch.cat([prompt_mask, cmask], 1), completion_mask=cmask,
                                  old_logprobs=logp, prompt_len=prompt_ids.shape[1], temperature=temp,
                                  images=row_images)

        def grid(values):
            return tuple(tuple(values[p * n:(p + 1) * n]) for p in range(len(prompts)))

        return Rollout(agent=agent.name, prompts=tuple(prompts), texts=grid(texts), lengths=grid(lengths.tolist()),
                       confidences=grid(conf), batch=batch)

    def sync(self, agent: VisionAgent) -> None:
        """Sampling reads the trainer's own weights: nothing to push."""


def _check_length(agent: VisionAgent, task, max_new_tokens: int) -> None:
    """The longest prompt (image tokens included) plus max_new_tokens must fit the text model."""
    text_config = getattr(agent.model.config, "text_config", agent.model.config)
    limit = getattr(text_config, "max_position_embeddings", None)
    prompts = [p for name in ("train", "eval") for p in task.split(name)]
    if not limit or not prompts:
        return
    # prompts differ only in text length and image count here; the longest texts are the candidates
    longest_text = sorted(prompts, key=lambda p: (len(p.images), len(p.text)))[-8:]
    longest = max(len(ids) for ids in encode_prompts(agent.processor, longest_text, agent.chat)[0])
    if longest + max_new_tokens > limit:
        raise CorlError(f"agent {agent.name!r}: the longest prompt ({longest} tokens with its image tokens) plus "
                        f"max_new_tokens ({max_new_tokens}) exceeds the model's {limit} positions; lower "
                        "sampler.max_new_tokens or shorten the prompts")
