"""The arithmetic (:mod:`rllib_geppo.report.stats`), on curves small enough to check by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rllib_geppo.report.stats import (
    aligned,
    changes_from_peak,
    common_budget,
    difference_in_se,
    first_crossing,
    improvement_pct,
    late_change,
    mean_over,
    window_mean,
)


def curve(grid, values) -> pd.DataFrame:
    """One curve, as the report aligns curves: a column of values indexed by env steps."""
    return pd.DataFrame({"curve": values}, index=np.asarray(grid, float))


def test_first_crossing_interpolates_between_grid_points():
    grid = np.array([0.0, 10.0, 20.0])
    assert first_crossing(pd.Series([0.0, 4.0, 8.0], grid), 6.0) == pytest.approx(15.0)
    assert first_crossing(pd.Series([7.0, 4.0, 8.0], grid), 6.0) == 0.0
    assert np.isnan(first_crossing(pd.Series([0.0, 1.0, 2.0], grid), 6.0))


def test_time_average_is_exact_on_an_uneven_grid():
    grid = np.array([0.0, 1.0, 4.0])
    assert mean_over(curve(grid, 3 * grid + 1))["curve"] == pytest.approx(7.0)


def test_window_average_cuts_the_curve_between_knots():
    values = curve([0.0, 2.0, 4.0], [0.0, 4.0, 0.0])  # a peak at 2
    assert window_mean(values, 1.0, 3.0)["curve"] == pytest.approx(3.0)
    assert window_mean(values, 0.0, 1.0)["curve"] == pytest.approx(1.0)


def test_late_change_is_the_last_tenth_against_the_other_seeds_peak_tenth():
    """Two seeds rise to s = 6 and fall back: tenth averages 0.5, 1.5, ..., 5.5, 5.5, 4.5, 3.5,
    2.5 and twice those. Each seed's peak is the other's, tenth 5 (the first of a tie); the last
    tenth lies 3 and 6 below it: -4.5 ± 1.5."""
    grid = np.arange(11.0)
    rise_and_fall = np.minimum(grid, 12 - grid)
    change, se, peak = late_change(pd.DataFrame({0: rise_and_fall, 1: 2 * rise_and_fall}, index=grid))
    assert (change, se, peak) == (pytest.approx(-4.5), pytest.approx(1.5), (5.0, 6.0))
    assert late_change(pd.DataFrame({0: grid, 1: grid + 1}, index=grid))[:2] == (0, 0)  # rising: no decline
    assert all(map(math.isnan, late_change(curve(grid, grid))[:2]))  # one seed: no estimate


def test_a_seed_does_not_choose_its_own_peak():
    """Each seed's peak tenth is where the others' mean is highest: seed 0's is tenth 1, where it
    is at 0, so it ends 1 above it; seed 1's is tenth 0, likewise. With three seeds, the third's
    is a tie between tenths 0 and 1 (the first counts), where it is at its last value."""
    assert changes_from_peak(np.array([[2.0, 0.0, 1.0], [0.0, 2.0, 1.0]])).tolist() == [1.0, 1.0]
    flat = np.array([[1.0, 3.0, 2.0], [3.0, 1.0, 2.0], [2.0, 2.0, 2.0]])
    assert changes_from_peak(flat).tolist() == [1.0, 1.0, 0.0]


def steps(first: int, last: int, every: int) -> np.ndarray:
    """Env steps from ``first`` to ``last`` (included), ``every`` apart."""
    return np.arange(first, last + 1, every, dtype=float)


def test_common_budget_ignores_trials_stopped_more_than_an_iteration_short():
    # Stopped by ">= 1M env steps" with 1024- and 2048-step iterations, and one cut short; a
    # return every iteration.
    reports = [steps(1024, 1_000_448, 1024), steps(2048, 1_001_472, 2048), steps(1024, 600_064, 1024)]
    assert common_budget(reports, reports) == 1_000_448
    reports = [steps(2048, 1_001_472, 2048), steps(1024, 999_424, 1024)]  # one longest iteration short
    assert common_budget(reports, reports) == 1_001_472


def test_common_budget_is_the_last_return_every_complete_trial_has():
    """1,000-step episodes on two envs end every other 1,024-step iteration: a complete trial's
    last return can come one iteration before its last report, and the budget waits for it."""
    reports = [steps(1024, 1_000_448, 1024), steps(2048, 1_001_472, 2048)]
    every_other = steps(2048, 999_424, 2048)  # its last report, 1,000,448, holds no return
    assert common_budget(reports, [every_other, reports[1]]) == 999_424


def test_common_budget_passes_over_a_complete_trial_whose_returns_stop_early():
    """An env that ends no episode once its policy balances: the trial ran to the end, but its
    last return, at 6,000 env steps, is four iterations back; the others set the budget."""
    reports = [steps(1000, 10_000, 1000)] * 2
    assert common_budget(reports, [reports[0], steps(1000, 6000, 1000)]) == 10_000


def test_the_grid_holds_every_knot_within_range():
    """From the first step where every curve has a value (no extrapolation) to the end."""
    curves = {
        "a": pd.Series([1.0, 2.0, 3.0], [1000.0, 2000.0, 3000.0]),
        "b": pd.Series([1.0, 2.0], [1500.0, 3500.0]),
    }
    assert aligned(curves, 3000).index.tolist() == [1500, 2000, 3000]


def test_the_grid_starts_at_the_first_shared_step_when_curves_meet_only_late():
    """Curves meet at a step late in training (8,000): the grid still starts where every curve
    first has a value (2,000), not at the late meeting point, so the average spans training."""
    curves = {
        "a": pd.Series([0.0, 10.0, 20.0, 80.0, 90.0], [1000.0, 3000.0, 5000.0, 8000.0, 9000.0]),
        "b": pd.Series([0.0, 10.0, 20.0, 80.0, 90.0], [2000.0, 4000.0, 6000.0, 8000.0, 9500.0]),
    }
    grid = aligned(curves, 9000)
    assert grid.index.tolist() == [2000, 3000, 4000, 5000, 6000, 8000, 9000]
    assert grid["b"].tolist() == pytest.approx([0.0, 5.0, 10.0, 15.0, 20.0, 80.0, 80.0 + 20 / 3])


def test_return_at_time_is_empty_when_runs_share_no_window_of_time():
    fast = pd.Series([-900.0, -800.0, -800.0], index=[0.2, 0.4, 2.5])  # returns against seconds
    slow = pd.Series([-700.0, -600.0], index=[1.0, 2.0])
    # Up to 0.4 s only the fast run has reported: the slow one starts at 1.0 s.
    assert aligned({"fast": fast, "slow": slow}, 0.4).empty
    both = aligned({"fast": fast, "slow": slow}, 2.0)
    assert both.index.tolist() == [1.0, 2.0] and both["slow"].tolist() == [-700.0, -600.0]


def test_improvement_is_positive_for_higher_negative_returns():
    assert improvement_pct(pd.Series([-500.0]), pd.Series([-1000.0]))[0] == pytest.approx(50.0)
    assert np.isnan(improvement_pct(pd.Series([1.0]), pd.Series([0.0]))[0])


def test_difference_in_standard_errors_of_the_difference():
    def in_se(value: tuple[float, float], baseline: tuple[float, float]) -> float:
        return difference_in_se(*(pd.Series([x]) for x in (*value, *baseline)))[0]

    # (130 - 100) / sqrt(30^2 + 40^2) = 30 / 50; lower is negative
    assert in_se((130.0, 30.0), (100.0, 40.0)) == pytest.approx(0.6)
    assert in_se((70.0, 30.0), (100.0, 40.0)) == pytest.approx(-0.6)
    # one seed has no standard error; equal constant curves have none to divide by
    assert np.isnan(in_se((130.0, math.nan), (100.0, 40.0)))
    assert np.isnan(in_se((100.0, 0.0), (100.0, 0.0)))
