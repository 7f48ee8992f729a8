"""RLlib's schedules against hand-computed values."""

import pytest

from rllib_geppo.core.schedules import is_schedule, value_at


def test_a_schedule_is_linear_between_its_points_and_holds_its_last_value():
    schedule = [[0, 1.0], [100, 0.5], [300, 0.0]]
    assert [value_at(schedule, t) for t in (0, 50, 100, 200, 300, 10**6)] == pytest.approx(
        [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    )
    assert value_at(0.01, 10**6) == 0.01  # a constant


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ([[0, 1e-3], [100, 1e-4]], True),
        ([[0, 1e-3]], True),
        ([[10, 1e-3]], False),  # not from timestep 0
        ([[0, 1e-3], [100, 1e-4], [50, 1e-5]], False),  # timesteps not increasing
        ([[0, 1e-3], [1.5, 1e-4]], False),  # not a whole timestep
        ([0.1, 0.2], False),
        ([], False),
        (1e-3, False),
    ],
)
def test_a_schedule_starts_at_timestep_0_and_goes_forward(value, ok):
    assert is_schedule(value) is ok
