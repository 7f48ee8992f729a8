"""The paper's figures: return and TV per policy update against env steps, one panel per env.

Figures are built with matplotlib's object API (no pyplot, so no global state or GUI backend) and
returned, so callers decide where to save them and tests can inspect the axes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil, isfinite

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from matplotlib.transforms import offset_copy

from rllib_geppo.report.stats import Array, Band

#: Fixed colours so that a variant looks the same in every panel and figure.
_KNOWN_COLORS = {
    "GePPO": "tab:blue",
    "PPO": "tab:orange",
    "PPO-Adapt": "tab:green",
    "RLlib PPO": "tab:red",
    "SB3 PPO": "tab:purple",
    "GePPO overlapped": "tab:cyan",
}
_SPARE_COLORS = ("tab:brown", "tab:pink", "tab:gray", "tab:olive", "gold", "navy")
_PANELS_PER_ROW = 3
#: A panel with more legend entries than this keeps its legend below it, off the curves, that
#: many points under the axes (clear of the tick labels and the x label).
_LEGEND_INSIDE_MAX = 6
_LEGEND_GAP_PT = 36


@dataclass(frozen=True)
class ReturnsPanel:
    """One environment's return curves (mean over seeds, standard error per grid point)."""

    env: str
    grid: Array  # env steps
    bands: Mapping[str, Band]  # variant -> return band on grid
    baseline: str
    baseline_final: float  # NaN: no baseline run for this env
    crossings: Mapping[str, float]  # variant -> env step reaching baseline_final (NaN: never)
    # variant -> the paper's final return at the panel's budget (report --paper); empty: none
    paper_finals: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TimePanel:
    """One environment's return curves against training wall time (seconds)."""

    env: str
    grid: Array  # seconds of training
    bands: Mapping[str, Band]  # variant -> return band on grid


@dataclass(frozen=True)
class TVPanel:
    """One environment's TV distance per policy update, with each variant's target eps/2."""

    env: str
    grid: Array  # env steps
    bands: Mapping[str, Band]  # variant -> TV band on grid
    targets: Mapping[str, float]  # variant -> eps/2


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


def _draw_band(ax: Axes, grid: Array, band: Band, color: str, label: str) -> None:
    """Mean curve with half a standard error shaded either side (the paper's convention)."""
    ax.plot(grid, band.mean, color=color, label=f"{label} (n={band.n})")
    ax.fill_between(
        grid, band.mean - band.se / 2, band.mean + band.se / 2, color=color, alpha=0.2, linewidth=0
    )


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


def returns_figure(panels: Sequence[ReturnsPanel]) -> Figure:
    """Return vs env steps per environment; the baseline's final return dotted, a dotted
    vertical line where each other variant's mean curve first reaches it, and a star at the
    budget for each of the paper's final returns (``paper_finals``)."""
    fig, axes = _panel_axes(len(panels), "Return (mean over seeds, ±½ s.e.)")
    for ax, panel in zip(axes, panels):
        colors = variant_colors(panel.bands)
        for variant, band in panel.bands.items():
            _draw_band(ax, panel.grid, band, colors[variant], variant)
        if isfinite(panel.baseline_final):
            ax.axhline(
                panel.baseline_final,
                color=colors[panel.baseline],
                linestyle=":",
                label=f"{panel.baseline} final",
            )
        for variant, step in panel.crossings.items():
            if variant != panel.baseline and isfinite(step):
                ax.axvline(step, color=colors[variant], linestyle=":")
        for variant, value in panel.paper_finals.items():
            ax.plot(
                [panel.grid[-1]],
                [value],
                marker="*",
                markersize=11,
                linestyle="none",
                color=colors[variant],
                markeredgecolor="black",
                label=f"{variant}: paper final",
            )
        _finish(ax, panel.env, "episode return")
    return fig


def returns_vs_time_figure(panels: Sequence[TimePanel]) -> Figure:
    """Return vs training wall time per environment, up to the shortest run's time."""
    fig, axes = _panel_axes(len(panels), "Return against training time (mean over seeds, ±½ s.e.)")
    for ax, panel in zip(axes, panels):
        colors = variant_colors(panel.bands)
        for variant, band in panel.bands.items():
            _draw_band(ax, panel.grid / 60, band, colors[variant], variant)
        _finish(ax, panel.env, "episode return", xlabel="training time (min)", eng_x=False)
    return fig


def tv_figure(panels: Sequence[TVPanel]) -> Figure:
    """TV distance per policy update vs env steps, each variant's target eps/2 dotted."""
    fig, axes = _panel_axes(len(panels), "TV distance per policy update (mean over seeds, ±½ s.e.)")
    for ax, panel in zip(axes, panels):
        colors = variant_colors(panel.bands)
        for variant, band in panel.bands.items():
            _draw_band(ax, panel.grid, band, colors[variant], variant)
            if variant in panel.targets:
                ax.axhline(panel.targets[variant], color=colors[variant], linestyle=":")
        if panel.targets:  # one entry for all targets: each is dotted in its variant's colour
            ax.plot([], [], color="black", linestyle=":", label="target ε/2 (variant's colour)")
        _finish(ax, panel.env, "TV(π_new, π_old)")
    return fig
