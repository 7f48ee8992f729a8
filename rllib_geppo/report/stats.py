"""The arithmetic of the paper's Table 1, on curves aligned on env steps.

A curve is one trial's per-iteration series: ``steps`` (env steps sampled, lifetime, at the end of
each training iteration) and ``values`` (the metric of that iteration). Curves of different trials
report at different step counts (GePPO collects 1024 steps per iteration, PPO 2048), so every
comparison first interpolates them linearly onto one common grid of env steps.

Pure numpy, no I/O: the trials module reads Tune's files and the plots module draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Array = np.ndarray
Curve = tuple[Array, Array]  # (env steps, values), one point per training iteration
#: Late in training is its last tenth: the TV near the budget and the return's late change.
TENTHS = 10


@dataclass(frozen=True)
class Run:
    """One trial's per-iteration series (NaN return: no episode completed in that iteration)."""

    steps: Array  # env steps sampled, lifetime
    returns: Array  # mean undiscounted return of the episodes completed in the iteration
    time_s: Array  # training wall time, lifetime (Tune's time_total_s), seconds


@dataclass(frozen=True)
class Band:
    """Mean over seeds of aligned curves and its standard error, per grid point."""

    mean: Array
    se: Array  # NaN with a single seed
    n: int


@dataclass(frozen=True)
class Row:
    """One (environment, variant) row of the table; returns are means over seeds."""

    env: str
    variant: str
    seeds: int
    excluded: int  # trials flagged (stopped early, crashed) and left out of the means
    budget: float  # env steps
    avg: float  # mean return over training (time average over env steps)
    avg_se: float
    final: float  # return at the budget
    final_se: float
    avg_vs_baseline_pct: float  # NaN: no baseline, or this is the baseline
    final_vs_baseline_pct: float
    avg_vs_baseline_se: float  # difference in standard errors of the difference (NaN as above)
    final_vs_baseline_se: float
    steps_to_baseline_final: float  # env steps; NaN: not reached or no baseline
    env_steps_per_s: float  # budget / mean training wall time to reach it
    time_to_baseline_final_s: float  # training wall time; NaN as for steps
    return_at_time: float  # mean return at time_budget_s of training wall time
    return_at_time_se: float
    time_budget_s: float  # the environment's shortest training time to the budget
    target: float = math.nan  # a return to reach (``--target``); NaN: none asked
    steps_to_target: float = math.nan  # env steps where the mean curve first reaches it
    time_to_target_s: float = math.nan  # training wall time there


@dataclass(frozen=True)
class Stability:
    """One (environment, variant): how large its last policy updates were against their target,
    and whether its return fell from its peak late in training (the paper's Figure 2)."""

    env: str
    variant: str
    seeds: int
    tv_last: float  # mean TV per policy update over the last tenth of training; NaN: not logged
    tv_last_se: float
    tv_target: float  # the variant's target TV per update, eps / 2; NaN: not logged
    peak_start: float  # env steps: the tenth of training where the mean return curve is highest
    peak_end: float
    late_change: float  # return over the last tenth minus over the peak tenth (changes_from_peak)
    late_change_se: float  # standard error over seeds; NaN with one seed


@dataclass(frozen=True)
class MeanGain:
    """One variant's average return against another's, over the environments both have rows in:
    the paper's "on average, GePPO improves average performance throughout training by 31%
    compared to PPO" (a mean of per-environment percentages, so each task weighs the same)."""

    variant: str
    versus: str
    envs: int  # environments where both variants have a row
    mean_pct: float  # mean over those environments of the % difference in average return
    above: int  # environments where the variant's average is higher by more than one s.e. of
    below: int  # the difference, or lower by more than one (the rest: no winner)


@dataclass(frozen=True)
class Comparison:
    """One environment's variants compared: return bands against env steps and against
    training time (empty when the runs share no window of time), and the table rows."""

    grid: Array  # env steps
    bands: dict[str, Band]
    time_grid: Array  # seconds of training
    time_bands: dict[str, Band]
    rows: list[Row]
    trial_avgs: dict[str, Array]  # per variant, each run's average return, in the order of its runs
    trial_finals: dict[str, Array]  # likewise, each run's return at the budget
    aligned: dict[str, Array]  # per variant, its runs' returns on the grid, one row per run


