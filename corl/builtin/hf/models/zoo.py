"""Tiny causal LMs of several transformers families, built from configs and warm-started.

The zoo is the embedded default: no download, real architectures, a character-level tokenizer.
A zoo model is warm-started by a short supervised phase on the task's *labeled seed split* and
cached on disk (``$CORL_CACHE_DIR``, default ``~/.cache/corl``) under a key of everything that
shaped it, so later runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from corl import logs
from corl.atomic import atomic_folder
from corl.builtin.hf.models.catalog import TEXT_ZOO, cache_root
from corl.builtin.hf.models.config import ZooConfig
from corl.builtin.hf.models.warmstart import right_padded, seeded, train
from corl.errors import ConfigError, CorlError

#: Characters the zoo tokenizer knows; enough for the synthetic arithmetic task.
CHARS = "0123456789+-*="
SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>")
#: Added (printable ASCII) when a task's warm-start examples need more, e.g. code tasks.
EXTRA_CHARS = "".join(c for c in map(chr, range(32, 127)) if c not in CHARS)


def chars_for(examples: Sequence[tuple[str, str]]) -> str:
    """The tokenizer's characters for these examples: ``CHARS`` when they suffice (so the arithmetic
    models keep their cache keys), else ``CHARS`` plus printable ASCII."""
    seen = {c for prompt, answer in examples for c in prompt + answer}
    return CHARS if seen <= set(CHARS) else CHARS + EXTRA_CHARS


#: Hidden size, layers, heads: ~0.15-0.2M parameters, the size that warms up fastest here.
D_MODEL, LAYERS, HEADS, MAX_POSITIONS = 64, 4, 4, 64


def _config_for(family: str, vocab_size: int, ids: dict[str, int]):
    import transformers as tf

    common = dict(vocab_size=vocab_size, pad_token_id=ids["<pad>"], bos_token_id=ids["<bos>"],
                  eos_token_id=ids["<eos>"], tie_word_embeddings=True)
    if family in ("llama", "llama_h32"):
        heads = 2 if family == "llama_h32" else HEADS  # head_dim 32: what inference engines' CPU kernels accept
        return tf.LlamaConfig(hidden_size=D_MODEL, intermediate_size=4 * D_MODEL,
                              num_hidden_layers=LAYERS, num_attention_heads=heads,
                              num_key_value_heads=heads, max_position_embeddings=MAX_POSITIONS, **common)
    if family == "qwen2":
        return tf.Qwen2Config(hidden_size=D_MODEL, intermediate_size=4 * D_MODEL,
                              num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                              num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS, **common)
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(hidden_size=D_MODEL, intermediate_size=4 * D_MODEL,
                                num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                max_position_embeddings=MAX_POSITIONS, **common)
    if family == "gpt2":
        # Dropout off: with it GPT-2 warms up far slower than the others (see FINDINGS).
        return tf.GPT2Config(n_embd=D_MODEL, n_layer=LAYERS, n_head=HEADS, n_positions=MAX_POSITIONS,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common)
    raise AssertionError(family)


#: zoo name -> transformers family. Names are what a recipe writes after ``zoo:``.
FAMILIES = TEXT_ZOO


def build_tokenizer(chars: str = CHARS):
    """A character-level fast tokenizer that round-trips through ``save_pretrained``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL, *chars))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # without it decode joins characters with spaces
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<bos>", unk_token="<unk>", padding_side="left")


def resolve(name: str, examples: Sequence[tuple[str, str]], config: ZooConfig,
            log: Callable[[str], None] = logs.logger.info, check: Callable[[], None] = lambda: None) -> Path:
    """Return the folder of zoo model ``name`` warm-started on ``examples``, building it once
    (``check()`` between warm-start steps: :func:`corl.builtin.hf.models.warmstart.train`)."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown zoo model 'zoo:{name}'; available: {', '.join('zoo:' + n for n in FAMILIES)}")
    fingerprint = hashlib.sha256(json.dumps([name, config.cache_key(), D_MODEL, LAYERS, HEADS, chars_for(examples),
                                             list(examples)]).encode()).hexdigest()[:16]
    folder = cache_root() / "zoo" / f"{name}-{fingerprint}"
    if (folder / "config.json").exists():
        return folder
    if not examples and config.steps:  # never cache an untrained model under a trained one's key
        raise CorlError(f"zoo:{name}: the task's labeled seed split is empty: nothing to warm-start on; give the task "
                        "labeled seed prompts, or a model folder (or zoo_steps = 0 for an untrained model)")
    start = time.perf_counter()
    log(f"zoo:{name}: warm-starting {config.describe()} supervised steps on {len(examples)} labeled seed examples "
        f"(once; cached in {cache_root()})")
    model, tokenizer = warm_start(FAMILIES[name], examples, config, check)
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    log(f"zoo:{name}: warm-started {config.describe()} steps in {time.perf_counter() - start:.0f}s -> {folder}")
    return folder


def warm_start(family: str, examples: Sequence[tuple[str, str]], config: ZooConfig,
               check: Callable[[], None] = lambda: None, chars: str | None = None):
    """An untrained ``family`` model and its tokenizer (``chars``, default :func:`chars_for` the
    examples), warm-started on ``examples`` (prompt, answer)."""
    from transformers import AutoModelForCausalLM

    with seeded(config.seed):
        tokenizer = build_tokenizer(chars or chars_for(examples))
        ids = tokenizer.get_vocab()
        model = AutoModelForCausalLM.from_config(_config_for(family, len(ids), ids))
        if config.steps == 0:
            return model.eval(), tokenizer
        answers = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for _, a in examples]
        sequences = [tokenizer(p)["input_ids"] + a for (p, _), a in zip(examples, answers)]
        batch = right_padded(sequences, [len(a) for a in answers], tokenizer.pad_token_id)
        return train(model, *batch, config, f"warm-start {family}", check=check), tokenizer
