"""The figures (:mod:`rllib_geppo.report.plots`): written by a run, and drawn from panels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rllib_geppo.report.build import build_report
from rllib_geppo.report.grouping import load_trials
from rllib_geppo.report.plots import ReturnsPanel, TVPanel, returns_figure, tv_figure
from rllib_geppo.report.stats import band

from report_helpers import assert_png, run_cli, write_results


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def test_figures_are_written(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    assert_png(out / "returns.png")
    assert_png(out / "returns_vs_time.png")
    assert_png(out / "tv.png")
    trials = load_trials([results])
    built = build_report(trials)
    (tv_panel,) = built.tv_panels
    assert set(tv_panel.bands) == {"GePPO"}  # PPO trials logged no TV
    assert tv_panel.bands["GePPO"].mean == pytest.approx(0.05)
    assert tv_panel.targets == {"GePPO": 0.05}


def test_returns_figure_has_one_panel_per_env_with_markers():
    grid = np.array([0.0, 1.0, 2.0])
    bands = {
        "GePPO": band(np.array([[0.0, 2.0, 4.0], [0.0, 2.0, 4.0]])),
        "PPO": band(np.array([[0.0, 1.0, 2.0]])),
    }
    panels = [
        ReturnsPanel(
            env=f"env{i}",
            grid=grid,
            bands=bands,
            baseline="PPO",
            baseline_final=2.0,
            crossings={"GePPO": 1.0, "PPO": 2.0},
        )
        for i in range(4)
    ]
    fig = returns_figure(panels)
    assert len(fig.axes) == 4
    ax = fig.axes[0]
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    # The baseline's final level, and GePPO's crossing (none drawn for the baseline itself).
    assert sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in dotted) == [
        ((0, 1), (2.0, 2.0)),
        ((1.0, 1.0), (0, 1)),
    ]


def test_a_long_legend_sits_below_its_panel_and_a_short_one_inside():
    """A study's six variants would cover the curves; two leave room. Every TV target shares
    one legend entry, each drawn dotted in its variant's colour."""
    grid = np.array([0.0, 1.0, 2.0])
    names = ["GePPO", "PPO", "PPO-Adapt", "GePPO wide", "PPO wide", "PPO-Adapt wide"]
    for count, below in ((2, False), (6, True)):
        bands = {name: band(np.array([[0.05, 0.05, 0.05]])) for name in names[:count]}
        fig = tv_figure(
            [TVPanel(env="Hopper-v5", grid=grid, bands=bands, targets={name: 0.05 for name in bands})]
        )
        fig.draw_without_rendering()
        ax = fig.axes[0]
        legend, panel = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert bool(legend.y1 < panel.y0) is below
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"{name} (n=1)" for name in bands] + [
            "target ε/2 (variant's colour)"
        ]
        assert len([line for line in ax.get_lines() if line.get_linestyle() == ":"]) == count + 1
