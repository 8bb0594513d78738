import math
import typing
from types import SimpleNamespace

import attrs
import pytest
import torch

from corl.builtin.policy import grpo, rloo
from corl.builtin.policy.config import GRPOConfig, PolicyConfig
from corl.builtin.policy.losses import LOSS_AGGREGATIONS, clipped_loss, grpo_advantages, rloo_advantages
from corl.builtin.policy.optimizer import SCHEDULES, lr_multiplier
from corl.context import Context
from corl.errors import ConfigError
from corl.testing import ToyAgent
from corl.types import Rollout


def test_grpo_advantages_hand_computed():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = grpo_advantages(r, eps=0.0 + 1e-6)
    std0 = math.sqrt(((0.5**2) * 4) / 3)  # unbiased std of [1,0,0,1]
    assert adv[0].tolist() == pytest.approx([0.5 / std0, -0.5 / std0, -0.5 / std0, 0.5 / std0], rel=1e-5)
    std1 = math.sqrt((3 * 0.25**2 + 0.75**2) / 3)
    assert adv[1].tolist() == pytest.approx([0.25 / std1] * 3 + [-0.75 / std1], rel=1e-5)
    assert adv[2].tolist() == [0.0] * 4  # no signal in a group that agrees


def test_dr_grpo_is_mean_centred_only():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert grpo_advantages(r, scale=False).tolist() == [[0.5, -0.5, -0.5, 0.5]]


def test_rloo_leave_one_out():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    assert rloo_advantages(r)[0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # RLOO = n/(n-1) x mean-centred
    assert rloo_advantages(r)[0].tolist() == pytest.approx((grpo_advantages(r, scale=False) * 4 / 3)[0].tolist())


def test_clipped_loss_values():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.0, 1.5, 0.5]]))  # ratios 1, 1.5, 0.5
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    loss, stats = clipped_loss(new, old, torch.tensor([1.0]), mask, clip=0.2)
    # positive advantage: -min(r, clip(r)) = -1, -1.2, -0.5
    assert float(loss) == pytest.approx(-(1 + 1.2 + 0.5))
    assert float(stats["clip_frac"]) == 2
    loss, _ = clipped_loss(new, old, torch.tensor([-1.0]), mask, clip=0.2)
    # negative advantage: -min(-r, -clip(r)) = max(r, clip(r)) = 1, 1.5, 0.8
    assert float(loss) == pytest.approx(1 + 1.5 + 0.8)


def test_clipped_loss_masks_and_gradient():
    old = torch.zeros(1, 2)
    new = torch.zeros(1, 2, requires_grad=True)
    loss, _ = clipped_loss(new, old, torch.tensor([2.0]), torch.tensor([[1.0, 0.0]]), clip=0.2)
    loss.backward()
    assert new.grad.tolist() == [[-2.0, 0.0]]  # masked token has no gradient


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    _, stats = clipped_loss(old, old, torch.tensor([0.0]), mask, clip=0.2, ref_logprobs=old, kl=0.1)
    assert float(stats["kl"]) == 0.0
    ref = torch.log(torch.tensor([[0.5, 0.25]]))
    loss, stats = clipped_loss(old, old, torch.tensor([0.0]), mask, clip=0.2, ref_logprobs=ref, kl=0.1)
    expected = sum(math.exp(x) - x - 1 for x in (math.log(0.5), math.log(0.25)))
    assert float(stats["kl"]) == pytest.approx(expected)
    assert float(loss) == pytest.approx(0.1 * expected)


def test_groups_with_equal_rewards_get_zero_advantage_whatever_the_value():
    r = torch.tensor([[1 / 3] * 4, [2 / 3] * 4, [1.0, 0.0, 0.0, 0.0]])
    adv = grpo_advantages(r)
    assert adv[:2].abs().max() == 0 and adv[2].abs().sum() > 0
    assert grpo_advantages(r, scale=False)[:2].abs().max() == 0


