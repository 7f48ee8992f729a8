"""The generalized clipped objective, TV estimate and lr rule."""

import math

import pytest
import torch

from rllib_geppo.core.objective import (
    adapt_lr,
    clip_fraction,
    clipped_surrogate_loss,
    entropy_bonus,
    geppo_losses,
    mean_kl,
    ratio,
    standardize_advantages,
    surrogate,
    tv_estimate,
    tv_target,
)


def ppo_loss(logp, old_logp, adv, eps):
    """PPO's clipped surrogate (Schulman et al. 2017), written independently."""
    ratio = torch.exp(logp - old_logp)
    return -torch.mean(torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv))


def test_equals_ppo_on_policy_with_unit_weights():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(256, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(256, generator=g, dtype=torch.float64)
    adv = torch.randn(256, generator=g, dtype=torch.float64)
    ones = torch.ones(256, dtype=torch.float64)
    ours = clipped_surrogate_loss(ratio(logp, old), ones, adv, ones, 0.2)
    torch.testing.assert_close(ours, ppo_loss(logp, old, adv, 0.2))


def test_clip_range_is_centred_at_pik_over_mu():
    # mu = 1, pi_k = 2 (center 2), eps = 0.1. rho = 2.5 is outside [1.9, 2.1].
    logp = torch.tensor([math.log(2.5), math.log(2.5)], requires_grad=True)
    mu, pik = torch.zeros(2), torch.full((2,), math.log(2.0))
    adv = torch.tensor([1.0, -1.0])
    loss = clipped_surrogate_loss(ratio(logp, mu), ratio(pik, mu), adv, torch.ones(2), 0.1)
    # A > 0: clipped term -2.1 is the max -> loss 0.5*(-2.1); A < 0: -rho*A = 2.5 wins.
    assert loss.item() == pytest.approx(0.5 * (-2.1 + 2.5))
    loss.backward()
    # Clipping blocks a further increase of rho for A > 0: zero gradient there.
    assert logp.grad[0].item() == 0.0
    assert logp.grad[1].item() == pytest.approx(0.5 * 2.5)  # d/dlogp of rho/2


def test_gradient_zero_below_range_for_negative_advantage():
    # rho = 1.5 < center - eps = 1.9 and A < 0: clipping blocks further decrease.
    logp = torch.tensor([math.log(1.5)], requires_grad=True)
    loss = clipped_surrogate_loss(
        ratio(logp, torch.zeros(1)), torch.full((1,), 2.0), torch.tensor([-1.0]), torch.ones(1), 0.1
    )
    loss.backward()
    assert logp.grad.item() == 0.0


def test_weights_scale_each_sample():
    logp = torch.zeros(2, requires_grad=True)
    loss = clipped_surrogate_loss(
        ratio(logp, torch.zeros(2)), torch.ones(2), torch.ones(2), torch.tensor([1.5, 0.5]), 0.2
    )
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-0.75, -0.25]))


def test_standardization_centres_ratio_weighted_advantages():
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(1000, generator=g) * 3 + 2
    center = torch.exp(0.2 * torch.randn(1000, generator=g))
    w = torch.rand(1000, generator=g) + 0.5
    out = standardize_advantages(adv, center, w)
    assert (center * w * out).mean().item() == pytest.approx(0.0, abs=1e-5)
    # With r = w = 1 it is ordinary standardisation.
    plain = standardize_advantages(adv, torch.ones(1000), torch.ones(1000))
    torch.testing.assert_close(plain, (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8))


def test_standardization_over_the_last_dimension_is_per_minibatch():
    g = torch.Generator().manual_seed(3)
    adv, center, w = (
        torch.randn(3, 50, generator=g),
        torch.rand(3, 50, generator=g) + 0.5,
        torch.rand(3, 50, generator=g),
    )
    rows = torch.stack([standardize_advantages(adv[i], center[i], w[i]) for i in range(3)])
    torch.testing.assert_close(standardize_advantages(adv, center, w), rows)


def test_tv_estimate_converges_to_exact_gaussian_tv():
    # mu = pi_k = N(0, 1), pi = N(0.5, 1): TV = 2*Phi(0.25) - 1.
    g = torch.Generator().manual_seed(0)
    actions = torch.randn(400_000, generator=g, dtype=torch.float64)
    normal = torch.distributions.Normal
    mu_logp = normal(0.0, 1.0).log_prob(actions)
    pi_logp = normal(0.5, 1.0).log_prob(actions)
    exact = 2 * normal(0.0, 1.0).cdf(torch.tensor(0.25, dtype=torch.float64)) - 1
    estimate = tv_estimate(ratio(pi_logp, mu_logp), torch.ones_like(actions), torch.ones_like(actions))
    assert estimate.item() == pytest.approx(exact.item(), abs=3e-3)


def test_tv_estimate_off_policy_behaviour():
    # Samples from mu = N(0, 1); pi_k = N(0.3, 1), pi = N(0.8, 1): the estimate targets
    # E_mu[|pi - pi_k| / mu] / 2 = TV(pi, pi_k) = 2*Phi(0.25) - 1.
    g = torch.Generator().manual_seed(2)
    actions = torch.randn(400_000, generator=g, dtype=torch.float64)
    normal = torch.distributions.Normal
    mu, pik, pi = (normal(m, 1.0).log_prob(actions) for m in (0.0, 0.3, 0.8))
    exact = 2 * normal(0.0, 1.0).cdf(torch.tensor(0.25, dtype=torch.float64)) - 1
    ones = torch.ones_like(actions)
    assert tv_estimate(ratio(pi, mu), ratio(pik, mu), ones).item() == pytest.approx(exact.item(), abs=5e-3)


