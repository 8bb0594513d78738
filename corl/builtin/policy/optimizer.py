"""One agent's optimizer (:class:`PolicyGradient`): advantages from rewards, then clipped updates
with AdamW over epochs, minibatches and micro-batches, on one rank or a sharded agent's group (whose
passes are collective and whose parameters, gradient norm and moments are DTensors); its state
(the moments and the schedule's step count) saved in checkpoints. The learning rate moves by
:data:`SCHEDULES` (constant, linear, cosine, after an optional linear warmup).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from corl.builtin.policy.config import PolicyConfig
from corl.builtin.policy.losses import LOSS_AGGREGATIONS, ZERO_STD, clipped_loss
from corl.context import Context
from corl.errors import ConfigError
from corl.types import Rollout


def _constant(progress: float, floor: float) -> float:
    return 1.0


def _linear(progress: float, floor: float) -> float:
    return floor + (1 - floor) * (1 - progress)


def _cosine(progress: float, floor: float) -> float:
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


#: ``lr_schedule`` options, by name: the lr multiplier at ``progress`` in [0, 1) of the steps after warmup
SCHEDULES: dict[str, Callable[[float, float], float]] = {"constant": _constant, "linear": _linear, "cosine": _cosine}


def lr_multiplier(config: PolicyConfig, step: int, total: int | None) -> float:
    """The factor on ``lr`` for the agent's ``step``-th update step (0-based) of ``total``."""
    if step < config.warmup_steps:
        return (step + 1) / (config.warmup_steps + 1)
    progress = (step - config.warmup_steps) / max(1, (total or 0) - config.warmup_steps)
    return SCHEDULES[config.lr_schedule](min(progress, 1.0), config.min_lr_ratio)


def fusable(params) -> bool:
    """Whether torch's fused AdamW takes these parameters: floating-point tensors (a sharded agent's
    DTensors too) on one device of a type torch has the fused kernel for."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    devices = {p.device for p in params}
    return (len(devices) == 1 and next(iter(devices)).type in _get_fused_kernels_supported_devices()
            and all(p.is_floating_point() for p in params))


class PolicyGradient:
    """One agent's optimizer: advantages from rewards, then clipped updates with AdamW."""

    def __init__(self, config: PolicyConfig, ctx: Context, advantages: Callable):
        import torch

        self.config, self.agent, self.advantages = config, ctx.agent, advantages
        # the agent's ranks: token counts add up over them; a sharded agent's engine reduces its gradients
        self.group = ctx.group
        self.params = [p for p in self.agent.parameters() if p.requires_grad]
        self.fused = config.fused and fusable(self.params)
        self.optim = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay,
                                       fused=self.fused or None)
        self.aggregation = LOSS_AGGREGATIONS[config.loss_aggregation]
        # the schedule runs over the run's steps; steps_done is checkpointed (save_state)
        self.total = ctx.spec.run.steps if ctx.spec is not None else None  # None: built by hand, outside a run
        self.steps_done = 0
        if config.lr_schedule != "constant" and self.total is None:
            raise ConfigError(f"optimizer: lr_schedule = {config.lr_schedule!r} needs the run's length (run.steps)")
        if config.kl > 0:
            self.agent.freeze_reference()

    def step(self, rollout: Rollout, rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        import torch

        cfg, batch, group, aggregate = self.config, rollout.batch, self.group, self.aggregation
        lr = cfg.lr * lr_multiplier(cfg, self.steps_done, self.total)
        for param_group in self.optim.param_groups:
            param_group["lr"] = lr
        n_train = len(rewards[0])
        r = torch.tensor(rewards, dtype=torch.float32)
        adv = self.advantages(r).flatten()
        rows = torch.tensor([p * rollout.n + s for p in range(len(rewards)) for s in range(n_train)])
        mask_all = batch.completion_mask
        totals = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "entropy": 0.0}  # summed over tokens
        norms, n_tokens_seen, n_active, nonfinite = [], 0.0, 0, False
        for _ in range(cfg.epochs):
            # The agent's own RNG stream (corl.runtime.rng): seeded by the run, saved in checkpoints.
            order = torch.randperm(len(rows)) if cfg.minibatches > 1 else torch.arange(len(rows))
            # exactly `minibatches` updates, on every rank of a sharded group alike
            for mb in order.tensor_split(cfg.minibatches):
                # Without KL, a sample with zero advantage adds exactly zero loss: skip its compute.
                active = mb if cfg.kl > 0 else mb[adv[mb].abs() > 1e-8]
                n_active += len(active)
                # the loss_aggregation's denominator, over the whole minibatch (over every rank of the group)
                tokens, sequences, group_active = group.sum([mask_all[rows[mb]].sum(), len(mb), len(active)])
                denominator = max(aggregate.denominator(tokens, sequences, cfg.loss_constant), 1.0)
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
                    loss, stats = clipped_loss(logp, batch.old_logprobs[sel], adv[micro], mask, cfg.clip, ref, cfg.kl,
                                               cfg.epsilon_high, aggregate.numerator)
                    if not torch.isfinite(loss):
                        nonfinite = True
                        if group.size == 1:
                            break
                    # (in a group, a non-finite loss still goes backward: the passes are collective; no update follows)
                    (loss / denominator).backward()
                    if nonfinite:
                        continue
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
        # What was not measured is left out, never reported as 0: with no token through a backward pass
        # (no active sample, or a skipped update) there is no loss, entropy or clip fraction; with no
        # reference model (kl = 0) no KL; with no optimizer step no gradient norm.
        measured = [k for k in totals if k != "kl" or cfg.kl > 0] if n_tokens_seen else []
        out = {k: totals[k] / n_tokens_seen for k in measured}
        if norms:
            out["grad_norm"] = sum(norms) / len(norms)
        out["active_fraction"] = n_active / (len(rows) * cfg.epochs)  # samples with a learning signal
        out["frac_reward_zero_std"] = float((r.std(dim=1) <= ZERO_STD).float().mean())  # groups with no signal
        out["nonfinite"] = float(nonfinite)
        out["lr"] = lr
        self.steps_done += 1
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
        if self.group.rank == 0:  # the same count on every rank of a group: its first writes it
            (Path(path) / "schedule.json").write_text(json.dumps({"steps_done": self.steps_done, "total": self.total}))

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
        for param_group in self.optim.param_groups:  # the saved groups carry their kernel choice: keep this run's
            param_group["fused"] = self.fused or None
        schedule = Path(path) / "schedule.json"  # absent in checkpoints from before schedules: no step counted
        saved = json.loads(schedule.read_text()) if schedule.exists() else {}
        self.steps_done = saved.get("steps_done", 0)
        # a resumed run with more steps extends the schedule, never re-spans it: its span stays the one the
        # run started with, and the steps past it train at its last lr (docs/how-to/checkpoints.md)
        self.total = saved.get("total") or self.total
