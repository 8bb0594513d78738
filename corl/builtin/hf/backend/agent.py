"""The ``hf`` agent: a transformers causal LM whose update reads the sampled tokens' log-probs.

Training log-probs are recomputed with explicit position ids (left padding; GPT-2 needs them), each
distinct prompt once for all its samples (:mod:`corl.builtin.hf.backend.forward`), in chunks of positions so
``[rows, T, vocab]`` float logits never exist at once, and with the same temperature the sampler
drew at, so the first policy ratio is exactly 1.

On several ranks (or asked) the model is sharded with FSDP2 (:mod:`corl.builtin.hf.scale.sharding`);
with ``lora`` only peft adapters train (:mod:`corl.builtin.hf.scale.lora`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path

from corl.builtin.hf.backend import recompute
from corl.builtin.hf.backend.batch import SampleBatch
from corl.builtin.hf.backend.common import (
    capped_texts,
    check_fits,
    check_special_tokens,
    check_vocabulary,
    context_limit,
    frozen_copy,
    load,
    load_weights,
    measure,
    quiet_libraries,
    save_loadable,
    save_weights,
)
from corl.builtin.hf.backend.compiled import CompiledBody
from corl.builtin.hf.backend.config import HFAgentConfig, matmul_dtype
from corl.builtin.hf.backend.forward import hidden_states
from corl.builtin.hf.backend.prompts import chat_template_text, format_prompts, use_chat_template
from corl.builtin.hf.models import sources, zoo
from corl.builtin.hf.models.config import zoo_config_for
from corl.builtin.hf.models.warmstart import warm_up
from corl.builtin.hf.scale import lora, sharding
from corl.context import Context
from corl.errors import CorlError
from corl.types import Prompt


class HFAgent:
    """A transformers causal LM and its tokenizer; the trainer of an ``hf`` agent."""

    def __init__(self, config: HFAgentConfig, ctx: Context):
        """Load in named stages: the model's source (a zoo model is warm-started on the task), the
        tokenizer, the recipe's warm-up, the context check (before any weight loads), the weights, then
        what training adds to them."""
        quiet_libraries()
        self.name, self.config, self.group = ctx.agent_name, config, ctx.group
        self._log, self._recomputing = ctx.log, None  # (the last choice of gradient_checkpointing = "auto")
        self.longest = None  # the task's longest prompt in this agent's tokens (common.measure)
        self.warm_up = None  # the warm-up's record (fingerprints, settings), when it had one
        self.reference = None
        who = f"agent {self.name!r}"
        template = chat_template_text(config.chat_template, getattr(ctx.spec, "source", None), who)
        source = self._resolve_source(ctx, template, who)
        self._load_tokenizer(source, template, who)
        source = self._warmed_up(source, ctx, who)
        self._check_context(source, ctx, who)
        self._load_model(source, ctx, who)
        self._prepare_for_training(who)

    def _resolve_source(self, ctx: Context, template: str | None, who: str):
        """The folder the model loads from. A zoo model's tokenizer and context are known before its
        warm-start, so the task's prompts are checked against them first."""
        config, examples = self.config, None
        if config.model.startswith("zoo:") and config.model[4:] in zoo.FAMILIES and ctx.task is not None:
            seed = ctx.task.split("seed")
            examples = [(p.text, str(p.label) if p.solution is None else p.solution) for p in seed]
            self.tokenizer, self.context = zoo.build_tokenizer(zoo.chars_for(examples)), zoo.MAX_POSITIONS
            use_chat_template(self.tokenizer, template)
            self.longest = measure(self, ctx.task, self.context)
            check_fits(who, self.longest, self.context)

        def build_zoo(name: str):
            if examples is None:
                raise CorlError(f"model {config.model!r}: a zoo model needs the run's task to warm-start on")
            return zoo.resolve(name, examples, zoo_config_for(config, ctx.section("zoo")), log=ctx.log,
                               check=ctx.stop.check)

        try:
            return sources.resolve(config.model, log=ctx.log, zoo_builder=build_zoo)
        except CorlError as exc:
            raise CorlError(f"{who}: {exc}") from None

    def _load_tokenizer(self, source, template: str | None, who: str) -> None:
        from transformers import AutoTokenizer

        remote = self.config.trust_remote_code
        self.tokenizer = load(who, self.config.model, source,
                              lambda: AutoTokenizer.from_pretrained(source, trust_remote_code=remote))
        use_chat_template(self.tokenizer, template)
        check_vocabulary(self.tokenizer, who, self.config.model)

    def _warmed_up(self, source, ctx: Context, who: str):
        """The folder after the recipe's warm-up (``warm_up.steps`` supervised steps on the task's
        labelled seed split, cached by fingerprint), or ``source`` itself without one."""
        config = self.config
        if not config.warm_up.steps or ctx.task is None:
            return source
        seed = ctx.task.split("seed")
        texts, special = format_prompts(self.tokenizer, seed, config.prompt_format, config.prompt_template,
                                        config.system_prompt, who=who)
        examples = [(t, str(p.label) if p.solution is None else p.solution) for t, p in zip(texts, seed)]
        source, self.warm_up = warm_up(source, config.warm_up, examples, add_special_tokens=special,
                                       freeze_embeddings=config.freeze_embeddings, who=who,
                                       trust_remote_code=config.trust_remote_code, log=ctx.log, check=ctx.stop.check)
        ctx.log(f"{who}: starts from its warm-up {json.dumps(self.warm_up)}")
        return str(source)

    def _check_context(self, source, ctx: Context, who: str) -> None:
        """The model's context against the task's longest prompt, and its special tokens, before the
        weights load: a prompt too long for the model costs no load."""
        from transformers import AutoConfig

        remote = self.config.trust_remote_code
        self.context = context_limit(load(who, self.config.model, source, lambda: AutoConfig.from_pretrained(
            source, trust_remote_code=remote)))
        if self.longest is None:
            self.longest = measure(self, ctx.task, self.context)
        check_fits(who, self.longest, self.context)
        check_special_tokens(self.tokenizer, self.config.pad_token, who, self.config.model)

    def _load_model(self, source, ctx: Context, who: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        config = self.config
        dtype, remote = getattr(torch, config.dtype), config.trust_remote_code
        self._load = lambda: load(who, config.model, source, lambda: AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=remote).to(config.device))
        self.sharded = sharding.wanted(config, ctx.group)
        self.mesh = sharding.mesh_for(config, ctx.group, who) if self.sharded else None
        if not config.model.startswith("zoo:"):  # a real model takes a while to load: say so
            ctx.log(f"{who}: loading {config.model}")
        self.model = self._load()

    def _prepare_for_training(self, who: str) -> None:
        """What training adds to the loaded weights: layer checkpointing, LoRA adapters, frozen
        embeddings, FSDP shards; then eval mode (no dropout: training log-probs must match sampling ones)."""
        import torch

        config = self.config
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
        # peft's LoRA layers go into this very model; the PeftModel around it switches them off and saves them
        self.adapters = lora.add_adapters(self.model, config.lora, who) if config.lora.rank else None
        if self.adapters is not None:
            lora.name_base(self.adapters, config.model)
        self._dropouts = lora.dropouts(self.model) if self.adapters is not None else []
        if config.freeze_embeddings:
            bf16 = self.matmul("sample") == self.matmul("train") == "bfloat16" and not self.sharded  # (FSDP: one dtype)
            _freeze_embeddings(self.model, getattr(torch, config.dtype), bf16=bf16)
        if self.sharded:
            sharding.shard(self.model, self.mesh, mixed_precision=config.mixed_precision, cpu_offload=config.cpu_offload)
        self.model.eval()
        self._compiled = CompiledBody(self.model, who, self._log) if config.compile_update and not self.sharded else None
        if config.compile_update and self.sharded:
            self._log(f"{who}: compile_update: a sharded model's update runs eager")

    def encode(self, prompts: Sequence[str | Prompt]):
        """Tokenize prompts (texts, or :class:`~corl.types.Prompt` objects, whose conversation a chat format
        renders as it is), left-padded, in this agent's prompt format (corl.builtin.hf.backend.prompts)."""
        texts, special = self.render(prompts)
        limit = self.config.max_prompt_length
        if limit is None:
            return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=special)
        self.tokenizer.truncation_side = self.config.truncation_side
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=special, truncation=True,
                              max_length=limit)

    def render(self, prompts: Sequence[str | Prompt]) -> tuple[list[str], bool]:
        """The exact strings this agent tokenizes for ``prompts`` and whether BOS is added (``corl data preview``)."""
        cfg = self.config
        return format_prompts(self.tokenizer, prompts, cfg.prompt_format, cfg.prompt_template, cfg.system_prompt,
                              who=f"agent {self.name!r}")

    def token_counts(self, prompts: Sequence[Prompt], limit: int | None = None) -> list[int]:
        """Each prompt's length in tokens, as :meth:`encode` makes it (no padding). With ``limit``, a
        prompt surely longer than that is counted only so far (``capped_texts``): its count is > limit."""
        texts = [p.text for p in prompts]
        # a conversation is counted whole (rendered turns); a plain text may be cut short of a huge size first
        capped = [p if p.messages else t for p, t in zip(prompts, capped_texts(self.tokenizer, texts, limit))]
        counts = self._count(capped)
        unsure = [i for i, (c, t) in enumerate(zip(capped, texts)) if isinstance(c, str) and len(c) < len(t)
                  and counts[i] <= limit]
        for i, n in zip(unsure, self._count([texts[i] for i in unsure]) if unsure else ()):
            counts[i] = n  # a tokenizer whose tokens span more than its vocabulary says (an unknown-word token)
        cut = self.config.max_prompt_length  # what encode() keeps of a longer prompt
        return counts if cut is None else [min(c, cut) for c in counts]

    def _count(self, prompts: Sequence[str | Prompt]) -> list[int]:
        texts, special = self.render(prompts)
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=special)["input_ids"]]

    def parameters(self):
        return self.model.parameters()

    @property
    def device(self):
        """Where the agent computes (with CPU offload its shards live in CPU memory)."""
        import torch

        return torch.device(self.config.device)

    def gathered(self):
        """For sampling: a sharded model gathered whole once (every rank of the group enters
        together), instead of once per decode step."""
        return sharding.gathered(self.model) if self.sharded else contextlib.nullcontext()

    def weights(self):
        """``(Hugging Face name, whole tensor)`` of every parameter, one at a time, for an inference
        engine: adapters merged in, a sharded model gathered tensor by tensor (every rank iterates)."""
        if self.adapters is not None:
            return lora.merged_weights(self.model)
        return sharding.full_tensors(self.model.named_parameters())

    def freeze_reference(self) -> None:
        if self.adapters is not None:
            return  # the reference is this model with its adapters off
        if self.sharded:  # the starting weights again, sharded alike (a sharded model is not deep-copied)
            reference = self._load().requires_grad_(False)
            sharding.shard(reference, self.mesh, mixed_precision=self.config.mixed_precision,
                           cpu_offload=self.config.cpu_offload)
            self.reference = reference.eval()
        else:
            self.reference = frozen_copy(self.model)

    def token_logprobs(self, batch: SampleBatch, rows, *, reference: bool = False):
        import torch
        from torch.utils.checkpoint import checkpoint

        adapters_off = reference and self.adapters is not None
        model = self.model if not reference or adapters_off else self.reference
        if model is None:
            raise RuntimeError(f"agent {self.name!r}: reference log-probs asked before freeze_reference()")
        grad = torch.is_grad_enabled() and not reference
        checkpointing = grad and self._recompute(len(rows), batch.sequences.shape[1])
        model.train(checkpointing)  # (dropout is off; see __init__)
        for dropout in self._dropouts:  # the adapters' own dropout, in the update only
            dropout.train(torch.is_grad_enabled() and not reference)
        try:
            with self.autocast("train"), self.adapters.disable_adapter() if adapters_off else contextlib.nullcontext():
                def forward(body):
                    return hidden_states(model, batch.sequences[rows], batch.attention_mask[rows], batch.prompt_len,
                                         root=self.sharded, share=True, body=body)

                compiled = self._compiled
                hidden = forward(None) if compiled is None else compiled.run(forward, use=grad and not checkpointing)
        finally:
            model.eval()
        target = batch.sequences[rows, batch.prompt_len:]
        chunked = logits_outweigh_hidden(model, hidden)
        width = max(1, self.config.logprob_chunk_tokens // max(1, hidden.shape[0]) if chunked else hidden.shape[1])
        logps, entropies = [], []
        for start in range(0, hidden.shape[1], width):
            args = (model, hidden[:, start:start + width], target[:, start:start + width], batch.temperature)
            with self.autocast("train"):
                if chunked and torch.is_grad_enabled():  # keep only the chunk's hidden states; recompute the rest
                    logp, entropy = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
                else:
                    logp, entropy = _chunk_logprobs(*args)
            logps.append(logp)
            entropies.append(entropy)
        return torch.cat(logps, 1), torch.cat(entropies, 1)

    def _recompute(self, rows: int, tokens: int) -> bool:
        """Whether this update's forward pass recomputes activations in backward (``gradient_checkpointing``;
        ``auto``: from a memory estimate, :mod:`corl.builtin.hf.backend.recompute`, logged when it changes)."""
        setting = self.config.gradient_checkpointing
        if setting != "auto":
            return setting
        estimate = recompute.activation_bytes(self.model.config, rows, tokens)
        available = recompute.available_bytes(self.device)
        choice = recompute.needed(estimate, available)
        if choice != self._recomputing:
            self._recomputing = choice
            self._log(recompute.describe(f"agent {self.name!r}", choice, estimate, available, rows, tokens))
        return choice

    def matmul(self, phase: str) -> str:
        """The matmul dtype of ``phase`` ("sample" or "train"), ``auto`` resolved for the agent's device."""
        return matmul_dtype(self.config.sample_dtype if phase == "sample" else self.config.train_dtype,
                            self.config.device)

    def autocast(self, phase: str):
        """The matmul dtype of ``phase`` ("sample" or "train") as an autocast context."""
        import contextlib

        import torch

        dtype = self.matmul(phase)
        if dtype == "float32" or dtype == self.config.dtype:  # (frozen embeddings may be bf16 already)
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=getattr(torch, dtype))

    def save(self, path: str) -> None:
        """The export: an HF folder; with adapters, the adapter folder (and the merged model in
        ``merged/`` with ``lora.export_merged``). Every rank of a sharded agent calls it (the tensors
        are gathered); the group's first rank writes."""
        writes = self.group.rank == 0
        if self.adapters is not None:
            lora.save_adapters(self.adapters, self.model, self.tokenizer, path, keep=writes)
            if self.config.lora.export_merged:
                self._save_merged(str(Path(path) / "merged"))
            return
        state = sharding.full_state_dict(self.model, keep=writes) if self.sharded else None
        if writes:
            self.model.save_pretrained(path, **({"state_dict": state} if self.sharded else {}))
            self.tokenizer.save_pretrained(path)

    def export(self, path: str) -> None:
        """A plain Hugging Face folder (``corl export``): the model, adapters merged in, and its tokenizer."""
        if self.adapters is None:
            self.save(path)
        else:
            self._save_merged(path)

    def _save_merged(self, path: str) -> None:
        writes = self.group.rank == 0
        merged = {}
        for name, tensor in lora.merged_weights(self.model):  # every rank of a sharded agent gathers
            if writes:
                merged[name] = tensor.cpu()
        if writes:
            self.model.save_pretrained(path, state_dict=merged)
            self.tokenizer.save_pretrained(path)

    def _trained(self):
        """What a checkpoint holds: every parameter, or the adapters alone (the base is rebuilt from its source)."""
        named = list(self.model.named_parameters())
        return [(n, p) for n, p in named if lora.is_adapter(n)] if self.adapters is not None else named

    def save_state(self, path: str) -> None:
        """Every rank of a sharded agent writes its own shard; otherwise ``model.safetensors`` (and,
        beside it, what ``from_pretrained`` needs: an intermediate checkpoint loads like an export),
        or with adapters the adapter folder ``PeftModel.from_pretrained(base, path)`` loads."""
        if self.sharded:
            sharding.save_shards(self._trained(), path, self.group.rank, self.group.size)
        elif self.adapters is not None:
            lora.save_adapters(self.adapters, self.model, self.tokenizer, path, keep=True)
        else:
            save_weights(self.model, path)
            save_loadable(self.model, self.tokenizer, path)

    def load_state(self, path: str) -> None:
        if self.sharded:
            sharding.load_shards(self._trained(), path, self.group.rank, self.group.size, f"agent {self.name!r}")
        elif self.adapters is not None:
            lora.load_adapters(self.adapters, self.model, path, f"agent {self.name!r}")
        else:
            load_weights(self.model, path)


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


def logits_outweigh_hidden(model, hidden) -> bool:
    """Whether the update's log-probs go chunk by chunk, each recomputed in backward
    (``logprob_chunk_tokens``): when the vocabulary is wider than the hidden states, as in every
    real LM (SmolLM2: 49152 against 576). A vocabulary no wider (the zoo's 19 tokens against 64)
    makes logits no larger than the hidden states the chunks would keep instead: the log-probs are
    then computed in one piece and kept, which saves the recompute and a pass per chunk."""
    return model.get_output_embeddings().weight.shape[0] > hidden.shape[-1]


def _chunk_logprobs(model, hidden, target, temperature: float):
    """Log-probs of ``target`` and the entropy at each position, from hidden states (float32 math)."""
    import torch

    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma 2 caps its logits; the same transform generate applies
        logits = torch.tanh(logits / cap) * cap
    if temperature != 1:  # (at 1 the division is exact and costs a vocabulary-wide pass each way: skipped)
        logits = logits / temperature
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy

