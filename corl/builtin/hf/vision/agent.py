"""The ``hf_vision`` agent and sampler: transformers image-text-to-text models (LLaVA, Idefics3 /
SmolVLM, Qwen2-VL, ...) and the tiny ones of :mod:`corl.builtin.hf.vision.zoo` (warm-started here, or
shipped trained: :mod:`corl.builtin.hf.models.shipped`).

Prompts go through the model's own processor and chat template (``{"type": "image"}`` parts, then
the text), one prompt at a time, so every row keeps its own image inputs (``pixel_values`` and
whatever else the processor makes). Those inputs travel with the rollout and go to ``generate``
and to the training forward pass alike, so the sampling-time log-probs and the recomputed ones
score the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from corl.builtin.hf.backend.batch import SampleBatch
from corl.builtin.hf.backend.common import (
    capped_texts,
    check_special_tokens,
    context_limit,
    frozen_copy,
    load,
    load_weights,
    quiet_libraries,
    save_loadable,
    save_weights,
)
from corl.builtin.hf.models import sources
from corl.builtin.hf.models.config import zoo_config_for
from corl.builtin.hf.vision import zoo as vision_zoo
from corl.builtin.hf.vision.config import HFVisionAgentConfig
from corl.builtin.hf.vision.inputs import collate, encode_prompts, left_pad
from corl.errors import CorlError
from corl.types import Prompt

#: Config keys of placeholder tokens the processor expands; sampling never emits them.
MEDIA_TOKEN_KEYS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                    "vision_end_token_id", "boi_token_id", "eoi_token_id")


@attrs.frozen
class VisionSampleBatch(SampleBatch):
    """A :class:`SampleBatch` plus each row's image inputs (``images[row]``, a dict of tensors)."""

    images: tuple = ()

    def _select_extra(self, rows: list[int]) -> dict:
        return {"images": tuple(self.images[r] for r in rows)}


class VisionAgent:
    """An image-text-to-text model with its processor: the ``hf_vision`` agent."""

    def __init__(self, config: HFVisionAgentConfig, ctx):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        quiet_libraries()
        self.name, self.config = ctx.agent_name, config
        who = f"agent {self.name!r}"
        if ctx.group.size > 1:  # nothing would reduce its gradients: only hf agents are sharded (FSDP2)
            raise CorlError(f"{who}: an hf_vision agent trains on one rank; give it a single rank in agents[i].ranks "
                            "(several ranks shard hf agents only, docs/how-to/scale-out.md)")
        # a shipped base (zoo:llava-shapes, ...) loads as it is; another zoo: name is warm-started on the task
        source = sources.resolve(config.model, log=ctx.log, zoo_builder=lambda name: vision_zoo.resolve(
            name, ctx.task.split("seed"), zoo_config_for(config, ctx.section("zoo")), log=ctx.log,
            check=ctx.stop.check))
        remote, errors = config.trust_remote_code, (OSError, ValueError, ImportError)
        self.processor = load(who, config.model, source,
                              lambda: AutoProcessor.from_pretrained(source, trust_remote_code=remote), errors)
        self.model = load(who, config.model, source, lambda: AutoModelForImageTextToText.from_pretrained(
            source, dtype=getattr(torch, config.dtype), trust_remote_code=remote).to(config.device), errors)
        tok = self.tokenizer = self.processor.tokenizer
        check_special_tokens(tok, config.pad_token, who, config.model)
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
        self.context = context_limit(config_)  # positions of its language model, where its config says
        self.longest = None  # measured by the sampler's length check (a shortlist: images are slow to encode)
        self.model.eval()  # no dropout: training log-probs must match sampling ones
        self.reference = None

    def encode(self, prompts: Sequence[Prompt]):
        """Left-padded ``input_ids`` / ``attention_mask`` and each prompt's image inputs."""
        ids, images = encode_prompts(self.processor, prompts, self.chat)
        input_ids, mask = left_pad(ids, self.tokenizer.pad_token_id)
        return input_ids, mask, images

    def parameters(self):
        return self.model.parameters()

    def token_counts(self, prompts: Sequence[Prompt], limit: int | None = None) -> list[int]:
        """Each prompt's length in tokens, image tokens included (no padding); with ``limit``, a text
        surely longer than that is counted only so far (its count is then > limit)."""
        texts = capped_texts(self.tokenizer, [p.text for p in prompts], limit)
        prompts = [attrs.evolve(p, text=t) if t is not p.text else p for p, t in zip(prompts, texts)]
        return [len(ids) for ids in encode_prompts(self.processor, prompts, self.chat)[0]]

    def freeze_reference(self) -> None:
        self.reference = frozen_copy(self.model)

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
        save_weights(self.model, path)
        save_loadable(self.model, self.processor, path)  # an intermediate checkpoint loads with from_pretrained

    def load_state(self, path: str) -> None:
        load_weights(self.model, path)
