import math

import pytest
import torch

from corl.builtin.policy import clipped_loss, grpo_advantages, rloo_advantages


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