# -- options: clip-higher, loss aggregation, learning-rate schedules --------------------------------



def test_clip_higher_lets_a_positive_advantage_grow_further():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[0.7, 1.25, 1.5]]))
    mask = torch.ones(1, 3)
    # symmetric: ratios clipped to [0.8, 1.2]; positive advantage -> -min(r, clip(r)) = -0.7, -1.2, -1.2
    loss, stats = clipped_loss(new, old, torch.tensor([1.0]), mask, clip=0.2)
    assert float(loss) == pytest.approx(-(0.7 + 1.2 + 1.2)) and float(stats["clip_frac"]) == 3
    # DAPO's clip-higher, [0.8, 1.28]: 1.25 is inside now, 1.5 stops at 1.28
    loss, stats = clipped_loss(new, old, torch.tensor([1.0]), mask, clip=0.2, clip_high=0.28)
    assert float(loss) == pytest.approx(-(0.7 + 1.25 + 1.28)) and float(stats["clip_frac"]) == 2
    # negative advantage: max(r, clip(r)) = 0.8, 1.25, 1.5 (the low side still clips at 0.8)
    loss, _ = clipped_loss(new, old, torch.tensor([-1.0]), mask, clip=0.2, clip_high=0.28)
    assert float(loss) == pytest.approx(0.8 + 1.25 + 1.5)


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


@pytest.mark.parametrize("name, expected", [
    ("token_mean", (6 + 4 + 2) / 6),  # every token of the minibatch alike: long sequences weigh more
    ("sequence_mean", (6 / 3 + 4 / 1 + 2 / 2) / 3),  # each sequence's mean, then the mean over sequences
    ("constant", (6 + 4 + 2) / (3 * 10)),  # Dr. GRPO: the token sum over sequences x a constant (10 tokens)
])
def test_loss_aggregations_by_hand(name, expected):
    aggregation = LOSS_AGGREGATIONS[name]
    value = aggregation.numerator(PER_TOKEN, MASK) / aggregation.denominator(float(MASK.sum()), 3.0, 10)
    assert float(value) == pytest.approx(expected)
    # split into micro-batches, the numerators add up to the same loss (gradient accumulation)
    parts = sum(aggregation.numerator(PER_TOKEN[i:i + 1], MASK[i:i + 1]) for i in range(3))
    assert float(parts) == pytest.approx(float(aggregation.numerator(PER_TOKEN, MASK)))


def test_the_options_are_registered_by_name_and_match_the_config_choices():
    for field, registry in (("loss_aggregation", LOSS_AGGREGATIONS), ("lr_schedule", SCHEDULES)):
        assert set(typing.get_args(typing.get_type_hints(PolicyConfig)[field])) == set(registry)
    with pytest.raises(ValueError, match="loss_aggregation = 'constant' needs loss_constant"):
        PolicyConfig(loss_aggregation="constant")


def test_lr_schedules_by_hand():
    def lrs(schedule, warmup, total=10, floor=0.1):
        config = PolicyConfig(lr_schedule=schedule, warmup_steps=warmup, min_lr_ratio=floor)
        return [lr_multiplier(config, step, total) for step in range(total)]

    assert lrs("constant", 0) == [1.0] * 10
    assert lrs("constant", 3)[:4] == [0.25, 0.5, 0.75, 1.0]  # warmup: step k of 3 uses k / 4
    linear = lrs("linear", 2)  # after 2 warmup steps, 8 steps from 1 down towards 0.1
    assert linear[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert linear[2:] == pytest.approx([0.1 + 0.9 * (1 - k / 8) for k in range(8)])
    cosine = lrs("cosine", 2)
    assert cosine[2:] == pytest.approx([0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)])
    assert cosine[6] == pytest.approx(0.55) and lrs("cosine", 0, floor=0.0)[0] == 1.0


