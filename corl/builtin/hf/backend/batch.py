"""The token-level payload of an hf rollout, and turning decoded tokens into a :class:`~corl.Rollout`.

Shared by the text and vision-language samplers and by the engine bridge (vLLM / SGLang samples
are packed into the same batch), so the agent and its optimizer train on every one alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from corl.builtin.hf.backend.prompts import cut_at_stop
from corl.types import Prompt, Rollout


@attrs.frozen
class SampleBatch:
    """Token-level payload of a rollout, rows prompt-major (row = prompt * n + sample): a
    :class:`corl.types.TokenBatch`, plus the prompt tokens the agent reads again."""

    sequences: object  # [R, P + T] prompt (left-padded) + completion
    attention_mask: object  # [R, P + T], zero on padding and after the first EOS
    completion_mask: object  # [R, T], one up to and including the first EOS
    old_logprobs: object  # [R, T] sampling-time log-probs at ``temperature``
    prompt_len: int
    temperature: float
    truncated: object = None  # [R] bool: the row reached max_new_tokens without an EOS or stop string
    max_new_tokens: int = 0  # the sampler's cap on completion tokens

    @property
    def completion_ids(self):
        return self.sequences[:, self.prompt_len:]

    def select(self, rows) -> SampleBatch:
        import torch

        index = torch.as_tensor(list(rows), dtype=torch.long)
        return attrs.evolve(self, sequences=self.sequences[index], attention_mask=self.attention_mask[index],
                            completion_mask=self.completion_mask[index], old_logprobs=self.old_logprobs[index],
                            truncated=self.truncated[index], **self._select_extra(index.tolist()))

    def _select_extra(self, rows: list[int]) -> dict:
        """What a subclass carries per row besides the tensors (a vision batch: each row's images)."""
        return {}



def rollout(agent, prompts: Sequence[Prompt], n: int, prompt_ids, prompt_mask, completion, logp, cmask,
            temperature: float, stop: Sequence[str] = (), batch_cls=SampleBatch, *, max_new_tokens: int = 0,
            **extra) -> Rollout:
    """A rollout from decoded rows (prompt-major, ``row = prompt * n + sample``).

    ``cmask`` marks each row's own tokens (up to and including the EOS or stop-string token that
    ended it); log-probs outside it are zeroed, texts are decoded without EOS and padding and cut
    at the first stop string, and confidence is the mean log-prob of a row's own tokens. A row of
    ``max_new_tokens`` tokens that ends in neither an EOS nor a stop string was cut off
    (``batch.truncated``); 0: the cap is not known, and no row is called cut off.
    """
    import torch

    tok = agent.tokenizer
    cmask = cmask.long()
    logp = logp * cmask
    lengths = cmask.sum(1)
    body = completion.masked_fill((completion == tok.eos_token_id) | (cmask == 0), tok.pad_token_id)
    decoded = tok.batch_decode(body, skip_special_tokens=True)
    texts = [cut_at_stop(t, stop) for t in decoded]
    conf = (logp.sum(1) / lengths.clamp(min=1)).tolist()
    last = completion.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    stopped = torch.tensor([cut != whole for cut, whole in zip(texts, decoded)], dtype=torch.bool)
    truncated = (lengths >= max_new_tokens) & (last != tok.eos_token_id) & ~stopped.to(lengths.device) \
        & (max_new_tokens > 0)
    batch = batch_cls(sequences=torch.cat([prompt_ids, completion], 1),
                      attention_mask=torch.cat([prompt_mask, cmask], 1), completion_mask=cmask,
                      old_logprobs=logp, prompt_len=prompt_ids.shape[1], temperature=temperature,
                      truncated=truncated.cpu(), max_new_tokens=max_new_tokens, **extra)

    def grid(values):
        return tuple(tuple(values[p * n:(p + 1) * n]) for p in range(len(prompts)))

    return Rollout(agent=agent.name, prompts=tuple(prompts), texts=grid(texts), lengths=grid(lengths.tolist()),
                   confidences=grid(conf), batch=batch)
