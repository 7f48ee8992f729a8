"""The FIFO sample store: capacity, ages, per-version weights, copies, state."""

import pytest

from rllib_geppo.sample_store import SampleStore


def batch(num_episodes: int, length: int) -> list:
    return [list(range(length)) for _ in range(num_episodes)]  # anything with len()


def test_fifo_keeps_the_last_m_batches():
    store = SampleStore(capacity=3)
    for version in range(5):
        store.add(batch(2, 5), version)
    assert [b.version for b in store.batches] == [2, 3, 4]
    assert store.ages() == [0, 1, 2]
    assert store.num_steps == 30


def test_ages_follow_versions_not_positions():
    store = SampleStore(capacity=4)
    store.add(batch(1, 4), version=3)
    store.add(batch(1, 4), version=5)  # e.g. an iteration whose batch was lost
    assert store.ages() == [0, 2]


def test_weights_by_age_while_filling_and_full():
    nu = [0.4, 0.3, 0.2, 0.1]
    store = SampleStore(capacity=4)
    store.add(batch(1, 10), version=0)
    assert store.weights_by_version(nu) == pytest.approx({0: 1.0})
    store.add(batch(1, 10), version=1)
    # nu cut to ages {0, 1} -> [0.4, 0.3] / 0.7, times M_active = 2 -> mean weight 1.
    assert store.weights_by_version(nu) == pytest.approx({1: 0.8 / 0.7, 0: 0.6 / 0.7})
    for version in range(2, 6):
        store.add(batch(1, 10), version)
    weights = store.weights_by_version(nu)
    assert weights == pytest.approx({5: 1.6, 4: 1.2, 3: 0.8, 2: 0.4})


def test_mean_weight_is_one_with_unequal_batches():
    store = SampleStore(capacity=2)
    store.add(batch(1, 30), version=0)
    store.add(batch(1, 10), version=1)
    weights = store.weights_by_version([0.6, 0.4])
    assert (weights[0] * 30 + weights[1] * 10) / 40 == pytest.approx(1.0)
    assert weights[1] / weights[0] == pytest.approx(1.5)


def test_episodes_for_update_are_copies():
    store = SampleStore(capacity=2)
    store.add(batch(1, 3), version=0)
    copies = store.episodes_for_update()
    copies[0].append("phantom")
    assert len(store.batches[0].episodes[0]) == 3


def test_versions_must_increase():
    store = SampleStore(capacity=2)
    store.add(batch(1, 3), version=4)
    with pytest.raises(ValueError, match="versions must increase"):
        store.add(batch(1, 3), version=4)


def test_state_round_trip():
    store = SampleStore(capacity=3)
    for version in range(4):
        store.add(batch(1, version + 1), version)
    restored = SampleStore(capacity=3)
    restored.set_state(store.get_state())
    assert [b.version for b in restored.batches] == [1, 2, 3]
    assert restored.num_steps == store.num_steps


def test_active_weights_skip_missing_ages_and_sum_to_one():
    store = SampleStore(capacity=4)
    store.add(batch(1, 10), version=3)
    store.add(batch(1, 10), version=5)  # age 1 missing
    assert store.active_weights([0.4, 0.3, 0.2, 0.1]) == pytest.approx({5: 0.4 / 0.6, 3: 0.2 / 0.6})
