"""Policy optimizers: GRPO and RLOO share one clipped policy-gradient loss and differ only in
the advantage estimator.

By reason to change: :mod:`.config` holds their recipe keys, :mod:`.losses` the maths on tensors
(advantages, the clipped loss, the ``loss_aggregation`` options), :mod:`.optimizer` the optimizer
that runs them on one rank or a sharded agent's group, its learning-rate schedules and its
checkpointed state. Options are registered functions looked up by name, not branches.
"""

from __future__ import annotations

from corl.builtin.policy.config import GRPOConfig, PolicyConfig
from corl.builtin.policy.losses import grpo_advantages, rloo_advantages
from corl.builtin.policy.optimizer import PolicyGradient
from corl.context import Context, RegistryView
from corl.hookspecs import hookimpl

__all__ = ["GRPOConfig", "PolicyConfig", "grpo", "rloo"]


def grpo(config: GRPOConfig, ctx: Context) -> PolicyGradient:
    return PolicyGradient(config, ctx, lambda r: grpo_advantages(r, scale=config.scale_rewards))


def rloo(config: PolicyConfig, ctx: Context) -> PolicyGradient:
    return PolicyGradient(config, ctx, rloo_advantages)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("optimizer", "grpo", grpo, GRPOConfig, help="group-normalised advantages, clipped PG loss")
    registry.add("optimizer", "rloo", rloo, PolicyConfig, help="leave-one-out baseline, clipped PG loss")