def toy_rollout(lengths):
    """Two prompts x two samples with completion ``lengths`` (tokens), sampled at theta = 0."""
    width = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths])
    texts = (("a", "b"), ("c", "d"))
    batch = SimpleNamespace(completion_mask=mask, old_logprobs=torch.zeros(len(lengths), width))
    return Rollout(agent="toy", prompts=(), texts=texts, lengths=((1, 1), (1, 1)), confidences=((0, 0), (0, 0)),
                   batch=batch)


def gradient(config, lengths, rewards, factory=grpo):
    agent = ToyAgent(len(lengths), max(lengths))
    optimizer = factory(attrs.evolve(config, max_grad_norm=1e9), Context(spec=None, seed=0, agent=agent))
    seen = []
    optimizer.optim.step = lambda: seen.append(agent.theta.grad.clone())  # the gradient the update would use
    optimizer.step(toy_rollout(lengths), rewards)
    return seen[0]


@pytest.mark.parametrize("aggregation, weight", [
    ("token_mean", lambda n, lengths: 1 / sum(lengths)),
    ("sequence_mean", lambda n, lengths: 1 / (n * len(lengths))),
    ("constant", lambda n, lengths: 1 / (len(lengths) * 8)),
])
def test_each_aggregation_weighs_tokens_as_stated_in_a_real_update(aggregation, weight):
    lengths, rewards = [3, 1, 2, 4], [[1.0, 0.0], [0.0, 1.0]]
    config = GRPOConfig(loss_aggregation=aggregation, loss_constant=8, scale_rewards=False)
    grad = gradient(config, lengths, rewards)
    # at ratio 1 (unclipped), d loss / d theta[row, t] = -advantage[row] * weight of that token; advantages +-0.5
    for row, (n, adv) in enumerate(zip(lengths, [0.5, -0.5, -0.5, 0.5])):
        expected = [-adv * weight(n, lengths)] * n + [0.0] * (max(lengths) - n)
        assert grad[row].tolist() == pytest.approx(expected), (aggregation, row)


def test_grpo_and_rloo_share_the_loss_and_differ_in_advantages():
    lengths, rewards = [2, 2, 2, 2], [[1.0, 0.0], [0.0, 1.0]]
    config = PolicyConfig(loss_aggregation="sequence_mean")
    g = gradient(GRPOConfig(loss_aggregation="sequence_mean", scale_rewards=False), lengths, rewards)
    r = gradient(config, lengths, rewards, factory=rloo)
    assert torch.allclose(r, 2 * g)  # RLOO's advantage with two samples is twice the mean-centred one


def run_steps(optimizer, steps, start=0):
    out = []
    for step in range(start, start + steps):
        rewards = [[1.0, 0.0], [float(step % 2), 1.0 - step % 2]]
        out.append(optimizer.step(toy_rollout([3, 1, 2, 4]), rewards)["lr"])
    return out


def test_the_schedule_checkpoints_and_resumes_bit_identically(tmp_path):
    spec = SimpleNamespace(run=SimpleNamespace(steps=6))
    config = GRPOConfig(lr=0.1, lr_schedule="cosine", warmup_steps=2, min_lr_ratio=0.1, minibatches=2)

    def fresh():
        agent = ToyAgent(4, 4)
        return agent, grpo(config, Context(spec=spec, seed=0, agent=agent))

    torch.manual_seed(0)
    agent, whole = fresh()
    lrs = run_steps(whole, 6)
    assert lrs == pytest.approx([0.1 * lr_multiplier(config, k, 6) for k in range(6)])
    assert whole.optim.param_groups[0]["lr"] == lrs[-1]

    torch.manual_seed(0)
    first, before = fresh()
    head = run_steps(before, 3)
    before.save_state(str(tmp_path))
    rng, theta = torch.get_rng_state(), first.theta.detach().clone()
    second, after = fresh()
    with torch.no_grad():
        second.theta.copy_(theta)
    after.load_state(str(tmp_path))
    torch.set_rng_state(rng)
    tail = run_steps(after, 3, start=3)
    assert head + tail == lrs and torch.equal(second.theta, agent.theta)  # bit for bit


