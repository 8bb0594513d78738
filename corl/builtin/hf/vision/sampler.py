"""The ``hf_vision`` sampler: batched ``generate`` over the agent's own model, each row with its
own image inputs (:meth:`~corl.builtin.hf.vision.agent.VisionAgent.forward_inputs`), keeping the
sampling-time log-probs from the raw logits as the ``hf`` sampler does."""

from __future__ import annotations

from collections.abc import Sequence

from corl.builtin.hf.backend.batch import rollout
from corl.builtin.hf.backend.common import ImageTextAgent, check_length, sampler_key, serves
from corl.builtin.hf.vision.agent import VisionSampleBatch
from corl.builtin.hf.vision.config import VisionSamplerConfig
from corl.context import Context
from corl.types import Prompt, Rollout


class VisionSampler:
    """Batched ``generate`` with each row's image inputs: the ``hf_vision`` sampler."""

    def __init__(self, config: VisionSamplerConfig, ctx: Context | None = None):
        self.config = config
        self.check = ctx.stop.check if ctx is not None else (lambda: None)  # between generate calls
        if ctx is not None and ctx.agent is not None:
            serves(ctx, "hf_vision", ImageTextAgent)
            if ctx.task is not None:
                check_length(ctx.agent, ctx.task, config.max_new_tokens, shortlist=8, key=sampler_key(ctx))

    def sample(self, agent: ImageTextAgent, prompts: Sequence[Prompt], n: int, *, greedy: bool = False,
               temperature: float | None = None) -> Rollout:
        import torch

        cfg, tok = self.config, agent.tokenizer
        temp = 1.0 if greedy else (temperature or cfg.temperature)
        ids, mask, images = agent.encode(prompts)
        prompt_ids, prompt_mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        row_images = tuple(images[p] for p in range(len(prompts)) for _ in range(n))
        eos, pad = tok.eos_token_id, tok.pad_token_id
        pieces = []
        with torch.no_grad():
            for start in range(0, len(prompt_ids), cfg.batch_size):
                self.check()
                chunk = slice(start, start + cfg.batch_size)
                inputs = agent.forward_inputs(prompt_ids[chunk], prompt_mask[chunk], row_images[chunk])
                out = agent.model.generate(
                    **inputs, do_sample=not greedy, temperature=temp if not greedy else None,
                    top_p=cfg.top_p if not greedy else None, top_k=cfg.top_k or None,
                    min_p=cfg.min_p or None if not greedy else None,
                    repetition_penalty=cfg.repetition_penalty if cfg.repetition_penalty != 1.0 else None,
                    max_new_tokens=cfg.max_new_tokens, pad_token_id=pad, eos_token_id=eos,
                    suppress_tokens=agent.media_tokens or None, output_logits=True, return_dict_in_generate=True)
                completion = out.sequences[:, prompt_ids.shape[1]:].cpu()
                # Raw logits, not processed scores: top-p / min-length masks must not leak in.
                logits = torch.stack(out.logits, 1).float().cpu() / temp
                pieces.append((completion, logits.log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)))
        width = max(c.shape[1] for c, _ in pieces)
        completion = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad) for c, _ in pieces])
        logp = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for _, lp in pieces])
        is_eos = completion == eos
        cmask = (is_eos.cumsum(1) - is_eos.long()) == 0  # up to and including the first EOS
        return rollout(agent, prompts, n, prompt_ids, prompt_mask, completion, logp, cmask, temp,
                       batch_cls=VisionSampleBatch, images=row_images, max_new_tokens=cfg.max_new_tokens)

    def sync(self, agent: ImageTextAgent) -> None:
        """Sampling reads the trainer's own weights: nothing to push."""