def valid_points(steps: Array, values: Array) -> tuple[Array, Array]:
    """The points of a curve whose value is finite (iterations without an episode are skipped)."""
    keep = np.isfinite(values)
    return np.asarray(steps, float)[keep], np.asarray(values, float)[keep]


def common_budget(ends: Sequence[tuple[float, float]]) -> float:
    """The largest env-step budget that every trial run to completion covers.

    Args:
        ends: per trial, (env steps at its last report, env steps of its last iteration).

    Trials stopped by the same ``num_env_steps_sampled_lifetime >= C`` criterion all end in
    [C, furthest), and the furthest overshoots C by less than one iteration; so a trial ending
    more than the longest iteration before the furthest stopped early.
    """
    furthest = max(last for last, _ in ends)
    longest = max(size for _, size in ends)
    return min(last for last, _ in ends if last > furthest - longest)


def step_grid(curves_steps: Sequence[Array], start: float, budget: float) -> Array:
    """Common grid: every reported step of every curve within [start, budget], plus both ends.

    Holding all knots makes the grid exact: each aligned curve, and so their mean, is linear
    between neighbouring grid points, so averages and crossings below carry no grid error.
    """
    knots = np.concatenate([np.asarray(s, float) for s in curves_steps] + [[start, budget]])
    return np.unique(knots[(knots >= start) & (knots <= budget)])


def align(steps: Array, values: Array, grid: Array) -> Array:
    """Linear interpolation of one curve onto ``grid``, which must lie within its finite points."""
    xs, ys = valid_points(steps, values)
    if xs.size == 0 or grid[0] < xs[0] or grid[-1] > xs[-1]:
        raise ValueError(f"grid [{grid[0]}, {grid[-1]}] is outside the curve's reported steps")
    return np.interp(grid, xs, ys)


def band(aligned: Array) -> Band:
    """Mean and standard error over seeds (rows) of aligned curves."""
    aligned = np.atleast_2d(aligned)
    n = aligned.shape[0]
    se = aligned.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.full(aligned.shape[1], np.nan)
    return Band(mean=aligned.mean(axis=0), se=se, n=n)


