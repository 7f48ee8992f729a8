"""Overlapped sampling: every sample is tagged with the policy that really collected it, weights
and clip range follow the lag, no sample is lost or counted twice, checkpoints restore exactly."""

import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns

from rllib_geppo import GePPO, GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.policy_weights import with_lag

N = 256


pytestmark = pytest.mark.usefixtures("local_ray")


def overlapped(remote: bool = True) -> GePPOConfig:
    """GePPO's defaults (one EnvRunner, so sampling overlaps), small. With `remote=False` the
    driver samples, in a thread of its own while the learner updates: the same lag, and no
    EnvRunner process to start where the lag's arithmetic is the subject."""
    config = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .debugging(seed=0)
        .training(train_batch_size_per_learner=N, num_epochs=2, num_minibatches=4)
    )
    return config if remote else config.env_runners(num_env_runners=0).training(overlap_sampling=True)


@pytest.fixture(scope="module")
def run():
    """Six overlapped iterations; the learner's module state of every version it synced."""
    algo = overlapped().build_algo()
    states = {}
    sync = algo._sync_env_runner_weights

    def recording_sync():
        sync()
        learner = algo.learner_group._learner
        states[algo.policy_version] = {
            k: v.clone() for k, v in learner.module[DEFAULT_MODULE_ID].state_dict().items()
        }

    states[0] = {
        k: v.clone() for k, v in algo.learner_group._learner.module[DEFAULT_MODULE_ID].state_dict().items()
    }
    algo._sync_env_runner_weights = recording_sync
    results = [algo.train() for _ in range(6)]
    yield algo, results, states
    algo.stop()


def test_every_sample_is_tagged_with_the_policy_that_collected_it(run):
    algo, _, states = run
    module = algo.learner_group._learner.module[DEFAULT_MODULE_ID].unwrapped()
    current = {k: v.clone() for k, v in module.state_dict().items()}
    try:
        for batch in algo.module_state().store.batches:
            layout = batch.layout
            real = layout[C.LOSS_MASK]
            module.load_state_dict(states[batch.version])
            with torch.no_grad():
                inputs = module.forward_inference({Columns.OBS: torch.as_tensor(layout[C.OBS][real])})
                dist = module.get_train_action_dist_cls().from_logits(inputs[Columns.ACTION_DIST_INPUTS])
                logp = dist.logp(torch.as_tensor(layout[C.ACTIONS][real]))
            torch.testing.assert_close(
                logp, torch.as_tensor(layout[C.BEHAVIOUR_LOGP][real]), atol=2e-5, rtol=0
            )
    finally:
        module.load_state_dict(current)


def test_weights_follow_the_lag_and_the_clip_range_stays_synchronous_geppos(run):
    algo, results, _ = run
    stats = [r["learners"][DEFAULT_MODULE_ID] for r in results]
    assert [s["sample_lag"] for s in stats] == [0, 1, 1, 1, 1, 1]  # the first update is synchronous
    assert all(s["clip_eps"] == pytest.approx(0.1) for s in stats)  # lag_clip_rule="unlagged"
    assert all(s["tv_target"] == pytest.approx(0.05) for s in stats)
    assert stats[-1]["effective_sample_size"] == pytest.approx(N / 0.3)  # the shift keeps the ESS
    # The next update weighs versions k-1 .. k-4 by [.4, .3, .2, .1] (mean weight 1).
    weights = algo.stores.update_inputs(DEFAULT_MODULE_ID).weights_by_version
    k = algo.policy_version
    expected = {k - 1 - age: 4 * nu for age, nu in enumerate([0.4, 0.3, 0.2, 0.1])}
    assert weights == pytest.approx(expected)
    np.testing.assert_allclose(
        algo.stores.lagged_nu(DEFAULT_MODULE_ID), with_lag([0.4, 0.3, 0.2, 0.1], 1), atol=1e-6
    )


def test_the_bound_rule_shrinks_the_clip_range_by_the_lag():
    algo = overlapped(remote=False).training(lag_clip_rule="bound").build_algo()
    try:
        stats = [algo.train()["learners"][DEFAULT_MODULE_ID] for _ in range(2)]
    finally:
        algo.stop()
    assert [s["sample_lag"] for s in stats] == [0, 1]
    assert stats[0]["clip_eps"] == pytest.approx(0.1)
    assert stats[1]["clip_eps"] == pytest.approx(0.2 / 3)  # eps_PPO / (E_nu[i + 1] + lag) = 0.2 / 3
    assert stats[1]["tv_target"] == pytest.approx(0.1 / 3)


def test_no_sample_is_lost_or_counted_twice(run):
    algo, results, _ = run
    assert [r["num_env_steps_sampled_lifetime"] for r in results] == [N * i for i in range(1, 7)]
    assert [b.version for b in algo.module_state().store.batches] == [2, 3, 4, 5]  # contiguous: none skipped
    assert all(b.num_steps == N for b in algo.module_state().store.batches)
    assert algo.policy_version == 6  # six updates, one per iteration


def test_checkpoint_restores_with_nothing_lost_or_duplicated(run, tmp_path):
    algo, results, _ = run
    algo.save_to_path(str(tmp_path))
    restored = GePPO.from_checkpoint(str(tmp_path))
    try:
        assert restored.policy_version == algo.policy_version
        for ours, theirs in zip(restored.module_state().store.batches, algo.module_state().store.batches):
            assert ours.version == theirs.version
            np.testing.assert_array_equal(ours.layout[C.OBS], theirs.layout[C.OBS])
        result = restored.train()
        assert [b.version for b in restored.module_state().store.batches] == [
            3,
            4,
            5,
            6,
        ]  # exactly one new batch
        assert result["num_env_steps_sampled_lifetime"] == results[-1]["num_env_steps_sampled_lifetime"] + N
        assert result["learners"][DEFAULT_MODULE_ID]["sample_lag"] == 1
    finally:
        restored.stop()


def test_a_sample_lag_holds_the_env_runners_weights_back():
    """sample_lag=3 under overlapped sampling: the driver's EnvRunner acts with the policy 2
    updates behind the newest, so every update's youngest batch is 3 old once the lag has built up."""
    algo = overlapped(remote=False).training(sample_lag=3).build_algo()
    try:
        stats = [algo.train()["learners"][DEFAULT_MODULE_ID] for _ in range(6)]
        assert [s["sample_lag"] for s in stats] == [0, 1, 2, 3, 3, 3]
        k = algo.policy_version
        assert [b.version for b in algo.module_state().store.batches] == [k - 6, k - 5, k - 4, k - 3]
        expected = {k - 3 - age: 4 * nu for age, nu in enumerate([0.4, 0.3, 0.2, 0.1])}
        assert algo.stores.update_inputs(DEFAULT_MODULE_ID).weights_by_version == pytest.approx(expected)
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="`sample_lag` must be None or an integer from 1"):
        overlapped().training(sample_lag=0).validate()
