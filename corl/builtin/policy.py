"""Policy optimizers: GRPO and RLOO share one clipped policy-gradient loss and differ only in
the advantage estimator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from corl.plugins import hookimpl
from corl.types import Rollout

v = attrs.validators
ZERO_STD = 1e-6  # a group's rewards within this std are "all equal"


@attrs.frozen
class PolicyConfig:
    lr: float = attrs.field(default=2e-5, validator=v.gt(0), metadata={"help": "AdamW learning rate"})
    weight_decay: float = attrs.field(default=0.0, validator=v.ge(0), metadata={"help": "AdamW weight decay"})
    clip: float = attrs.field(default=0.2, validator=v.gt(0), metadata={"help": "PPO ratio clip epsilon"})
    kl: float = attrs.field(default=0.0, validator=v.ge(0), metadata={
        "help": "weight of the k3 KL to a frozen reference (0: no reference model is kept)"})
    max_grad_norm: float = attrs.field(default=1.0, validator=v.gt(0), metadata={"help": "gradient clipping norm"})
    epochs: int = attrs.field(default=1, validator=v.ge(1), metadata={"help": "passes over each step's samples"})
    minibatches: int = attrs.field(default=1, validator=v.ge(1), metadata={"help": "optimizer updates per pass"})
    micro_batch_size: int = attrs.field(default=256, validator=v.ge(1), metadata={
        "help": "sequences per forward/backward (gradient accumulation; bounds memory)"})


@attrs.frozen
class GRPOConfig(PolicyConfig):
    scale_rewards: bool = attrs.field(default=True, metadata={
        "help": "divide by the group's reward std (GRPO); false: mean-centred only (Dr. GRPO)"})


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


def clipped_loss(logprobs, old_logprobs, advantages, mask, clip: float, ref_logprobs=None, kl: float = 0.0):
    """PPO-clipped policy-gradient loss summed over tokens (divide by the token count for a token mean).

    ``advantages`` is per sequence; ``ref_logprobs`` adds ``kl`` times the k3 estimator of
    KL(policy || reference). Returns ``(loss_sum, stats)`` with stats summed over tokens.
    """
    import torch

    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(1)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    stats = {"clip_frac": (((ratio - 1).abs() > clip).float() * mask).sum().detach()}
    if ref_logprobs is not None:
        log_ratio = ref_logprobs - logprobs
        k3 = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + kl * k3
        stats["kl"] = (k3 * mask).sum().detach()
    return (per_token * mask).sum(), stats


class PolicyGradient:
    """One agent's optimizer: advantages from rewards, then clipped updates with AdamW."""

    def __init__(self, config: PolicyConfig, ctx, advantages: Callable):
        import torch

        self.config, self.agent, self.advantages = config, ctx.agent, advantages
        # the agent's data-parallel group: gradients and token counts add up over its ranks
        self.group = ctx.group
        self.params = [p for p in self.agent.parameters() if p.requires_grad]
        self.optim = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay)
        if config.kl > 0:
            self.agent.freeze_reference()

    def step(self, rollout: Rollout, rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        import torch

        cfg, batch, group = self.config, rollout.batch, self.group
        n_train = len(rewards[0])
        r = torch.tensor(rewards, dtype=torch.float32)
        adv = self.advantages(r).flatten()
        rows = torch.tensor([p * rollout.n + s for p in range(len(rewards)) for s in range(n_train)])
        mask_all = batch.completion_mask
        totals = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "entropy": 0.0}
        norms, n_tokens_seen, n_active, nonfinite = [], 0.0, 0, False
        for _ in range(cfg.epochs):
            # The agent's own RNG stream (corl.runtime.rng): seeded by the run, saved in checkpoints.
            order = torch.randperm(len(rows)) if cfg.minibatches > 1 else torch.arange(len(rows))
            # exactly `minibatches` updates, on every rank of a data-parallel group alike
            for mb in order.tensor_split(cfg.minibatches):
                # Without KL, a sample with zero advantage adds exactly zero loss: skip its compute.
                active = mb if cfg.kl > 0 else mb[adv[mb].abs() > 1e-8]
                n_active += len(active)
                # token mean over the whole minibatch (over every rank of the group)
                tokens, group_active = group.sum([mask_all[rows[mb]].sum(), len(active)])
                tokens = max(tokens, 1.0)
                if group_active == 0:
                    continue
                # (a rank with nothing active here still joins the group's reductions below)
                for micro in active.split(cfg.micro_batch_size) if len(active) else ():
                    sel = rows[micro]
                    mask = mask_all[sel].float()
                    logp, entropy = self.agent.token_logprobs(batch, sel)
                    ref = None
                    if cfg.kl > 0:
                        with torch.no_grad():
                            ref, _ = self.agent.token_logprobs(batch, sel, reference=True)
                    loss, stats = clipped_loss(logp, batch.old_logprobs[sel], adv[micro], mask, cfg.clip, ref, cfg.kl)
                    if not torch.isfinite(loss):
                        nonfinite = True
                        break
                    (loss / tokens).backward()
                    totals["loss"] += float(loss.detach())
                    totals["entropy"] += float((entropy * mask).sum())
                    for k, val in stats.items():
                        totals[k] += float(val)
                    n_tokens_seen += float(mask.sum())
                nonfinite = group.sum([nonfinite])[0] > 0  # one rank's NaN skips the group's update
                if not nonfinite:
                    group.sum_gradients(self.params)
                    norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                    nonfinite = not torch.isfinite(norm)
                    if not nonfinite:
                        norms.append(float(norm))
                        self.optim.step()
                self.optim.zero_grad(set_to_none=True)
                if nonfinite:  # skip the rest of this step; the failing minibatch changed neither weights nor moments
                    break
            if nonfinite:
                break
        out = {k: val / max(n_tokens_seen, 1.0) for k, val in totals.items()}
        out["grad_norm"] = sum(norms) / len(norms) if norms else 0.0
        out["active_fraction"] = n_active / (len(rows) * cfg.epochs)  # samples with a learning signal
        out["frac_reward_zero_std"] = float((r.std(dim=1) <= ZERO_STD).float().mean())  # groups with no signal
        out["nonfinite"] = float(nonfinite)
        return out


    def save_state(self, path: str) -> None:
        import torch

        Path(path).mkdir(parents=True, exist_ok=True)
        torch.save(self.optim.state_dict(), Path(path) / "optimizer.pt")

    def load_state(self, path: str) -> None:
        import torch

        # weights_only: a checkpoint is data, never code to unpickle.
        self.optim.load_state_dict(torch.load(Path(path) / "optimizer.pt", weights_only=True))


def grpo(config: GRPOConfig, ctx) -> PolicyGradient:
    return PolicyGradient(config, ctx, lambda r: grpo_advantages(r, scale=config.scale_rewards))


def rloo(config: PolicyConfig, ctx) -> PolicyGradient:
    return PolicyGradient(config, ctx, rloo_advantages)


@hookimpl
def corl_register_components(registry):
    registry.add("optimizer", "grpo", grpo, GRPOConfig, help="group-normalised advantages, clipped PG loss")
    registry.add("optimizer", "rloo", rloo, PolicyConfig, help="leave-one-out baseline, clipped PG loss")
