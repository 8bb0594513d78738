"""The ``hf`` sampler: a batched KV-cached decode loop over the agent's own transformers model.

Sampling keeps the policy's log-probs (from the raw logits at the sampling temperature), equal to
the training forward's, so the optimizer's first ratio is exactly 1 and no extra forward pass is
needed. ``top_k``, ``top_p``, ``min_p`` and ``repetition_penalty`` change which tokens are drawn
but not those log-probs: with any of them set, completions come from a shaped distribution while
the update treats them as the model's own (off-policy, uncorrected, as in TRL; docs/reference/recipe-keys.md).
Each prompt is prefilled once for its N samples (:func:`corl.builtin.hf.backend.decode.decode`).
"""

from __future__ import annotations

from collections.abc import Sequence

from corl.builtin.hf.backend.batch import rollout
from corl.builtin.hf.backend.common import TextAgent, check_length, sampler_key, serves
from corl.builtin.hf.backend.config import HFSamplerConfig
from corl.builtin.hf.backend.decode import StopAt, decode, processors, warpers
from corl.context import Context
from corl.types import Prompt, Rollout


class HFSampler:
    """A batched decode loop with the KV cache; N samples per prompt, each prompt prefilled once."""

    def __init__(self, config: HFSamplerConfig, ctx: Context | None = None):
        self.config = config
        self._stops: dict[int, StopAt] = {}
        self.check = ctx.stop.check if ctx is not None else (lambda: None)  # a run's stop, per decode step
        if ctx is not None and ctx.agent is not None:
            serves(ctx, "hf", TextAgent)
            if ctx.task is not None:
                check_length(ctx.agent, ctx.task, config.max_new_tokens, key=sampler_key(ctx))

    def sample(self, agent: TextAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg, tok, model = self.config, agent.tokenizer, agent.model
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        enc = agent.encode(prompts).to(agent.device)
        eos, pad = tok.eos_token_id, tok.pad_token_id
        shape, process = ([] if greedy else warpers(cfg)), processors(cfg)
        stop = self._stop_at(tok) if cfg.stop else None
        per_call = max(1, cfg.batch_size // n)  # prompts per decode call: prompts x samples <= batch_size
        pieces = []
        # (a sharded agent is gathered once for the whole call, on every rank of its group together)
        with torch.no_grad(), agent.autocast("sample"), agent.gathered():
            for start in range(0, len(prompts), per_call):
                ids = enc["input_ids"][start:start + per_call]
                am = enc["attention_mask"][start:start + per_call]
                pieces.append(self.decode(model, ids, am, n, cfg.max_new_tokens, temp, greedy, shape, eos, pad,
                                          stop, check=self.check, processors=process))
        width = max(c.shape[1] for c, _, _ in pieces)
        pad_to = lambda t, value=0: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)
        completion = torch.cat([pad_to(c, pad) for c, _, _ in pieces])
        logp = torch.cat([pad_to(lp) for _, lp, _ in pieces])
        # One up to and including the token that ended the row (EOS, a stop string or the limit).
        cmask = torch.cat([pad_to(m) for _, _, m in pieces])
        return rollout(agent, prompts, n, enc["input_ids"].repeat_interleave(n, 0),
                       enc["attention_mask"].repeat_interleave(n, 0), completion, logp, cmask, temp, cfg.stop,
                       max_new_tokens=cfg.max_new_tokens)

    def decode(self, model, *args, **kwargs):
        """One decode call, :func:`corl.builtin.hf.backend.decode.decode`'s arguments and result (a
        subclass decodes its own way: ``hf_static``)."""
        return decode(model, *args, **kwargs)

    def _stop_at(self, tokenizer) -> StopAt:
        """One stop-string matcher per tokenizer (building one scans the whole vocabulary)."""
        if id(tokenizer) not in self._stops:
            self._stops[id(tokenizer)] = StopAt(tokenizer, self.config.stop)
        return self._stops[id(tokenizer)]

    def sync(self, agent: TextAgent) -> None:
        """Sampling reads the trainer's own weights: nothing to push."""
