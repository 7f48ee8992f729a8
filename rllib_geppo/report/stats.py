"""The arithmetic of the paper's Table 1, on curves aligned on env steps.

A curve is one trial's per-iteration series of a metric (its return, its TV per update) indexed by
env steps sampled (lifetime) or by seconds of training. Curves of different trials report at
different steps (GePPO collects 1024 env steps per iteration, PPO 2048), so every comparison first
puts them on one grid (:func:`aligned`): a DataFrame with one column per curve, linear between each
curve's points. The grid holds every point any curve reported, so each aligned curve, and so
their mean, is linear between neighbouring grid points: averages and crossings carry no grid error.

No I/O: :mod:`rllib_geppo.report.trials` reads Tune's files and :mod:`rllib_geppo.report.plots`
draws.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.integrate import trapezoid

#: Late in training is its last tenth: the TV near the budget and the return's late change.
TENTHS = 10


def with_points(frame: pd.DataFrame, xs: Iterable[float]) -> pd.DataFrame:
    """``frame`` with rows at ``xs`` added, each curve linear between its finite points (never
    extrapolated: NaN outside them)."""
    return frame.reindex(frame.index.union(xs)).interpolate(method="index", limit_area="inside")


def aligned(curves: Mapping[Hashable, pd.Series], end: float) -> pd.DataFrame:
    """The curves on one grid, one column per curve (named by the mapping's keys): every point any
    of them reported from the first where all have a finite value up to ``end``, and ``end``
    itself. Empty when some curve starts after ``end`` (no span is shared)."""
    # Sorted: unsorted, the union lists each curve's new steps after the previous curves', and
    # first_valid_index, which follows that order, could name a late step.
    frame = pd.concat(curves, axis=1, sort=True)
    start = frame.apply(pd.Series.first_valid_index).max()
    return with_points(frame, [end]).loc[start:end]


def mean_over(frame: pd.DataFrame) -> pd.Series:
    """Each curve's average over the span of ``frame``'s index (the trapezoid rule: exact for
    curves linear between points)."""
    x = frame.index.to_numpy(float)
    if x[-1] == x[0]:
        return frame.iloc[0]
    return pd.Series(trapezoid(frame.to_numpy(), x, axis=0) / (x[-1] - x[0]), index=frame.columns)


def window_mean(frame: pd.DataFrame, start: float, end: float) -> pd.Series:
    """Each curve's average over ``[start, end]``, within ``frame``'s span."""
    return mean_over(with_points(frame, [start, end]).loc[start:end])


def tenth_edges(frame: pd.DataFrame) -> np.ndarray:
    """The edges of the tenths of training: ``frame``'s span, from the first point where every
    curve has a value to the budget, cut in ten equal parts (11 edges)."""
    return np.linspace(frame.index[0], frame.index[-1], TENTHS + 1)


def changes_from_peak(by_tenth: np.ndarray) -> np.ndarray:
    """Per curve (row), its last tenth minus its tenth where the *other* curves' mean is highest.

    Leaving the curve out of the choice of its peak keeps its own noise from choosing it: on
    curves that are flat but for noise, the changes average zero, where picking the peak on all
    curves would make every change at most zero. Empty with fewer than two curves.
    """
    if len(by_tenth) < 2:
        return np.empty(0)
    peaks = [int(np.argmax(np.delete(by_tenth, i, axis=0).mean(axis=0))) for i in range(len(by_tenth))]
    return np.array([row[-1] - row[peak] for row, peak in zip(by_tenth, peaks)])


def late_change(frame: pd.DataFrame) -> tuple[float, float, tuple[float, float]]:
    """How far the return curves (``frame``'s columns, a variant's seeds) fell from their peak by
    the end of training.

    Returns the mean over curves of :func:`changes_from_peak` (below zero: a decline), its
    standard error (both NaN with one curve), and the start and end of the tenth where the mean of
    all curves is highest.
    """
    edges = tenth_edges(frame)
    fine = with_points(frame, edges)
    by_tenth = pd.concat([mean_over(fine.loc[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])], axis=1)
    change = pd.Series(changes_from_peak(by_tenth.to_numpy()), dtype=float)
    peak = int(np.argmax(by_tenth.mean().to_numpy()))
    return change.mean(), change.sem(), (float(edges[peak]), float(edges[peak + 1]))


def first_crossing(curve: pd.Series, level: float) -> float:
    """The first point of the index at which ``curve`` (linear between its points) reaches
    ``level``; NaN if it never does."""
    reached = np.flatnonzero(curve.to_numpy() >= level)
    if reached.size == 0:
        return float("nan")
    i = reached[0]
    if i == 0:
        return float(curve.index[0])
    (x0, x1), (y0, y1) = curve.index[i - 1 : i + 1], curve.iloc[i - 1 : i + 1]
    return float(x0 + (level - y0) / (y1 - y0) * (x1 - x0))


def improvement_pct(value: pd.Series, baseline: pd.Series) -> pd.Series:
    """Percent improvement over the baseline; divides by |baseline| so that a higher return is a
    positive improvement for negative returns too (NaN for a zero baseline)."""
    return (100.0 * (value - baseline) / baseline.abs()).where(baseline != 0)


def difference_in_se(mean: pd.Series, se: pd.Series, base: pd.Series, base_se: pd.Series) -> pd.Series:
    """``mean - base`` in standard errors of that difference, over independent seeds:
    ``(mean - base) / sqrt(se**2 + base_se**2)``. NaN without both standard errors (a single
    seed) or when both are zero."""
    spread = np.hypot(se, base_se)
    return ((mean - base) / spread).where(np.isfinite(spread) & (spread > 0))


def common_budget(reports: Sequence[Sequence[float]], returns: Sequence[Sequence[float]]) -> float:
    """The largest env-step budget at which every complete trial has reported a return.

    Args:
        reports: per trial, the env steps of its reports, one per iteration, ascending.
        returns: per trial, the env steps of those reports that hold a return, ascending.

    Trials stopped by the same ``num_env_steps_sampled_lifetime >= C`` criterion all report last
    in [C, furthest), and the furthest overshoots C by less than one iteration; so a trial whose
    last report is more than the longest iteration before the furthest stopped early. A complete
    trial's last return may come up to one return interval (its widest gap between returns) before
    its last report: an episode ends, or an evaluation runs, only every few iterations. The budget
    is the earliest of those last returns, so each trial's final return is one it reported or
    lies between two. A complete trial whose returns stop well before its end (an env that ends
    no episode once its policy balances) would drag every trial's budget back: it does not count.
    """

    def widest_gap(steps: Sequence[float]) -> float:
        return float(np.diff(steps, prepend=0.0).max())

    ends = [steps[-1] for steps in reports]
    since = max(ends) - max(widest_gap(steps) for steps in reports)  # ending here or before: stopped early
    complete = [(end, returned) for end, returned in zip(ends, returns) if end > since]
    current = [returned[-1] for end, returned in complete if end - returned[-1] <= widest_gap(returned)]
    return min(current or [returned[-1] for _, returned in complete])


def mean_gains(rows: pd.DataFrame) -> pd.DataFrame:
    """``mean_gains.csv``: for every ordered pair of variants (``variant``, ``versus``) with rows
    (``table.csv``'s columns) in two or more of the same environments (``envs``), the mean over
    those environments of the first's % improvement in average return over the second's
    (``mean_pct``: the paper's "on average, GePPO improves average performance throughout
    training by 31% compared to PPO", each task weighing the same), and in how many the first is
    higher (``above``) or lower (``below``) by more than one standard error of the difference
    (the rest: no winner). Pairs follow the order of ``rows``."""
    pairs = rows.merge(rows, on="env", suffixes=("", "_vs")).query("variant != variant_vs")
    pairs = pairs.assign(
        pct=improvement_pct(pairs.avg, pairs.avg_vs),
        diff=difference_in_se(pairs.avg, pairs.avg_se, pairs.avg_vs, pairs.avg_se_vs),
    )
    gains = pairs.groupby(["variant", "variant_vs"], sort=False).agg(
        envs=("pct", "size"),
        mean_pct=("pct", lambda pct: pct.mean(skipna=False)),
        above=("diff", lambda diff: (diff > 1).sum()),
        below=("diff", lambda diff: (diff < -1).sum()),
    )
    order = {variant: i for i, variant in enumerate(rows.variant.unique())}
    gains = gains[gains.envs >= 2].reset_index().rename(columns={"variant_vs": "versus"})
    return gains.sort_values(["variant", "versus"], key=lambda labels: labels.map(order), ignore_index=True)
