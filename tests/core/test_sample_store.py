"""Segments, layouts and the FIFO sample store: capacity, ages, per-version weights, lag, state."""

import numpy as np
import pytest

from rllib_geppo.core import segments
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.sample_store import SampleStore
from rllib_geppo.core.segments import Segment, describe_nonfinite, lay_out


def segment(steps: int, version: int, *, terminated: bool = False, seed: int = 0) -> Segment:
    rng = np.random.default_rng(seed)
    return Segment(
        obs=rng.normal(size=(steps + 1, 3)),
        actions=rng.normal(size=(steps, 2)),
        rewards=rng.normal(size=steps),
        behaviour_logp=rng.normal(size=steps),
        versions=np.full(steps, version),
        terminated=terminated,
        episode_id="e",
        first_step=10,
    )


def batch(version: int, steps: int = 10, chunks: int = 1) -> list[Segment]:
    return [segment(steps, version, seed=i) for i in range(chunks)]


def test_layout_closes_each_segment_with_a_phantom_row():
    first, second = segment(3, 7, terminated=True, seed=1), segment(2, 8, seed=2)
    layout = lay_out([first, second])
    np.testing.assert_array_equal(layout[C.LOSS_MASK], [1, 1, 1, 0, 1, 1, 0])
    np.testing.assert_allclose(layout[C.OBS][:4], first.obs, rtol=1e-6)  # s_T in the phantom row
    np.testing.assert_allclose(layout[C.OBS][4:], second.obs, rtol=1e-6)
    np.testing.assert_array_equal(layout[C.TERMINATEDS], [0, 0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(layout[C.VERSION], [7, 7, 7, 7, 8, 8, 8])
    np.testing.assert_allclose(layout[C.REWARDS][[3, 6]], 0.0)
    assert segments.num_steps(layout) == 5


def test_nonfinite_rewards_and_observations_are_located():
    assert describe_nonfinite(segment(4, 0)) is None
    bad = segment(4, 0)
    bad.rewards[2] = np.nan
    assert describe_nonfinite(bad) == "reward = nan at env step 13"  # first_step 10, row 2
    bad.obs[1, 2] = np.inf
    assert describe_nonfinite(bad) == "observation index 2 = inf at env step 11"


def test_fifo_keeps_the_last_m_batches():
    store = SampleStore(capacity=3)
    for version in range(5):
        store.add(batch(version, chunks=2))
    assert [b.version for b in store.batches] == [2, 3, 4]
    assert store.ages(current_version=4) == [0, 1, 2]
    assert store.num_steps == 60


def test_ages_count_from_the_current_policy():
    store = SampleStore(capacity=4)
    store.add(batch(3))
    store.add(batch(5))  # e.g. an iteration whose batch was lost
    assert store.ages(current_version=5) == [0, 2]
    assert store.ages(current_version=6) == [1, 3]  # overlapped sampling: the newest is 1 old


def test_weights_by_age_while_filling_and_full():
    nu = [0.4, 0.3, 0.2, 0.1]
    store = SampleStore(capacity=4)
    store.add(batch(0))
    assert store.weights_by_version(nu, 0) == pytest.approx({0: 1.0})
    store.add(batch(1))
    # nu cut to ages {0, 1} -> [0.4, 0.3] / 0.7, times M_active = 2 -> mean weight 1.
    assert store.weights_by_version(nu, 1) == pytest.approx({1: 0.8 / 0.7, 0: 0.6 / 0.7})
    for version in range(2, 6):
        store.add(batch(version))
    assert store.weights_by_version(nu, 5) == pytest.approx({5: 1.6, 4: 1.2, 3: 0.8, 2: 0.4})


def test_lagged_weights_skip_age_zero():
    # Overlapped sampling: pi_6 updates on versions 2..5, weighted by [0, .4, .3, .2, .1].
    store = SampleStore(capacity=4)
    for version in range(2, 6):
        store.add(batch(version))
    weights = store.weights_by_version([0.0, 0.4, 0.3, 0.2, 0.1], current_version=6)
    assert weights == pytest.approx({5: 1.6, 4: 1.2, 3: 0.8, 2: 0.4})


def test_every_sample_of_one_age_weighs_nu_whatever_its_version_holds():
    # Versions of 50 (age 1, nu 0.6) and 100 samples (age 0, nu 0.4): each sample weighs nu at
    # its age, scaled to mean 1 over the 150: w_v = nu_v x 150 / (0.6 x 50 + 0.4 x 100).
    store = SampleStore(capacity=2)
    store.add(batch(0, steps=50))
    store.add(batch(1, steps=100))
    weights = store.weights_by_version([0.4, 0.6], 1)
    assert weights == pytest.approx({0: 0.6 * 150 / 70, 1: 0.4 * 150 / 70})
    assert weights[0] * 50 / 150 == pytest.approx(3 / 7)  # version 0's share: 30 of 70
    assert (weights[0] * 50 + weights[1] * 100) / 150 == pytest.approx(1.0)  # mean weight 1
    # Kish's ESS of those weights: 70^2 / (0.36 x 50 + 0.16 x 100) samples, fewer than 150.
    assert store.effective_sample_size([0.4, 0.6], 1) == pytest.approx(4900 / 34)


def test_a_version_of_few_samples_takes_a_share_in_proportion_to_them():
    # A multi-agent module's versions of 64, 16, 2 and 64 samples (ages 3 to 0): the 2 samples
    # of version 13 take 0.3 x 2 / 35.8 of the objective, where nu_v x N / n_v gave them 30%.
    nu, store = [0.4, 0.3, 0.2, 0.1], SampleStore(capacity=4)
    for version, steps in ((11, 64), (12, 16), (13, 2), (14, 64)):
        store.add(batch(version, steps=steps))
    weights = store.weights_by_version(nu, 14)
    assert weights == pytest.approx(
        {11: 0.1 * 146 / 35.8, 12: 0.2 * 146 / 35.8, 13: 0.3 * 146 / 35.8, 14: 0.4 * 146 / 35.8}
    )
    assert weights[13] * 2 / 146 == pytest.approx(0.6 / 35.8)  # 1.7% of the objective
    assert store.effective_sample_size(nu, 14) == pytest.approx(35.8**2 / 11.7)  # 109.5 of 146 samples


def test_with_equal_batches_the_weights_are_nu_times_m_as_before():
    # The single-agent case: n samples per version, w_v = nu_v x M exactly as the earlier rule
    # nu_v x N / n_v, and the paper's ESS n / sum(nu^2).
    nu, store = [0.4, 0.3, 0.2, 0.1], SampleStore(capacity=4)
    for version in range(4):
        store.add(batch(version, steps=256))
    weights = store.weights_by_version(nu, 3)
    earlier = {v: a * store.num_steps / 256 for v, a in store.active_weights(nu, 3).items()}
    assert weights == pytest.approx(earlier, rel=1e-15, abs=0)
    assert weights == pytest.approx({3: 1.6, 2: 1.2, 1: 0.8, 0: 0.4})
    assert store.effective_sample_size(nu, 3) == pytest.approx(256 / 0.3)


def test_rows_are_weighted_by_their_own_version():
    # A batch whose first chunk still came from the previous policy (as on RLlib's old stack).
    store = SampleStore(capacity=3)
    store.add([segment(5, 3, seed=0), segment(5, 4, seed=1)])
    assert store.batches[0].version == 4
    assert store.batches[0].steps_by_version == {3: 5, 4: 5}
    assert store.weights_by_version([0.6, 0.4], 4) == pytest.approx({4: 1.2, 3: 0.8})


def test_a_version_spanning_two_batches_counts_all_its_samples():
    # Turn-based agents: a move left hanging at a sample's end keeps its version (3) and lands in
    # the next batch, beside version 4's moves. Version 3 has 10 + 2 samples, version 4 has 6.
    store = SampleStore(capacity=3)
    store.add(batch(3, steps=10))
    store.add([segment(2, 3, seed=5), segment(6, 4, seed=6)])
    assert store.steps_by_version() == {3: 12, 4: 6}
    weights = store.weights_by_version([0.5, 0.5], 4)
    assert weights == pytest.approx({3: 1.0, 4: 1.0})  # equal nu: every sample alike
    layout_versions = store.update_layout()[C.VERSION][store.update_layout()[C.LOSS_MASK]]
    assert np.mean([weights[v] for v in layout_versions]) == pytest.approx(1.0)


def test_a_batch_of_carried_over_moves_alone_is_stored():
    # An agent that acts rarely: the next batch holds only its move carried over from the last
    # sample, whose newest version is the previous batch's.
    store = SampleStore(capacity=2)
    store.add(batch(4))
    store.add(batch(4, steps=1))
    assert store.ages(current_version=5) == [1, 1]
    assert store.weights_by_version([0.0, 1.0], 5) == pytest.approx({4: 1.0})
    with pytest.raises(ValueError, match="versions must not decrease: got 3 after 4"):
        store.add(batch(3))


def test_update_layout_concatenates_oldest_first():
    store = SampleStore(capacity=2)
    store.add(batch(0, steps=3))
    store.add(batch(1, steps=2))
    layout = store.update_layout()
    np.testing.assert_array_equal(layout[C.VERSION], [0, 0, 0, 0, 1, 1, 1])


def test_state_round_trip():
    store = SampleStore(capacity=3)
    for version in range(4):
        store.add(batch(version, steps=version + 1))
    restored = SampleStore(capacity=3)
    restored.set_state(store.get_state())
    assert [b.version for b in restored.batches] == [1, 2, 3]
    assert restored.num_steps == store.num_steps
    np.testing.assert_array_equal(restored.update_layout()[C.OBS], store.update_layout()[C.OBS])


def test_an_empty_store_round_trips():
    """A checkpoint before the first sample, or of a module whose agents have not acted yet."""
    full = SampleStore(capacity=3)
    full.add(batch(0, steps=2))
    full.set_state(SampleStore(capacity=3).get_state())
    assert full.batches == [] and full.num_steps == 0


def test_a_store_checkpointed_as_layouts_still_loads():
    store = SampleStore(capacity=3)
    for version in range(3):
        store.add(batch(version, steps=4, chunks=2))
    legacy = {"capacity": 3, "layouts": [lay_out(b.segments) for b in store.batches]}
    restored = SampleStore(capacity=3)
    restored.set_state(legacy)
    assert [b.steps_by_version for b in restored.batches] == [b.steps_by_version for b in store.batches]
    for name, column in store.update_layout().items():
        np.testing.assert_array_equal(restored.update_layout()[name], column)


def episode(steps: int, *, terminated: bool, episode_id: str, seed: int, version: int = 0) -> Segment:
    """A whole episode of 2-d observations whose rows are distinct."""
    rng = np.random.default_rng(seed)
    return Segment(
        obs=rng.normal(size=(steps + 1, 2)),
        actions=rng.normal(size=(steps, 1)),
        rewards=rng.normal(size=steps),
        behaviour_logp=rng.normal(size=steps),
        versions=np.full(steps, version),
        terminated=terminated,
        truncated=not terminated,
        episode_id=episode_id,
        first_step=0,
    )


def cut(whole: Segment, at: list[int], versions: list[int]) -> list[Segment]:
    """``whole`` cut at the given steps into chunks collected by ``versions``, as sampling does."""
    bounds = [0, *at, len(whole)]
    return [
        Segment(
            obs=whole.obs[a : b + 1],
            actions=whole.actions[a:b],
            rewards=whole.rewards[a:b],
            behaviour_logp=whole.behaviour_logp[a:b],
            versions=np.full(b - a, v),
            terminated=whole.terminated and b == len(whole),
            truncated=whole.truncated and b == len(whole),
            episode_id=whole.episode_id,
            first_step=a,
        )
        for a, b, v in zip(bounds, bounds[1:], versions)
    ]


def test_join_episodes_undoes_the_sampling_cuts():
    a = episode(9, terminated=True, episode_id="a", seed=1)
    b = episode(7, terminated=False, episode_id="b", seed=2)
    chunks_a, chunks_b = cut(a, [3, 6], [0, 1, 2]), cut(b, [4], [0, 1])
    # Two envs sampled side by side: each batch holds one chunk of each episode.
    joined = segments.join_episodes([chunks_a[0], chunks_b[0], chunks_a[1], chunks_b[1], chunks_a[2]])
    assert [s.episode_id for s in joined] == ["a", "b"]
    for whole, got in zip([a, b], joined):
        for name in ("obs", "actions", "rewards", "behaviour_logp"):
            np.testing.assert_array_equal(getattr(got, name), getattr(whole, name))
        assert (got.terminated, got.truncated, got.first_step) == (whole.terminated, whole.truncated, 0)
    np.testing.assert_array_equal(joined[0].versions, [0, 0, 0, 1, 1, 1, 2, 2, 2])


def test_join_episodes_keeps_what_does_not_continue():
    a = episode(6, terminated=False, episode_id="a", seed=1)
    first, second = cut(a, [3], [0, 1])
    gap = Segment(**{**second.__dict__, "first_step": 4})  # a chunk missing in between
    other = Segment(**{**second.__dict__, "episode_id": "z"})
    anonymous = [Segment(**{**c.__dict__, "episode_id": ""}) for c in (first, second)]
    for chunks in ([first, gap], [first, other], anonymous):
        assert len(segments.join_episodes(chunks)) == 2


def test_update_layout_is_the_same_however_sampling_was_split():
    # One episode sampled in 3 iterations, as 1 chunk each or as 2 fragments each: the store
    # lays out the same trajectory (one segment, one phantom row) either way.
    whole = episode(12, terminated=False, episode_id="a", seed=3)
    layouts = []
    for at, versions, per_batch in (([4, 8], [0, 1, 2], 1), ([2, 4, 6, 8, 10], [0, 0, 1, 1, 2, 2], 2)):
        store = SampleStore(capacity=3)
        chunks = cut(whole, at, versions)
        for i in range(0, len(chunks), per_batch):
            store.add(chunks[i : i + per_batch])
        layouts.append(store.update_layout())
    for name, column in layouts[0].items():
        np.testing.assert_array_equal(layouts[1][name], column)
    assert segments.num_steps(layouts[0]) == 12 and len(layouts[0][C.LOSS_MASK]) == 13


def test_active_weights_skip_missing_ages_and_sum_to_one():
    store = SampleStore(capacity=4)
    store.add(batch(3))
    store.add(batch(5))  # age 1 missing
    assert store.active_weights([0.4, 0.3, 0.2, 0.1], 5) == pytest.approx({5: 0.4 / 0.6, 3: 0.2 / 0.6})