def test_clip_fraction_counts_ratios_outside_the_range():
    rho = torch.tensor([1.0, 1.05, 1.3, 0.7])
    assert clip_fraction(rho, torch.ones(4), 0.2).item() == pytest.approx(0.5)


@pytest.mark.parametrize("tv,expected", [(0.06, 1e-3 / 1.03), (0.04, 1e-3), (0.02, 1e-3 * 1.03)])
def test_adapt_lr(tv, expected):
    # eps = 0.1: target eps/2 = 0.05, lower threshold beta*eps/2 = 0.025.
    assert adapt_lr(1e-3, tv, 0.1, factor=0.03, min_ratio=0.5) == pytest.approx(expected)


def test_geppo_losses_standardise_then_weight():
    # mu = pi_k = pi (rho = center = 1), A = [1, 2], w = [1.5, 0.5]: w A = [1.5, 1.0], so the
    # mean is mean(w A) / mean(w) = 1.25, the scale std(w A) = 0.25, and A' = [-1, 3]. Inside the
    # clip range d(loss)/d(logp_i) = -w_i A'_i / 2 = [0.75, -0.75].
    logp, zeros, ones = torch.zeros(2, requires_grad=True), torch.zeros(2), torch.ones(2)
    weights = torch.tensor([1.5, 0.5])
    advantages = standardize_advantages(torch.tensor([1.0, 2.0]), ones, weights)
    policy, value = geppo_losses(
        logp=logp,
        behaviour_logp=zeros,
        center=ones,
        advantages=advantages,
        values=torch.tensor([0.0, 1.0]),
        value_targets=torch.tensor([2.0, 1.0]),
        weights=weights,
        clip_eps=0.1,
    )
    policy.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.75, -0.75]))
    assert value.item() == pytest.approx(0.5 * (1.5 * 4 + 0.5 * 0) / 2)


def test_tv_target_is_half_the_clip_range():
    assert tv_target(0.1) == pytest.approx(0.05)


def test_adapt_lr_with_beta_zero_only_falls():
    assert adapt_lr(1e-3, 0.0, 0.1, factor=0.03, min_ratio=0.0) == pytest.approx(1e-3)


def test_entropy_bonus_is_subtracted_with_the_sample_weights():
    # The setting of test_geppo_losses_standardise_then_weight, plus entropies H = [1, 3] and
    # entropy_coeff 0.1: the bonus is mean(w H) = (1.5 * 1 + 0.5 * 3) / 2 = 1.5, so the policy
    # loss drops by 0.15, d(loss)/dH = -0.1 * w / 2 = [-0.075, -0.025], the value loss stays.
    def losses(entropy_coeff, entropy=None):
        return geppo_losses(
            logp=torch.zeros(2),
            behaviour_logp=torch.zeros(2),
            center=torch.ones(2),
            advantages=torch.tensor([-1.0, 3.0]),
            values=torch.tensor([0.0, 1.0]),
            value_targets=torch.tensor([2.0, 1.0]),
            weights=torch.tensor([1.5, 0.5]),
            clip_eps=0.1,
            entropy=entropy,
            entropy_coeff=entropy_coeff,
        )

    entropy = torch.tensor([1.0, 3.0], requires_grad=True)
    (plain_policy, plain_value), (policy, value) = losses(0.0), losses(0.1, entropy)
    assert policy.item() == pytest.approx(plain_policy.item() - 0.15)
    assert value.item() == pytest.approx(plain_value.item())
    policy.backward()
    torch.testing.assert_close(entropy.grad, torch.tensor([-0.075, -0.025]))
    with pytest.raises(ValueError, match="no entropy was given"):
        losses(0.1)


def test_entropy_bonus_pushes_a_gaussian_log_std_up():
    # H(N(m, s)) = log s + log(2 pi e) / 2 per dimension: d(-c * mean(w H)) / d(log s) = -c mean(w).
    log_std = torch.tensor([0.2, -0.4], requires_grad=True)
    dist = torch.distributions.Normal(torch.zeros(3, 2), log_std.exp().expand(3, 2))
    weights = torch.tensor([0.5, 1.0, 2.0])
    (-0.01 * entropy_bonus(dist.entropy().sum(-1), weights)).backward()
    torch.testing.assert_close(log_std.grad, torch.full((2,), -0.01 * 3.5 / 3))


def test_unclipped_surrogate_and_mean_kl_by_hand():
    # GeTRPO's objective: mean(w rho A) = (2 * 1.2 * 1 + 0 * 0.5 * -2) / 2; no clip at rho = 1.2.
    rho, adv, w = torch.tensor([1.2, 0.5]), torch.tensor([1.0, -2.0]), torch.tensor([2.0, 0.0])
    assert surrogate(rho, adv, w).item() == pytest.approx(1.2)
    assert mean_kl(torch.tensor([0.01, 0.03]), torch.tensor([1.5, 0.5])).item() == pytest.approx(0.015)