def test_a_schedule_needs_the_runs_length():
    with pytest.raises(ConfigError, match=r"lr_schedule = 'linear' needs the run's length \(run.steps\)"):
        grpo(GRPOConfig(lr_schedule="linear"), Context(spec=None, seed=0, agent=ToyAgent(1, 1)))


def test_a_step_reports_only_what_it_measured():
    """A skipped update (no sample with a learning signal) measured no loss, entropy, clip fraction or
    gradient norm: those are left out, not 0.0 (a report's entropy panel would show a collapse). KL is
    measured only against a reference (kl > 0)."""
    agent = ToyAgent(4, 4)
    optimizer = grpo(GRPOConfig(), Context(spec=None, seed=0, agent=agent))
    skipped = optimizer.step(toy_rollout([3, 1, 2, 4]), [[1.0, 1.0], [0.0, 0.0]])  # every group flat
    assert skipped["active_fraction"] == 0.0 and skipped["nonfinite"] == 0.0
    assert not {"loss", "entropy", "kl", "clip_frac", "grad_norm"} & set(skipped)
    updated = optimizer.step(toy_rollout([3, 1, 2, 4]), [[1.0, 0.0], [0.0, 1.0]])
    assert {"loss", "entropy", "clip_frac", "grad_norm"} <= set(updated) and "kl" not in updated
    with_kl = grpo(GRPOConfig(kl=0.1), Context(spec=None, seed=0, agent=ToyAgent(4, 4)))
    assert "kl" in with_kl.step(toy_rollout([3, 1, 2, 4]), [[1.0, 0.0], [0.0, 1.0]])


def adamw_steps(fused: bool, monkeypatch, steps: int = 6):
    """The toy agent's weights after ``steps`` GRPO updates (weight decay on), and how often torch's fused
    AdamW kernel ran."""
    calls = []
    kernel = torch._fused_adamw_
    monkeypatch.setattr(torch, "_fused_adamw_", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    torch.manual_seed(0)
    agent = ToyAgent(4, 4)
    with torch.no_grad():
        agent.theta.normal_()
    optimizer = grpo(GRPOConfig(lr=1e-2, weight_decay=0.1, fused=fused), Context(spec=None, seed=0, agent=agent))
    for i in range(steps):
        optimizer.step(toy_rollout([3, 1, 2, 4]), [[1.0, float(i % 3)], [float(i % 2), 0.5]])
    return agent.theta.detach().clone(), len(calls), optimizer


def test_fused_adamw_is_taken_and_equals_the_per_tensor_loop(monkeypatch, tmp_path):
    fused, fused_calls, optimizer = adamw_steps(True, monkeypatch)
    loop, loop_calls, _ = adamw_steps(False, monkeypatch)
    assert fused_calls == 6 and loop_calls == 0  # the fused kernel ran on every step, and only when asked
    assert not torch.equal(fused, torch.zeros_like(fused))
    # float rounding only: the kernel computes the same update in another order (documented: 1e-6 relative)
    assert torch.allclose(fused, loop, rtol=1e-6, atol=1e-7)
    # a checkpoint written by the loop loads into a fused optimizer without changing its kernel
    _, _, plain = adamw_steps(False, monkeypatch, steps=1)
    plain.save_state(str(tmp_path))
    optimizer.load_state(str(tmp_path))
    assert all(group["fused"] for group in optimizer.optim.param_groups)


def test_parameters_without_a_fused_kernel_take_the_per_tensor_loop():
    from corl.builtin.policy.optimizer import fusable

    assert fusable([torch.zeros(2, requires_grad=True)])
    assert not fusable([])
    assert not fusable([torch.zeros(2, dtype=torch.int64)])
    assert not fusable([torch.zeros(2, device="meta")])  # a device type without the kernel
