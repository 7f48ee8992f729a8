"""Running statistics and discounted returns-to-go."""

import numpy as np
import pytest

from rllib_geppo.core.normalization import RunningMeanStd, discounted_returns_to_go, scale_change


def test_running_stats_equal_full_batch_stats():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    stats = RunningMeanStd((4,))
    for chunk in np.array_split(data, 7):
        stats.update(chunk)
    np.testing.assert_allclose(stats.mean, data.mean(axis=0))
    np.testing.assert_allclose(stats.var, data.var(axis=0))
    assert stats.count == 1000


def test_a_batch_in_any_order_gives_bit_identical_stats():
    # Sampling with several envs, or with other chunk cuts, delivers one iteration's steps in
    # another order; the statistics must not see the difference, not even in rounding.
    rng = np.random.default_rng(1)
    first, batch = rng.normal(0.0, 1e3, size=(100, 3)), rng.normal(5.0, 1e3, size=(1024, 3))
    a, b = RunningMeanStd((3,)), RunningMeanStd((3,))
    for stats, order in ((a, np.arange(1024)), (b, rng.permutation(1024))):
        stats.update(first)
        stats.update(batch[order])
    assert a.mean.tobytes() == b.mean.tobytes() and a.var.tobytes() == b.var.tobytes()


def test_returns_to_go_by_hand():
    # G_2 = 3, G_1 = 2 + 0.5*3 = 3.5, G_0 = 1 + 0.5*3.5 = 2.75
    np.testing.assert_allclose(discounted_returns_to_go(np.array([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0])


def test_state_round_trip():
    stats = RunningMeanStd((2,))
    stats.update(np.array([[1.0, 2.0], [3.0, 6.0]]))
    other = RunningMeanStd((2,))
    other.set_state(stats.get_state())
    np.testing.assert_allclose(other.std, np.sqrt([1.0, 4.0] + np.array(1e-8)))
    assert other.count == pytest.approx(2)


def test_a_first_reward_after_equal_returns_changes_no_scale():
    # Sparse rewards: every return 0 so far, the std at its floor; the first reward is no jump.
    stats = RunningMeanStd()
    stats.update(np.zeros(500))
    assert scale_change(stats, np.r_[np.zeros(499), 1.0]) == 1.0
    stats.update(np.r_[np.zeros(499), 1.0])
    assert scale_change(stats, np.full(500, 1e4)) > 1000  # a real jump still shows
