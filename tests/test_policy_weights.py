"""Policy weights against the paper's known answers (Theorems 3-6, Lemma 3)."""

import numpy as np
import pytest

from rllib_geppo.policy_weights import (
    check_weights,
    clip_multiple,
    effective_sample_size,
    policy_weights,
)


def test_paper_default_b2():
    nu = policy_weights(2, 20)
    np.testing.assert_allclose(nu, [0.4, 0.3, 0.2, 0.1], atol=1e-6)
    assert clip_multiple(nu) == pytest.approx(0.5)  # eps_GePPO = 0.2 * 0.5 = 0.1
    assert effective_sample_size(nu, 1024) == pytest.approx(1024 / 0.3)


@pytest.mark.parametrize("batch_multiple", [3, 4, 5])
def test_ess_closed_form(batch_multiple):
    # nu_i proportional to K - i for i < K = 3B - 2, so E[i + 1] = B.
    k = 3 * batch_multiple - 2
    expected = np.arange(k, 0, -1, dtype=float)
    expected /= expected.sum()
    nu = policy_weights(batch_multiple, 20)
    assert len(nu) == k
    np.testing.assert_allclose(nu, expected, atol=1e-5)
    assert clip_multiple(nu) == pytest.approx(1 / batch_multiple, rel=1e-5)


def test_tv_program_b2():
    nu = policy_weights(2, 20, tradeoff=0.0)
    np.testing.assert_allclose(nu, [0.622, 0.333, 0.045], atol=2e-3)
    # The ESS constraint binds: sum nu^2 = 1/B (before pruning, which drops nothing here).
    assert np.sum(nu**2) == pytest.approx(0.5, abs=1e-4)


def test_tradeoff_mixes_between_the_two_programs():
    ess, tv = policy_weights(2, 20, tradeoff=1.0), policy_weights(2, 20, tradeoff=0.0)
    mid = policy_weights(2, 20, tradeoff=0.5)
    assert len(tv) <= len(mid) <= len(ess)
    assert clip_multiple(ess) < clip_multiple(mid) < clip_multiple(tv)


def test_ppo_is_a_single_weight():
    np.testing.assert_array_equal(policy_weights(1, 20), [1.0])
    assert clip_multiple([1.0]) == 1.0


@pytest.mark.parametrize("batch_multiple,tradeoff,size", [(2, 1.0, 3), (2, 0.0, 2), (3, 1.0, 5), (3, 0.5, 4)])
def test_uniform_weights(batch_multiple, tradeoff, size):
    nu = policy_weights(batch_multiple, 20, kind="uniform", tradeoff=tradeoff)
    np.testing.assert_allclose(nu, np.full(size, 1 / size))
    assert clip_multiple(nu) == pytest.approx(2 / (size + 1))  # Theorems 3-4


def test_small_weights_are_dropped_and_renormalised():
    nu = policy_weights(4, 20, tradeoff=0.3)
    assert np.all(nu >= 0.01) and nu.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_multiple": 0}, "batch_multiple must be an integer >= 1"),
        ({"batch_multiple": 2.5}, "batch_multiple must be an integer >= 1"),
        ({"batch_multiple": 3, "max_policies": 2}, "max_policies must be an integer >= 3"),
        ({"batch_multiple": 2, "tradeoff": 1.5}, r"tradeoff must lie in \[0, 1\]"),
        ({"batch_multiple": 2, "kind": "greedy"}, "kind must be one of"),
    ],
)
def test_bad_inputs_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        policy_weights(**kwargs)


@pytest.mark.parametrize("weights", [[], [0.5, 0.6], [1.2, -0.2], [float("nan")]])
def test_check_weights_rejects_non_distributions(weights):
    with pytest.raises(ValueError, match="policy weights"):
        check_weights(weights)
