"""The recipe keys of the policy optimizers (``[agents.optimizer]``): one table for GRPO and RLOO,
GRPO's adding how advantages are scaled."""

from __future__ import annotations

from typing import Literal

import attrs

v = attrs.validators


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
    epsilon_high: float | None = attrs.field(default=None, validator=v.optional(v.gt(0)), metadata={
        "help": "upper ratio clip, 1 + epsilon_high (DAPO's clip-higher, e.g. 0.28); unset: the same as clip"})
    loss_aggregation: Literal["token_mean", "sequence_mean", "constant"] = attrs.field(default="token_mean", metadata={
        "help": "token_mean: over every token of the minibatch (DAPO); sequence_mean: each sequence's token mean, "
                "averaged (GRPO's paper); constant: the token sum over sequences x loss_constant (Dr. GRPO)"})
    loss_constant: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "loss_aggregation = constant: the tokens per sequence the token sum is divided by (Dr. GRPO: the "
                "generation budget, the sampler's max_new_tokens)"})
    lr_schedule: Literal["constant", "linear", "cosine"] = attrs.field(default="constant", metadata={
        "help": "learning rate after warmup, over the run's steps (run.steps): constant, or a linear or cosine "
                "decay to lr x min_lr_ratio"})
    warmup_steps: int = attrs.field(default=0, validator=v.ge(0), metadata={
        "help": "steps of linear warmup: step k of them uses lr x k / (warmup_steps + 1)"})
    min_lr_ratio: float = attrs.field(default=0.0, validator=[v.ge(0), v.le(1)], metadata={
        "help": "where the linear or cosine decay ends, as a fraction of lr"})
    fused: bool = attrs.field(default=True, metadata={
        "help": "AdamW's fused kernel where torch has one for the parameters' device (CPU, GPU): one pass over "
                "all parameters, faster, equal to the per-tensor loop within float rounding (docs/results/performance.md); "
                "false: the per-tensor loop"})

    def __attrs_post_init__(self):
        if self.loss_aggregation == "constant" and not self.loss_constant:
            raise ValueError("loss_aggregation = 'constant' needs loss_constant, the tokens per sequence to divide "
                             "by (Dr. GRPO: the sampler's max_new_tokens)")


@attrs.frozen
class GRPOConfig(PolicyConfig):
    scale_rewards: bool = attrs.field(default=True, metadata={
        "help": "divide by the group's reward std (GRPO); false: mean-centred only (Dr. GRPO)"})
