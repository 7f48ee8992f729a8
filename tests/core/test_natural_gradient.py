"""The natural-gradient step against hand-derived values and autograd's Hessian."""

import math

import pytest
import torch
from torch import nn
from torch.distributions import Normal, kl_divergence
from torch.func import functional_call
from torch.nn.utils import parameters_to_vector

from rllib_geppo.core.natural_gradient import (
    KL_FACTOR,
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    kl_bound,
    natural_gradient_step,
    step_scale,
    unflatten,
)

F64 = torch.float64


def counted(matrix):
    """``v -> matrix @ v`` that counts its calls."""
    calls = []

    def fvp(v):
        calls.append(1)
        return matrix @ v

    return fvp, calls


def test_kl_bound():
    assert kl_bound(0.2) == pytest.approx(0.02)  # TRPO / VMPO
    assert kl_bound(0.1) == pytest.approx(0.005)  # GeTRPO / GeVMPO at B = 2 (clip multiple 0.5)


def test_conjugate_gradient_first_step_and_exact_solution():
    # F = [[4, 1], [1, 3]], b = [1, 2]: x = F^-1 b = [1/11, 7/11].
    f = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=F64)
    b = torch.tensor([1.0, 2.0], dtype=F64)
    # One step from 0 along b: alpha = b'b / b'Fb = 5 / 20.
    fvp, _ = counted(f)
    torch.testing.assert_close(conjugate_gradient(fvp, b, iterations=1), torch.tensor([0.25, 0.5], dtype=F64))
    fvp, calls = counted(f)
    x = conjugate_gradient(fvp, b)
    torch.testing.assert_close(x, torch.tensor([1 / 11, 7 / 11], dtype=F64), rtol=0, atol=1e-12)
    assert len(calls) == 2  # exact after n = 2 steps; the residual test ends it there


def test_conjugate_gradient_takes_as_many_steps_as_distinct_eigenvalues():
    # An SPD 6x6 matrix with 3 distinct eigenvalues: exact after 3 steps, not 6.
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=F64))
    f = q @ torch.diag(torch.tensor([1.0, 1.0, 2.0, 2.0, 5.0, 5.0], dtype=F64)) @ q.T
    b = torch.arange(1.0, 7.0, dtype=F64)
    fvp, calls = counted(f)
    x = conjugate_gradient(fvp, b)
    torch.testing.assert_close(x, torch.linalg.solve(f, b), rtol=0, atol=1e-10)
    assert len(calls) == 3


def test_conjugate_gradient_stops_at_its_iteration_cap():
    f = torch.diag(torch.arange(1.0, 6.0, dtype=F64))  # 5 distinct eigenvalues
    fvp, calls = counted(f)
    conjugate_gradient(fvp, torch.ones(5, dtype=F64), iterations=3)
    assert len(calls) == 3


class TinyGaussian(nn.Module):
    """A linear Gaussian policy: mean = W s + c, state-independent log-std."""

    def __init__(self):
        super().__init__()
        self.mean = nn.Linear(3, 2, dtype=F64)
        self.log_std = nn.Parameter(torch.tensor([-0.3, 0.2], dtype=F64))

    def forward(self, obs):
        return Normal(self.mean(obs), self.log_std.exp())


def test_unflatten_follows_parameters_to_vector():
    torch.manual_seed(0)
    policy = TinyGaussian()
    obs = torch.randn(4, 3, dtype=F64)
    like = dict(policy.named_parameters())
    dist = functional_call(policy, unflatten(parameters_to_vector(policy.parameters()), like), (obs,))
    torch.testing.assert_close(dist.mean, policy(obs).mean)
    torch.testing.assert_close(dist.stddev, policy(obs).stddev)
    with pytest.raises(ValueError, match="has 3 entries, the parameters 10"):
        unflatten(torch.zeros(3), like)


def test_fisher_vector_product_is_the_hessian_of_the_weighted_kl():
    torch.manual_seed(1)
    policy = TinyGaussian()
    obs = torch.randn(5, 3, dtype=F64)
    weights = torch.tensor([0.4, 0.4, 0.3, 0.2, 0.1], dtype=F64) * 5 / 1.4
    like = dict(policy.named_parameters())
    theta_k = parameters_to_vector(policy.parameters()).detach()
    with torch.no_grad():
        pi_k = policy(obs)

    def kl_fn(theta):
        pi = functional_call(policy, unflatten(theta, like), (obs,))
        return torch.mean(weights * kl_divergence(pi_k, pi).sum(-1))

    # At theta_k (where the KL and its gradient vanish) and off it.
    for theta in (theta_k, theta_k + 0.1 * torch.randn(theta_k.shape, dtype=F64)):
        hessian = torch.autograd.functional.hessian(kl_fn, theta)
        fvp = fisher_vector_product(kl_fn, theta, damping=0.01)
        for seed in range(3):
            v = torch.randn(theta.shape, generator=torch.Generator().manual_seed(seed), dtype=F64)
            torch.testing.assert_close(fvp(v), hessian @ v + 0.01 * v)
    # The Fisher matrix at theta_k is positive semi-definite; the damping makes F definite.
    assert torch.linalg.eigvalsh(torch.autograd.functional.hessian(kl_fn, theta_k)).min() > -1e-12


