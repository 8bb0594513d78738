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
        # the agent's ranks: token counts add up over them; a sharded agent's engine reduces its gradients
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
            # exactly `minibatches` updates, on every rank of a sharded group alike
            for mb in order.tensor_split(cfg.minibatches):
                # Without KL, a sample with zero advantage adds exactly zero loss: skip its compute.
                active = mb if cfg.kl > 0 else mb[adv[mb].abs() > 1e-8]
                n_active += len(active)
                # token mean over the whole minibatch (over every rank of the group)
                tokens, group_active = group.sum([mask_all[rows[mb]].sum(), len(active)])
                tokens = max(tokens, 1.0)
                if group_active == 0:
                    continue
                micros = list(active.split(cfg.micro_batch_size)) if len(active) else []
                # A sharded agent's forward and backward passes are collective: every rank of the group runs
                # as many micro-batches as the busiest one, a rank short of data on zero-weight passes.
                for i in range(int(group.max([len(micros)])[0]) if group.size > 1 else len(micros)):
                    if i >= len(micros):
                        self._idle_pass(batch, rows[:1])
                        continue
                    micro = micros[i]
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
                        if group.size == 1:
                            break
                    # (in a group, a non-finite loss still goes backward: the passes are collective; no update follows)
                    (loss / tokens).backward()
                    if nonfinite:
                        continue
                    totals["loss"] += float(loss.detach())
                    totals["entropy"] += float((entropy * mask).sum())
                    for k, val in stats.items():
                        totals[k] += float(val)
                    n_tokens_seen += float(mask.sum())
                nonfinite = group.sum([nonfinite])[0] > 0  # one rank's NaN skips the group's update
                if not nonfinite:
                    norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                    if hasattr(norm, "full_tensor"):  # a sharded agent's norm: a DTensor of partial sums
                        norm = norm.full_tensor()
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


    def _idle_pass(self, batch, rows) -> None:
        """A forward and backward pass that adds nothing: a sharded agent's rank with no micro-batch
        left joins the collectives of the others' passes."""
        import torch

        logp, _ = self.agent.token_logprobs(batch, rows)
        if self.config.kl > 0:
            with torch.no_grad():
                self.agent.token_logprobs(batch, rows, reference=True)
        (logp.sum() * 0.0).backward()

    def _state_file(self) -> Path:
        """Each rank of a group keeps its own shard of the moments (rank 0's name is the one-rank name)."""
        return Path("optimizer.pt" if self.group.size == 1 else f"optimizer.rank{self.group.rank:03d}.pt")

    def save_state(self, path: str) -> None:
        import torch

        Path(path).mkdir(parents=True, exist_ok=True)
        state = self.optim.state_dict()
        # a sharded agent's moments are DTensors: this rank's shard is saved as a plain tensor
        state["state"] = {k: {n: t.to_local() if hasattr(t, "to_local") else t for n, t in s.items()}
                          for k, s in state["state"].items()}
        torch.save(state, Path(path) / self._state_file())

    def load_state(self, path: str) -> None:
        import torch

        # weights_only: a checkpoint is data, never code to unpickle.
        state = torch.load(Path(path) / self._state_file(), weights_only=True)
        params = [p for g in self.optim.param_groups for p in g["params"]]
        for k, s in state["state"].items():
            p = params[k]
            if hasattr(p, "device_mesh"):  # the shard back into a DTensor laid out like its parameter
                from torch.distributed.tensor import DTensor

                s.update({n: DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                                stride=p.stride()) for n, t in s.items() if t.shape == p.to_local().shape})
        self.optim.load_state_dict(state)


def grpo(config: GRPOConfig, ctx) -> PolicyGradient:
    return PolicyGradient(config, ctx, lambda r: grpo_advantages(r, scale=config.scale_rewards))


def rloo(config: PolicyConfig, ctx) -> PolicyGradient:
    return PolicyGradient(config, ctx, rloo_advantages)


@hookimpl
def corl_register_components(registry):
    registry.add("optimizer", "grpo", grpo, GRPOConfig, help="group-normalised advantages, clipped PG loss")
    registry.add("optimizer", "rloo", rloo, PolicyConfig, help="leave-one-out baseline, clipped PG loss")
