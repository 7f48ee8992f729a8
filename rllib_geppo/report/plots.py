"""The paper's figures: return and TV per policy update against env steps, one panel per env.

Figures are built with matplotlib's object API (no pyplot, so no global state or GUI backend) and
returned, so callers decide where to save them and tests can inspect the axes. Each panel draws an
environment's curves as the report holds them: one column per trial, named ``(variant, trial)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import ceil, isfinite

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from matplotlib.transforms import offset_copy

from rllib_geppo.report.build import Report, off_budget
from rllib_geppo.report.grouping import VARIANT_ORDER

#: Fixed colours so that a variant looks the same in every panel and figure.
_KNOWN_COLORS = dict(
    zip(VARIANT_ORDER, ("tab:blue", "tab:cyan", "tab:orange", "tab:green", "tab:purple", "tab:red"))
)
_SPARE_COLORS = ("tab:brown", "tab:pink", "tab:gray", "tab:olive", "gold", "navy")
_PANELS_PER_ROW = 3
#: A panel with more legend entries than this keeps its legend below it, off the curves, that
#: many points under the axes (clear of the tick labels and the x label).
_LEGEND_INSIDE_MAX = 6
_LEGEND_GAP_PT = 36


def variant_colors(variants: Iterable[str]) -> dict[str, str]:
    """A colour per variant: fixed for the paper's variants, in name order for the others."""
    others = sorted(v for v in set(variants) if v not in _KNOWN_COLORS)
    spare = {v: _SPARE_COLORS[i % len(_SPARE_COLORS)] for i, v in enumerate(others)}
    return {**_KNOWN_COLORS, **spare}


def _panel_axes(count: int, title: str) -> tuple[Figure, list[Axes]]:
    """A figure with ``count`` panels, at most three per row."""
    cols = min(count, _PANELS_PER_ROW)
    rows = ceil(count / cols)
    fig = Figure(figsize=(4.8 * cols, 3.6 * rows), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[count:]:
        fig.delaxes(ax)
    fig.suptitle(title)
    return fig, list(grid[:count])


def _draw_bands(ax: Axes, curves: pd.DataFrame, colors: Mapping[str, str], x_scale: float = 1.0) -> None:
    """Each variant's mean curve over its seeds, with half a standard error shaded either side (the
    paper's convention); x in the index's units divided by ``x_scale``."""
    x = curves.index / x_scale
    for variant in curves.columns.unique(0):
        seeds = curves[variant]
        mean, se = seeds.mean(axis=1), seeds.sem(axis=1)
        ax.plot(x, mean, color=colors[variant], label=f"{variant} (n={seeds.shape[1]})")
        ax.fill_between(x, mean - se / 2, mean + se / 2, color=colors[variant], alpha=0.2, linewidth=0)


def _finish(ax: Axes, env: str, ylabel: str, xlabel: str = "env steps", eng_x: bool = True) -> None:
    """Title, labels, grid and legend (below the panel when long); ``eng_x`` writes x ticks
    as 25k, 1M (env steps)."""
    ax.set_title(env)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if eng_x:
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)
    if len(ax.get_legend_handles_labels()[1]) <= _LEGEND_INSIDE_MAX:
        ax.legend(fontsize="small")
    else:  # a study's six variants would cover the curves: below the x label instead
        below = offset_copy(ax.transAxes, fig=ax.figure, y=-_LEGEND_GAP_PT, units="points")
        ax.legend(
            fontsize="small", ncols=2, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below
        )


def figures(report: Report) -> dict[str, Figure]:
    """The report's figures by file name: ``returns.png`` (with the paper's final returns where
    its rows are read at the paper's budget), and ``returns_vs_time.png`` and ``tv.png`` where
    some environment has curves for them."""
    paper = report.paper[~report.paper.env.isin(off_budget(report.paper))]
    drawn = {"returns.png": returns_figure(report.returns, report.rows, report.baseline, paper)}
    if report.returns_by_time:
        drawn["returns_vs_time.png"] = returns_vs_time_figure(report.returns_by_time)
    if report.tv:
        drawn["tv.png"] = tv_figure(report.tv, report.stability)
    return drawn


def returns_figure(
    curves: Mapping[str, pd.DataFrame], rows: pd.DataFrame, baseline: str, paper: pd.DataFrame | None = None
) -> Figure:
    """Return vs env steps per environment; the baseline's final return (``rows``, the report's
    table) dotted, a dotted vertical line where each other variant's mean curve first reaches
    it, and a star at the budget for each of the paper's final returns (``paper``: ``env``,
    ``variant``, ``paper_final``)."""
    fig, axes = _panel_axes(len(curves), "Return (mean over seeds, ±½ s.e.)")
    for ax, (env, frame) in zip(axes, curves.items()):
        colors = variant_colors(frame.columns.unique(0))
        _draw_bands(ax, frame, colors)
        ours = rows[rows.env == env].set_index("variant")
        if baseline in ours.index and isfinite(ours.final[baseline]):
            ax.axhline(ours.final[baseline], color=colors[baseline], linestyle=":", label=f"{baseline} final")
        for variant, step in ours.steps_to_baseline_final.items():
            if variant != baseline and isfinite(step):
                ax.axvline(step, color=colors[variant], linestyle=":")
        for row in () if paper is None else paper[paper.env == env].itertuples():
            star = dict(markersize=11, markeredgecolor="black", label=f"{row.variant}: paper final")
            ax.plot([frame.index[-1]], [row.paper_final], "*", color=colors[row.variant], **star)
        _finish(ax, env, "episode return")
    return fig


def returns_vs_time_figure(curves: Mapping[str, pd.DataFrame]) -> Figure:
    """Return vs training wall time (seconds in the index) per environment, up to the shortest
    run's time."""
    fig, axes = _panel_axes(len(curves), "Return against training time (mean over seeds, ±½ s.e.)")
    for ax, (env, frame) in zip(axes, curves.items()):
        _draw_bands(ax, frame, variant_colors(frame.columns.unique(0)), x_scale=60)
        _finish(ax, env, "episode return", xlabel="training time (min)", eng_x=False)
    return fig


def tv_figure(curves: Mapping[str, pd.DataFrame], targets: pd.DataFrame) -> Figure:
    """TV distance per policy update vs env steps, each variant's target eps/2 (``targets``:
    ``env``, ``variant``, ``tv_target``) dotted."""
    fig, axes = _panel_axes(len(curves), "TV distance per policy update (mean over seeds, ±½ s.e.)")
    for ax, (env, frame) in zip(axes, curves.items()):
        colors = variant_colors(frame.columns.unique(0))
        env_targets = targets[targets.env == env].dropna(subset="tv_target").set_index("variant").tv_target
        for variant in frame.columns.unique(0):  # each target drawn over its own band
            _draw_bands(ax, frame[[variant]], colors)
            if variant in env_targets:
                ax.axhline(env_targets[variant], color=colors[variant], linestyle=":")
        if not env_targets.empty:  # one entry for all targets: each is dotted in its variant's colour
            ax.plot([], [], color="black", linestyle=":", label="target ε/2 (variant's colour)")
        _finish(ax, env, "TV(π_new, π_old)")
    return fig
