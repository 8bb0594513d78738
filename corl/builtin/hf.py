"""The ``hf`` agent and sampler: a transformers causal LM, sampled with batched ``generate``.

Sampling keeps the behaviour policy's log-probs (from the raw logits at the sampling
temperature), so the optimizer's first ratio is exactly 1 and no extra forward pass is needed.
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
from corl.types import Prompt, Rollout

v = attrs.validators


def _model_source(instance, attribute, value: str) -> None:
    """Recipe-time check of ``model``: a known zoo name, or a path that holds a model."""
    from corl import zoo

    if value.startswith("zoo:"):
        if value[4:] not in zoo.FAMILIES:
            raise ValueError(f"unknown zoo model; available {', '.join('zoo:' + n for n in zoo.FAMILIES)}")
        return
    path = Path(value).expanduser()
    if (value.startswith((".", "/", "~")) or path.exists()) and not path.is_dir():
        raise ValueError("no such folder")
    if path.is_dir() and not (path / "config.json").exists():
        raise ValueError("not a Hugging Face model folder (no config.json)")


@attrs.frozen
class HFAgentConfig:
    model: str = attrs.field(validator=_model_source, metadata={"help": "zoo:NAME (built and warm-started here), a local HF folder, or a hub id"})
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
        "help": "chat: wrap each prompt as a user turn with the tokenizer's chat template; raw: the text as is; "
                "auto: chat when the tokenizer has a chat template"})
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
        source = config.model
        if source.startswith("zoo:"):
            from corl import zoo

            seed = ctx.task.split("seed")
            examples = [(p.text, str(p.label)) for p in seed]
            zoo_config = ctx.spec.zoo
            if config.zoo_seed is not None:
                zoo_config = attrs.evolve(zoo_config, seed=config.zoo_seed)
            if config.zoo_steps is not None:  # part of the cache key, like every ZooConfig field
                zoo_config = attrs.evolve(zoo_config, steps=config.zoo_steps)
            source = str(zoo.resolve(source[4:], examples, zoo_config, log=ctx.log))
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
                            f"fetched from the hub{offline}; give a zoo: name or a folder with config.json") from None
        self.tokenizer.padding_side = "left"
        if config.pad_token is not None:
            self.tokenizer.pad_token = config.pad_token
        if self.tokenizer.pad_token_id is None:
            eos = self.tokenizer.eos_token
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no pad token; set "
                            f"pad_token in that agent's table" + (f" (its EOS token is {eos!r})" if eos else ""))
        if self.tokenizer.eos_token_id is None:
            raise CorlError(f"agent {self.name!r}: the tokenizer of {config.model!r} has no EOS token")
        self.model.eval()  # no dropout: training log-probs must match sampling ones
        self.reference = None

    def encode(self, texts: Sequence[str]):
        """Tokenize prompts, left-padded; through the chat template where the agent uses one."""
        tok = self.tokenizer
        chat = self.config.prompt_format == "chat" or (self.config.prompt_format == "auto" and tok.chat_template)
        if chat:
            if not tok.chat_template:
                raise CorlError(f"agent {self.name!r}: prompt_format = 'chat' but the tokenizer has no chat template")
            texts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                             add_generation_prompt=True) for t in texts]
        # A chat template writes its own BOS; raw text gets the tokenizer's special tokens.
        return tok(list(texts), return_tensors="pt", padding=True, add_special_tokens=not chat)

    def parameters(self):
        return self.model.parameters()

    def freeze_reference(self) -> None:
        self.reference = copy.deepcopy(self.model).requires_grad_(False).eval()

    def token_logprobs(self, batch: SampleBatch, rows, *, reference: bool = False):
        import torch

        model = self.reference if reference else self.model
        if model is None:
            raise RuntimeError(f"agent {self.name!r}: reference log-probs asked before freeze_reference()")
        mask = batch.attention_mask[rows]
        # Left padding shifts absolute positions; GPT-2 needs them explicit (RoPE families don't care).
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=batch.sequences[rows], attention_mask=mask, position_ids=positions).logits
        logits = logits[:, batch.prompt_len - 1: -1].float() / batch.temperature
        logp_all = logits.log_softmax(-1)
        target = batch.sequences[rows, batch.prompt_len:]
        logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

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


@attrs.frozen
class HFSamplerConfig:
    temperature: float = attrs.field(default=1.0, validator=v.gt(0), metadata={"help": "sampling temperature"})
    top_p: float = attrs.field(default=1.0, validator=[v.gt(0), v.le(1)], metadata={"help": "nucleus sampling mass"})
    top_k: int = attrs.field(default=0, validator=v.ge(0), metadata={"help": "top-k sampling (0: off)"})
    max_new_tokens: int = attrs.field(default=8, validator=v.ge(1), metadata={"help": "completion length limit"})
    batch_size: int = attrs.field(default=1024, validator=v.ge(1), metadata={
        "help": "sequences per generate call (prompts x samples); bounds memory"})


class HFSampler:
    """Batched ``generate`` with the KV cache; N samples per prompt in one call."""

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
        prompt_ids = enc["input_ids"].repeat_interleave(n, 0)
        prompt_mask = enc["attention_mask"].repeat_interleave(n, 0)
        eos = tok.eos_token_id
        pieces = []
        with torch.no_grad():
            for start in range(0, len(prompt_ids), cfg.batch_size):
                ids, am = prompt_ids[start:start + cfg.batch_size], prompt_mask[start:start + cfg.batch_size]
                out = model.generate(
                    input_ids=ids, attention_mask=am, do_sample=not greedy, temperature=temp if not greedy else None,
                    top_p=cfg.top_p if not greedy else None, top_k=cfg.top_k or None,
                    max_new_tokens=cfg.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=eos,
                    output_logits=True, return_dict_in_generate=True)
                completion = out.sequences[:, ids.shape[1]:]
                # Raw logits, not processed scores: top-p / min-length masks must not leak in.
                logits = torch.stack(out.logits, 1).float() / temp
                logp = logits.log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
                pieces.append((completion, logp))
        width = max(c.shape[1] for c, _ in pieces)
        completion = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=tok.pad_token_id) for c, _ in pieces])
        logp = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for _, lp in pieces])
        is_eos = completion == eos
        # Up to and including the first EOS; generate pads finished rows with pad_token_id.
        cmask = ((is_eos.cumsum(1) - is_eos.long()) == 0).long()
        logp = logp * cmask
        lengths = cmask.sum(1)
        body = completion.masked_fill(is_eos | (cmask == 0), tok.pad_token_id)
        texts = tok.batch_decode(body, skip_special_tokens=True)
        conf = (logp.sum(1) / lengths.clamp(min=1)).tolist()
        batch = SampleBatch(sequences=torch.cat([prompt_ids, completion], 1),
                            attention_mask=torch.cat([prompt_mask, cmask], 1), completion_mask=cmask,
                            old_logprobs=logp, prompt_len=prompt_ids.shape[1], temperature=temp)

        def grid(values):
            return tuple(tuple(values[p * n:(p + 1) * n]) for p in range(len(prompts)))

        return Rollout(agent=agent.name, prompts=tuple(prompts), texts=grid(texts), lengths=grid(lengths.tolist()),
                       confidences=grid(conf), batch=batch)

    def sync(self, agent: HFAgent) -> None:
        """Sampling reads the trainer's own weights: nothing to push."""


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


@hookimpl
def corl_register_components(registry):
    registry.add("agent", "hf", HFAgent, HFAgentConfig, help="transformers causal LM")
    registry.add("sampler", "hf", HFSampler, HFSamplerConfig, help="batched transformers generate with KV cache")


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
