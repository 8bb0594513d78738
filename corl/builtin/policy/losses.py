"""The policy optimizers' maths on tensors: advantages from a group's rewards (GRPO's normalised,
RLOO's leave-one-out), the PPO-clipped policy-gradient loss with its optional k3 KL, and the
``loss_aggregation`` options (:data:`LOSS_AGGREGATIONS`: how a minibatch's per-token losses become
one loss). Nothing here knows of optimizers, ranks or checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

ZERO_STD = 1e-6  # a group's rewards within this std are "all equal"


def grpo_advantages(rewards, scale: bool = True, eps: float = 1e-6):
    """Group-normalised advantages for a [groups, samples] tensor.

    A group whose rewards are all equal (to rounding) carries no signal and gets exactly zero,
    whatever the reward value (e.g. 1/3 from a mean over peers).
    """
    import torch

    centred = rewards - rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    flat = std <= ZERO_STD
    if scale:
        centred = centred / (std + eps)
    return torch.where(flat, torch.zeros_like(centred), centred)


def rloo_advantages(rewards):
    """Leave-one-out baseline: each sample minus the mean of the others in its group."""
    n = rewards.shape[1]
    return (rewards - (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1))


def token_sum(per_token, mask):
    return (per_token * mask).sum()


def sequence_token_means(per_token, mask):
    """Each sequence's token mean, summed over sequences (divided by their count per minibatch)."""
    return ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum()


@attrs.frozen
class Aggregation:
    """How a minibatch's per-token losses become its loss: every micro-batch's ``numerator(per_token,
    mask)`` divided by ``denominator(tokens, sequences, constant)`` of the whole minibatch (its tokens and
    sequences counted over every rank of the agent's group; ``constant``: the config's ``loss_constant``)."""

    numerator: Callable[[Any, Any], Any]
    denominator: Callable[[float, float, float], float]


#: ``loss_aggregation`` options, by name
LOSS_AGGREGATIONS: dict[str, Aggregation] = {
    "token_mean": Aggregation(token_sum, lambda tokens, sequences, constant: tokens),
    "sequence_mean": Aggregation(sequence_token_means, lambda tokens, sequences, constant: sequences),
    "constant": Aggregation(token_sum, lambda tokens, sequences, constant: sequences * constant),
}


def clipped_loss(logprobs, old_logprobs, advantages, mask, clip: float, ref_logprobs=None, kl: float = 0.0,
                 clip_high: float | None = None, aggregate: Callable = token_sum):
    """PPO-clipped policy-gradient loss, the ratio clipped to ``[1 - clip, 1 + clip_high]`` (``clip_high``
    defaults to ``clip``), reduced by ``aggregate(per_token, mask)`` (default: summed over tokens).

    ``advantages`` is per sequence; ``ref_logprobs`` adds ``kl`` times the k3 estimator of
    KL(policy || reference). Returns ``(loss, stats)`` with stats (the loss too) summed over tokens.
    """
    import torch

    high = clip if clip_high is None else clip_high
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(1)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + high) * adv)
    stats = {"clip_frac": (((ratio < 1 - clip) | (ratio > 1 + high)).float() * mask).sum().detach()}
    if ref_logprobs is not None:
        log_ratio = ref_logprobs - logprobs
        k3 = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + kl * k3
        stats["kl"] = (k3 * mask).sum().detach()
    stats["loss"] = token_sum(per_token, mask).detach()  # the reported loss is a token mean, whatever the aggregation
    return aggregate(per_token, mask), stats
