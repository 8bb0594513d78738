"""Tiny vision-language models of two designs, built from transformers configs and warm-started.

* ``zoo:llava-tiny``: LLaVA, a CLIP vision tower whose patch features (one token per 8x8 patch,
  16 image tokens for a 32x32 image) pass through an MLP projector into a Qwen2 language model.
* ``zoo:idefics3-tiny``: Idefics3, a SigLIP vision tower whose patches are pixel-shuffled 2x2 into
  4 image tokens (between ``<fake_token_around_image>`` markers) for a Llama language model.

Both get a character-level tokenizer (the :mod:`corl.builtin.hf.models.zoo` recipe, plus letters and the image tokens),
a PIL image processor (no torchvision), a small chat template, and a processor that saves and
reloads with ``AutoProcessor``. Like the text zoo, a model is warm-started by supervised steps on the
task's labeled seed split and cached under ``$CORL_CACHE_DIR/vision-zoo/<name>-<hash>``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from corl import logs
from corl.atomic import atomic_folder
from corl.builtin.hf.models.catalog import VISION_ZOO, cache_root
from corl.builtin.hf.models.config import ZooConfig
from corl.builtin.hf.models.warmstart import right_padded, seeded, train
from corl.builtin.hf.vision.inputs import collate, encode_prompts
from corl.errors import ConfigError, CorlError
from corl.types import Prompt

#: zoo name -> design. Names are what a recipe writes after ``zoo:``.
FAMILIES = VISION_ZOO
CHARS = "0123456789abcdefghijklmnopqrstuvwxyz ?+-*="
SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>")
IMAGE_TOKENS = ("<image>", "<fake_token_around_image>", "<global-img>")
IMAGE_SIZE, PATCH = 32, 8  # images are resized to 32x32: 16 patches
D_TEXT, LAYERS, HEADS, D_VISION, VISION_LAYERS = 64, 4, 4, 64, 2
MAX_POSITIONS = 128
#: The user turn's image parts, then its text, then "=" where the answer starts.
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
                 "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}"
                 "{% endif %}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}={% endif %}")


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL, *IMAGE_TOKENS, *CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # without it decode joins characters with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", padding_side="left")
    fast.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})  # never split into characters
    return fast


def build_processor(design: str, tokenizer):
    import transformers as tf

    if design == "llava":
        images = tf.CLIPImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_center_crop=False,
                                          crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
        return tf.LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=PATCH,
                                 vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                 chat_template=CHAT_TEMPLATE, image_token="<image>")
    if design == "idefics3":
        images = tf.Idefics3ImageProcessorPil(size={"longest_edge": IMAGE_SIZE}, do_image_splitting=False,
                                              max_image_size={"longest_edge": IMAGE_SIZE})
        return tf.Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=(IMAGE_SIZE // PATCH // 2) ** 2,
                                    chat_template=CHAT_TEMPLATE)
    raise AssertionError(design)


def build_config(design: str, ids: dict[str, int]):
    import transformers as tf

    text = dict(vocab_size=len(ids), hidden_size=D_TEXT, intermediate_size=4 * D_TEXT, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, max_position_embeddings=MAX_POSITIONS, pad_token_id=ids["<pad>"],
                bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"], tie_word_embeddings=True)
    vision = dict(hidden_size=D_VISION, intermediate_size=2 * D_VISION, num_hidden_layers=VISION_LAYERS,
                  num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=PATCH)
    if design == "llava":
        return tf.LlavaConfig(vision_config=tf.CLIPVisionConfig(**vision),
                              text_config=tf.Qwen2Config(num_key_value_heads=2, **text),
                              image_token_id=ids["<image>"], vision_feature_select_strategy="default",
                              vision_feature_layer=-1, tie_word_embeddings=True)
    if design == "idefics3":
        return tf.Idefics3Config(vision_config=tf.Idefics3VisionConfig(**vision),
                                 text_config=tf.LlamaConfig(num_key_value_heads=HEADS, **text),
                                 image_token_id=ids["<image>"], scale_factor=2, pad_token_id=ids["<pad>"],
                                 tie_word_embeddings=True)
    raise AssertionError(design)


def build(name: str):
    """An untrained model and its processor for zoo name ``name``."""
    from transformers import AutoModelForImageTextToText

    design = FAMILIES[name]
    tokenizer = build_tokenizer()
    return AutoModelForImageTextToText.from_config(build_config(design, tokenizer.get_vocab())), \
        build_processor(design, tokenizer)


def _fingerprint(name: str, prompts: Sequence[Prompt], config: ZooConfig) -> str:
    h = hashlib.sha256(json.dumps([name, config.cache_key(), D_TEXT, LAYERS, HEADS, D_VISION, VISION_LAYERS,
                                   IMAGE_SIZE, PATCH, CHARS, CHAT_TEMPLATE]).encode())
    for p in prompts:
        h.update(json.dumps([p.text, str(p.label)]).encode())
        for image in p.images:
            h.update(image.tobytes() if hasattr(image, "tobytes") else Path(image).read_bytes())
    return h.hexdigest()[:16]


def resolve(name: str, prompts: Sequence[Prompt], config: ZooConfig, log: Callable[[str], None] = logs.logger.info,
            check: Callable[[], None] = lambda: None) -> Path:
    """The folder of vision zoo model ``name`` warm-started on labeled ``prompts``, built once."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown zoo model 'zoo:{name}'; available: {', '.join('zoo:' + n for n in FAMILIES)}")
    folder = cache_root() / "vision-zoo" / f"{name}-{_fingerprint(name, prompts, config)}"
    if (folder / "config.json").exists():
        return folder
    if not prompts and config.steps:  # never cache an untrained model under a trained one's key
        raise CorlError(f"zoo:{name}: the task's labeled seed split is empty: nothing to warm-start on; give the task "
                        "labeled seed prompts, or a model folder (or zoo_steps = 0 for an untrained model)")
    start = time.perf_counter()
    log(f"zoo:{name}: warm-starting {config.describe()} supervised steps on {len(prompts)} labeled seed examples "
        f"(once; cached in {cache_root()})")
    model, processor = warm_start(name, prompts, config, check)
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    log(f"zoo:{name}: warm-started {config.describe()} steps in {time.perf_counter() - start:.0f}s -> {folder}")
    return folder


def warm_start(name: str, prompts: Sequence[Prompt], config: ZooConfig, check: Callable[[], None] = lambda: None):
    """An untrained model of zoo ``name`` with its processor, warm-started on (image, question, answer)."""
    with seeded(config.seed):
        model, processor = build(name)
        if config.steps == 0:
            return model.eval(), processor
        tok = processor.tokenizer
        answers = [tok(str(p.label), add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for p in prompts]
        sequences, images = encode_prompts(processor, prompts, chat=True, suffixes=answers)
        batch = right_padded(sequences, [len(a) for a in answers], tok.pad_token_id)
        model = train(model, *batch, config, f"warm-start {name}",
                      extra=lambda rows: collate([images[int(i)] for i in rows]), check=check)
        return model, processor
