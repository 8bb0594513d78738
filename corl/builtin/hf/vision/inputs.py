"""A vision-language model's inputs: images loaded, prompts through the processor (each row keeps
its own image inputs), rows padded and collated into one batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl.errors import CorlError
from corl.types import Prompt

TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")


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
