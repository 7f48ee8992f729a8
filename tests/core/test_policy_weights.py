"""Policy weights against the paper's known answers (Theorems 2-5, Lemma 4)."""

import numpy as np
import pytest

from rllib_geppo.core.policy_weights import (
    check_weights,
    clip_multiple,
    effective_sample_size,
    policy_weights,
    with_lag,
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


def test_scalarized_tradeoff_is_the_authors_later_program():
    # jqueeney/geppo, optimize_weights.py (later version), B = 2, tradeoff = 0.5.
    nu = policy_weights(2, 20, tradeoff=0.5)
    np.testing.assert_allclose(nu, [0.507, 0.333, 0.160], atol=2e-3)
    assert clip_multiple(nu) == pytest.approx(0.605, abs=1e-3)


def test_mixed_tradeoff_is_the_neurips_mix():
    # The NeurIPS release's M_targ='mix': the 0.5/0.5 average of the two extreme solutions.
    nu = policy_weights(2, 20, tradeoff=0.5, tradeoff_rule="mixed")
    np.testing.assert_allclose(nu, [0.511, 0.317, 0.122, 0.05], atol=2e-3)
    assert clip_multiple(nu) == pytest.approx(0.584, abs=1e-3)


@pytest.mark.parametrize("rule", ["scalarized", "mixed"])
def test_tradeoff_moves_between_the_two_programs(rule):
    ess, tv = policy_weights(2, 20, tradeoff=1.0), policy_weights(2, 20, tradeoff=0.0)
    mid = policy_weights(2, 20, tradeoff=0.5, tradeoff_rule=rule)
    assert len(tv) <= len(mid) <= len(ess)
    assert clip_multiple(ess) < clip_multiple(mid) < clip_multiple(tv)
    assert effective_sample_size(tv, 1) < effective_sample_size(mid, 1) < effective_sample_size(ess, 1)


def test_ppo_is_a_single_weight():
    np.testing.assert_array_equal(policy_weights(1, 20), [1.0])
    assert clip_multiple([1.0]) == 1.0


@pytest.mark.parametrize(
    "batch_multiple,tradeoff,rule,size",
    [
        (2, 1.0, "scalarized", 3),
        (2, 0.0, "scalarized", 2),
        (3, 1.0, "scalarized", 5),
        # The later code scores each M by normalised ESS and TV losses: B = 3 at 0.5 gives
        # losses 0.5*[1, 0.375, 0] + 0.5*[0, 0.5, 1] -> M = 4; B = 2 at 0.5 ties at M = 2.
        (3, 0.5, "scalarized", 4),
        (2, 0.5, "scalarized", 2),
        # The NeurIPS mix: M = ceil(mean(B, 2B - 1)).
        (2, 0.5, "mixed", 3),
        (3, 0.5, "mixed", 4),
    ],
)
def test_uniform_weights(batch_multiple, tradeoff, rule, size):
    nu = policy_weights(batch_multiple, 20, kind="uniform", tradeoff=tradeoff, tradeoff_rule=rule)
    np.testing.assert_allclose(nu, np.full(size, 1 / size))
    assert clip_multiple(nu) == pytest.approx(2 / (size + 1))  # Theorems 2-3


def test_lag_shifts_the_weights_and_keeps_the_ess():
    # Overlapped sampling, B = 2, d = 1 (docs/overlapped_sampling.md): nu = [0, .4, .3, .2, .1],
    # E[i + 1] = 3, so eps = 0.2 / 3; the ESS stays n / 0.3.
    lagged = with_lag(policy_weights(2, 20), 1)
    np.testing.assert_allclose(lagged, [0.0, 0.4, 0.3, 0.2, 0.1], atol=1e-6)
    assert clip_multiple(lagged) == pytest.approx(1 / 3)
    assert effective_sample_size(lagged, 1024) == pytest.approx(1024 / 0.3)
    np.testing.assert_array_equal(with_lag([1.0], 0), [1.0])


def test_small_weights_are_dropped_and_renormalised():
    nu = policy_weights(4, 20, tradeoff=0.3)
    assert np.all(nu > 0.01) and nu.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_multiple": 0}, "^`batch_multiple` must be an integer >= 1; got 0"),
        ({"batch_multiple": 2.5}, "^`batch_multiple` must be an integer >= 1; got 2.5"),
        ({"batch_multiple": 3, "max_policies": 2}, "^`max_policies` must be an integer >= 3"),
        ({"batch_multiple": 2, "tradeoff": 1.5}, r"^`tradeoff` must be in \[0, 1\]"),
        ({"batch_multiple": 2, "kind": "greedy"}, "^`kind` must be one of"),
        ({"batch_multiple": 2, "tradeoff_rule": "average"}, "^`tradeoff_rule` must be one of"),
    ],
)
def test_bad_inputs_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        policy_weights(**kwargs)


@pytest.mark.parametrize("weights", [[], [0.5, 0.6], [1.2, -0.2], [float("nan")]])
def test_check_weights_rejects_non_distributions(weights):
    with pytest.raises(ValueError, match="policy weights"):
        check_weights(weights)