def mean_and_se(samples: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (NaN with a single sample)."""
    b = band(np.asarray(samples, float)[:, None])
    return float(b.mean[0]), float(b.se[0])


def time_average(grid: Array, values: Array) -> float:
    """Average of a curve over the env steps it spans (trapezoid rule: exact between knots)."""
    if grid[-1] == grid[0]:
        return float(values[0])
    area = np.sum((values[1:] + values[:-1]) * np.diff(grid)) / 2  # np.trapezoid needs numpy 2
    return float(area / (grid[-1] - grid[0]))


def window_average(grid: Array, values: Array, start: float, end: float) -> float:
    """Average of a curve over the env steps [start, end] within its grid (exact, as
    :func:`time_average`: the curve is linear between knots)."""
    inside = grid[(grid > start) & (grid < end)]
    knots = np.concatenate([[start], inside, [end]])
    return time_average(knots, np.interp(knots, grid, values))


def tenth_edges(grid: Array) -> Array:
    """The edges of the tenths of training: the grid's span, from the first env step where every
    curve has a value to the budget, cut in ten equal parts (11 edges)."""
    return np.linspace(grid[0], grid[-1], TENTHS + 1)


def tenths(grid: Array, aligned: Array, edges: Array) -> Array:
    """Each curve's average between consecutive ``edges`` (:func:`tenth_edges`), one row per curve."""
    return np.array(
        [
            [window_average(grid, curve, lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]
            for curve in np.atleast_2d(aligned)
        ]
    )


def changes_from_peak(by_tenth: Array) -> Array:
    """Per curve (row), its last tenth minus its tenth where the *other* curves' mean is highest.

    Leaving the curve out of the choice of its peak keeps its own noise from choosing it: on
    curves that are flat but for noise, the changes average zero, where picking the peak on all
    curves would make every change at most zero. Empty with fewer than two curves.
    """
    if len(by_tenth) < 2:
        return np.empty(0)
    peaks = [int(np.argmax(np.delete(by_tenth, i, axis=0).mean(axis=0))) for i in range(len(by_tenth))]
    return np.array([row[-1] - row[peak] for row, peak in zip(by_tenth, peaks)])


def late_change(grid: Array, aligned: Array) -> tuple[float, float, tuple[float, float]]:
    """How far the return fell from its peak by the end of training.

    Returns the mean over curves (seeds) of :func:`changes_from_peak` (below zero: a decline),
    its standard error (both NaN with one curve), and the env steps (start, end) of the tenth
    where the mean of all curves is highest.
    """
    edges = tenth_edges(grid)
    by_tenth = tenths(grid, aligned, edges)
    changes = changes_from_peak(by_tenth)
    mean, se = mean_and_se(changes) if changes.size else (float("nan"), float("nan"))
    peak = int(np.argmax(by_tenth.mean(axis=0)))
    return mean, se, (float(edges[peak]), float(edges[peak + 1]))


def first_crossing(grid: Array, values: Array, level: float) -> float:
    """First env step at which the curve reaches ``level`` (NaN if it never does)."""
    above = np.nonzero(values >= level)[0]
    if above.size == 0:
        return float("nan")
    i = above[0]
    if i == 0:
        return float(grid[0])
    # The curve is linear between knots: solve for the crossing inside [grid[i-1], grid[i]].
    frac = (level - values[i - 1]) / (values[i] - values[i - 1])
    return float(grid[i - 1] + frac * (grid[i] - grid[i - 1]))


def improvement_pct(value: float, baseline: float) -> float:
    """Percent improvement over the baseline; divides by |baseline| so that a higher return
    is a positive improvement for negative returns too (NaN for a zero baseline)."""
    if baseline == 0 or not np.isfinite(baseline):
        return float("nan")
    return 100.0 * (value - baseline) / abs(baseline)


def difference_in_se(value: tuple[float, float], baseline: tuple[float, float]) -> float:
    """``value - baseline`` in standard errors of that difference, both ``(mean, se)`` over
    independent seeds: ``(m - m_b) / sqrt(se**2 + se_b**2)``. NaN without both standard errors
    (a single seed) or when both are zero."""
    spread = float(np.hypot(value[1], baseline[1]))
    if not np.isfinite(spread) or spread == 0:
        return float("nan")
    return (value[0] - baseline[0]) / spread


def grid_start(curves: Sequence[Curve]) -> float:
    """The first env step at which every curve has a finite value (no extrapolation)."""
    return max(valid_points(steps, values)[0][0] for steps, values in curves)


def align_all(curves: Sequence[Curve], grid: Array) -> Array:
    """Each curve on the grid, one row per curve."""
    return np.stack([align(steps, values, grid) for steps, values in curves])


def time_budget(runs: Sequence[Run], budget: float) -> float:
    """The shortest training wall time any of ``runs`` took to reach ``budget`` env steps."""
    return min(float(np.interp(budget, r.steps, r.time_s)) for r in runs)


def compare_at_time(runs: Mapping[str, Sequence[Run]], seconds: float) -> tuple[Array, dict[str, Band]]:
    """Return against training wall time: every variant's band on one grid of seconds, from the
    first time every run has a return up to ``seconds`` (see :func:`time_budget`).

    Empty (no grid, no bands) when some run reports its first return only after ``seconds``:
    the runs share no window of time, and extrapolating would invent returns.
    """
    curves = {v: [(r.time_s, r.returns) for r in rs] for v, rs in runs.items()}
    all_curves = [c for cs in curves.values() for c in cs]
    start = grid_start(all_curves)
    if start > seconds:
        return np.empty(0), {}
    grid = step_grid([t for t, _ in all_curves], start, seconds)
    return grid, {v: band(align_all(cs, grid)) for v, cs in curves.items()}


def compare_variants(
    env: str,
    runs: Mapping[str, Sequence[Run]],
    budget: float,
    baseline: str,
    excluded: Mapping[str, int] | None = None,
    target: float | None = None,
) -> Comparison:
    """Table rows for one environment, all variants aligned on one grid.

    Args:
        env: environment name, copied into the rows.
        runs: variant name -> its complete runs (each reaching ``budget``), at least one each.
        budget: env steps; "final" is the value there.
        baseline: the variant the others are compared with (paper: "PPO").
        excluded: variant name -> number of flagged trials left out, for the rows.
        target: a return; the rows then say where each mean curve first reaches it.

    Returns:
        Each variant's return band on one grid of env steps and on one of training time (see
        :func:`compare_at_time`), and one row per variant.
    """
    curves = {v: [(r.steps, r.returns) for r in rs] for v, rs in runs.items()}
    all_curves = [c for cs in curves.values() for c in cs]
    grid = step_grid([steps for steps, _ in all_curves], grid_start(all_curves), budget)
    returns = {v: align_all(cs, grid) for v, cs in curves.items()}
    bands = {v: band(a) for v, a in returns.items()}
    trial_avgs = {v: np.array([time_average(grid, c) for c in a]) for v, a in returns.items()}
    trial_finals = {v: a[:, -1] for v, a in returns.items()}
    avgs = {v: mean_and_se(a) for v, a in trial_avgs.items()}
    finals = {v: mean_and_se(a) for v, a in trial_finals.items()}
    nan = float("nan")
    base_avg, base_final = avgs.get(baseline, (nan, nan)), finals.get(baseline, (nan, nan))

    def vs_baseline(
        variant: str, value: tuple[float, float], base: tuple[float, float]
    ) -> tuple[float, float]:
        """(% improvement, difference in standard errors) over the baseline."""
        if variant == baseline:
            return nan, nan
        return improvement_pct(value[0], base[0]), difference_in_se(value, base)

    seconds = time_budget([r for rs in runs.values() for r in rs], budget)
    time_grid, time_bands = compare_at_time(runs, seconds)
    rows = []
    for variant in runs:
        # Training time is reported every iteration (finite), so plain interpolation suffices.
        times = np.mean([np.interp(grid, r.steps, r.time_s) for r in runs[variant]], axis=0)
        cross = first_crossing(grid, bands[variant].mean, base_final[0])
        to_target = first_crossing(grid, bands[variant].mean, target) if target is not None else nan
        avg_pct, avg_diff_se = vs_baseline(variant, avgs[variant], base_avg)
        final_pct, final_diff_se = vs_baseline(variant, finals[variant], base_final)
        rows.append(
            Row(
                env=env,
                variant=variant,
                seeds=bands[variant].n,
                excluded=(excluded or {}).get(variant, 0),
                budget=budget,
                avg=avgs[variant][0],
                avg_se=avgs[variant][1],
                final=finals[variant][0],
                final_se=finals[variant][1],
                avg_vs_baseline_pct=avg_pct,
                final_vs_baseline_pct=final_pct,
                avg_vs_baseline_se=avg_diff_se,
                final_vs_baseline_se=final_diff_se,
                steps_to_baseline_final=cross,
                env_steps_per_s=budget / times[-1],
                time_to_baseline_final_s=float(np.interp(cross, grid, times)) if np.isfinite(cross) else nan,
                return_at_time=float(time_bands[variant].mean[-1]) if time_bands else nan,
                return_at_time_se=float(time_bands[variant].se[-1]) if time_bands else nan,
                time_budget_s=seconds,
                target=target if target is not None else nan,
                steps_to_target=to_target,
                time_to_target_s=float(np.interp(to_target, grid, times)) if np.isfinite(to_target) else nan,
            )
        )
    return Comparison(
        grid=grid,
        bands=bands,
        time_grid=time_grid,
        time_bands=time_bands,
        rows=rows,
        trial_avgs=trial_avgs,
        trial_finals=trial_finals,
        aligned=returns,
    )


def mean_gains(rows: Sequence[Row]) -> list[MeanGain]:
    """For every ordered pair of variants with rows in two or more of the same environments, the
    mean over those environments of the first's % improvement in average return over the second
    (:func:`improvement_pct`), with how many environments each leads by more than one standard
    error of the difference. Pairs follow the order of ``rows``."""
    by_env: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_env.setdefault(row.env, {})[row.variant] = row
    variants = list(dict.fromkeys(row.variant for row in rows))
    gains = []
    for variant in variants:
        for versus in (v for v in variants if v != variant):
            pairs = [
                (env[variant], env[versus]) for env in by_env.values() if variant in env and versus in env
            ]
            if len(pairs) < 2:
                continue
            diffs = [difference_in_se((a.avg, a.avg_se), (b.avg, b.avg_se)) for a, b in pairs]
            gains.append(
                MeanGain(
                    variant=variant,
                    versus=versus,
                    envs=len(pairs),
                    mean_pct=float(np.mean([improvement_pct(a.avg, b.avg) for a, b in pairs])),
                    above=sum(d > 1 for d in diffs),
                    below=sum(d < -1 for d in diffs),
                )
            )
    return gains