def test_step_scale_meets_the_kl_bound_of_the_quadratic_model():
    # F = diag(2, 8), g = [2, 4]: x = [1, 0.5], x'Fx = 4; delta = 0.005: scale sqrt(0.01 / 4).
    f = torch.diag(torch.tensor([2.0, 8.0], dtype=F64))
    g = torch.tensor([2.0, 4.0], dtype=F64)
    x = torch.tensor([1.0, 0.5], dtype=F64)
    assert step_scale(x, f @ x, 0.005).item() == pytest.approx(0.05)
    step = natural_gradient_step(g, lambda v: f @ v, 0.005)
    torch.testing.assert_close(step, torch.tensor([0.05, 0.025], dtype=F64))
    assert 0.5 * (step @ f @ step).item() == pytest.approx(0.005)


def test_no_step_for_a_zero_gradient_or_a_zero_bound():
    f = torch.eye(3, dtype=F64)
    fvp, calls = counted(f)
    assert not natural_gradient_step(torch.full((3,), 1e-9, dtype=F64), fvp, 0.02).any()
    assert not natural_gradient_step(torch.ones(3, dtype=F64), fvp, 0.0).any()
    assert not calls  # no conjugate gradient either time


def line_search(evaluate, **kwargs):
    """Search from theta = 0 along the unit step [1, 0] with max_kl = 1.5 * 0.02."""
    kwargs.setdefault("max_kl", KL_FACTOR * 0.02)
    return backtracking_line_search(
        torch.zeros(2, dtype=F64), torch.tensor([1.0, 0.0], dtype=F64), evaluate, **kwargs
    )


def test_line_search_accepts_the_full_step():
    result = line_search(lambda theta: (theta[0], 0.01 * theta[0] ** 2))
    assert result.accepted and result.backtracks == 0 and result.step_fraction == 1.0
    torch.testing.assert_close(result.params, torch.tensor([1.0, 0.0], dtype=F64))
    assert (result.surrogate, result.kl, result.improvement) == pytest.approx((1.0, 0.01, 1.0))


def test_line_search_shrinks_until_the_kl_fits():
    # KL = t^2 at fraction t; max_kl 0.3: t^2 = 1, 0.5 fail, 0.25 passes -> 2 backtracks, t = 1/2.
    result = line_search(lambda theta: (theta[0], theta[0] ** 2), max_kl=0.3)
    assert result.accepted and result.backtracks == 2
    assert result.step_fraction == pytest.approx(0.5)
    torch.testing.assert_close(result.params, torch.tensor([0.5, 0.0], dtype=F64))


def test_line_search_shrinks_until_the_surrogate_does_not_fall():
    # Surrogate t (0.2 - t) rises from 0 only for t <= 0.2: 2^(-j/2) first there at j = 5 (0.177).
    result = line_search(lambda theta: (theta[0] * (0.2 - theta[0]), 0.0))
    assert result.accepted and result.backtracks == 5
    assert result.step_fraction == pytest.approx(2**-2.5)
    assert result.improvement == pytest.approx(2**-2.5 * (0.2 - 2**-2.5))


def test_line_search_accepts_an_unchanged_surrogate():
    # The authors refuse only a fall ("improve < 0"): a flat surrogate is accepted at once.
    assert line_search(lambda theta: (1.0, 0.0)).backtracks == 0


def test_line_search_keeps_the_old_parameters_when_every_try_fails():
    calls = []

    def evaluate(theta):
        calls.append(theta.clone())
        return -theta[0], 0.0  # every step lowers the surrogate

    theta_k = torch.tensor([0.3, -0.7], dtype=F64)
    result = backtracking_line_search(theta_k, torch.ones(2, dtype=F64), evaluate, max_kl=0.03)
    assert not result.accepted
    assert (result.backtracks, result.step_fraction, result.kl, result.improvement) == (10, 0.0, 0.0, 0.0)
    torch.testing.assert_close(result.params, theta_k)
    assert result.surrogate == pytest.approx(-0.3)
    assert len(calls) == 11  # the old parameters, then 10 tries
    assert calls[-1][0].item() == pytest.approx(0.3 + 2**-4.5)  # the last try: 9 shrinks


def test_line_search_refuses_a_non_finite_try():
    # The authors' comparisons let NaN through; here it counts as a failed try.
    def evaluate(theta):
        return theta[0], (math.nan if theta[0] > 0.6 else 0.0)

    result = line_search(evaluate)
    assert result.backtracks == 2 and result.step_fraction == pytest.approx(0.5)
