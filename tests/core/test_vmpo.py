"""GeVMPO's temperature, targets and loss against hand-derived values and a brute-force minimum."""

import math

import numpy as np
import pytest
import torch

from rllib_geppo.core.vmpo import (
    importance_mean,
    policy_loss,
    solve_temperature,
    targets,
    targets_kl,
    temperature_dual,
)

F64 = torch.float64
# Six stored samples: standardised-looking advantages, weights of four ages, pi_k / mu ratios.
A = torch.tensor([1.2, -0.4, 0.3, -1.5, 2.0, 0.1], dtype=F64)
W = torch.tensor([1.6, 1.6, 1.2, 1.2, 0.8, 0.4], dtype=F64) * 6 / 6.8
RHO = torch.tensor([1.0, 1.0, 0.9, 1.3, 0.7, 1.1], dtype=F64)


def test_dual_by_hand():
    # A = [0, 1], w = rho = 1, lambda = 1, delta = 0.1: log((e^-1 + e^0) / 2) + 0.1.
    expected = math.log((math.exp(-1.0) + 1.0) / 2.0) + 0.1
    assert temperature_dual(1.0, np.array([0.0, 1.0]), np.ones(2), np.ones(2), 0.1) == pytest.approx(expected)
    # lambda = 2 scales the exponent and the whole: 2 (log((e^-1/2 + 1) / 2) + 0.1).
    expected = 2.0 * (math.log((math.exp(-0.5) + 1.0) / 2.0) + 0.1)
    assert temperature_dual(2.0, np.array([0.0, 1.0]), np.ones(2), np.ones(2), 0.1) == pytest.approx(expected)


def test_weights_and_ratios_enter_the_mean_as_a_product():
    # w rho = [3, 1] on A = [0, 1], lambda = 1: mean exp = (3 e^-1 + 1) / 4.
    value = temperature_dual(1.0, np.array([0.0, 1.0]), np.array([1.5, 2.0]), np.array([2.0, 0.5]), 0.0)
    assert value == pytest.approx(math.log((3.0 * math.exp(-1.0) + 1.0) / 4.0))


@pytest.mark.parametrize("delta", [0.005, 0.02, 0.5])
def test_temperature_is_the_minimum_over_a_fine_grid(delta):
    upper = (A.max() - A.min()).item() / delta
    grid = np.linspace(upper * 1e-5, upper, 200_001)
    a, wr = A.numpy(), (W * RHO).numpy()
    values = grid * (
        np.log((wr[:, None] * np.exp((a - a.max())[:, None] / grid)).mean(0) / wr.mean()) + delta
    )
    best = grid[np.argmin(values)]
    temperature = solve_temperature(A, W, RHO, delta)
    assert 0.0 < temperature < upper
    assert temperature == pytest.approx(best, rel=1e-3)
    assert temperature_dual(temperature, A, W, RHO, delta) <= values.min() + 1e-9


@pytest.mark.parametrize("delta", [0.005, 0.02])
def test_targets_are_normalised_and_their_kl_is_the_bound(delta):
    temperature = solve_temperature(A, W, RHO, delta)
    psi = targets(A, W, RHO, temperature)
    assert importance_mean(psi, W, RHO).item() == pytest.approx(1.0)
    # psi is exp(A / lambda) up to its normaliser, so increasing in A.
    assert torch.equal(torch.argsort(psi), torch.argsort(A))
    torch.testing.assert_close(psi / psi[0], torch.exp((A - A[0]) / temperature))
    # The dual's minimum is where the targets' KL from pi_k's data meets delta.
    assert targets_kl(psi, W, RHO).item() == pytest.approx(delta, rel=1e-3)


def test_targets_do_not_overflow_at_a_small_temperature():
    psi = targets(torch.tensor([0.0, 1000.0], dtype=torch.float32), torch.ones(2), torch.ones(2), 1.0)
    torch.testing.assert_close(psi, torch.tensor([0.0, 2.0]))


def test_no_bound_or_equal_advantages_give_unit_targets():
    assert solve_temperature(A, W, RHO, 0.0) == math.inf
    assert solve_temperature(torch.full((4,), 0.7), torch.ones(4), torch.ones(4), 0.02) == math.inf
    assert torch.equal(targets(A, W, RHO, math.inf), torch.ones_like(A))


def test_policy_loss_by_hand():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    psi = torch.tensor([1.5, 0.5])
    # w rho = [2, 0.5], mean 1.25; terms 2 * 0.5 * 1 and 0.5 * (-0.5) * 2: mean 0.25, / 1.25.
    loss = policy_loss(logp, psi, torch.tensor([2.0, 1.0]), torch.tensor([1.0, 0.5]))
    assert loss.item() == pytest.approx(0.2)
    loss.backward()
    # d/dlogp = -w rho (psi - 1) / (n mean(w rho)) = -[2 * 0.5, 0.5 * -0.5] / 2.5.
    torch.testing.assert_close(logp.grad, torch.tensor([-0.4, 0.1]))
