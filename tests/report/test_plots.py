"""The figures (:mod:`rllib_geppo.report.plots`): written by a run, and drawn from the curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rllib_geppo.report.build import build_report
from rllib_geppo.report.grouping import load_trials
from rllib_geppo.report.plots import returns_figure, tv_figure

from report_helpers import assert_png, run_cli, write_results


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def seeds(grid, **curves) -> pd.DataFrame:
    """Curves as the report holds them: one column per trial, named (variant, trial)."""
    columns = {(variant, i): values for variant, runs in curves.items() for i, values in enumerate(runs)}
    return pd.DataFrame(columns, index=np.asarray(grid, float))


def test_figures_are_written(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    assert_png(out / "returns.png")
    assert_png(out / "returns_vs_time.png")
    assert_png(out / "tv.png")
    built = build_report(load_trials([results]))
    (tv,) = built.tv.values()
    assert set(tv.columns.unique(0)) == {"GePPO"}  # PPO trials logged no TV
    assert tv["GePPO"].mean(axis=1).to_numpy() == pytest.approx(0.05)
    targets = built.stability.set_index("variant").tv_target
    assert targets["GePPO"] == pytest.approx(0.05) and np.isnan(targets["PPO"])


def test_bands_are_the_mean_over_seeds_with_half_a_standard_error_either_side():
    """Seeds 1, 2 and 3, 6: mean 2, 4, standard error (std with ddof 1 / sqrt(2)) 1, 2; one seed
    has no standard error, so no band."""
    curves = {"Hopper-v5": seeds([0, 1], GePPO=[[1.0, 2.0], [3.0, 6.0]], PPO=[[1.0, 2.0]])}
    ax = tv_figure(curves, pd.DataFrame(columns=["env", "variant", "tv_target"])).axes[0]
    geppo, ppo = ax.get_lines()
    assert geppo.get_ydata().tolist() == [2.0, 4.0] and geppo.get_label() == "GePPO (n=2)"
    (band,) = [c for c in ax.collections if c.get_paths() and c.get_paths()[0].vertices.size]
    assert sorted(set(band.get_paths()[0].vertices[:, 1].round(6))) == [1.5, 2.5, 3.0, 5.0]
    assert ppo.get_label() == "PPO (n=1)"


def test_returns_figure_has_one_panel_per_env_with_markers():
    curves = seeds([0.0, 1.0, 2.0], GePPO=[[0.0, 2.0, 4.0], [0.0, 2.0, 4.0]], PPO=[[0.0, 1.0, 2.0]])
    envs = [f"env{i}" for i in range(4)]
    rows = pd.DataFrame(
        {
            "env": np.repeat(envs, 2),
            "variant": ["GePPO", "PPO"] * 4,
            "final": [4.0, 2.0] * 4,
            "steps_to_baseline_final": [1.0, 2.0] * 4,
        }
    )
    fig = returns_figure(dict.fromkeys(envs, curves), rows, "PPO")
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
    names = ["GePPO", "PPO", "PPO-Adapt", "GePPO wide", "PPO wide", "PPO-Adapt wide"]
    for count, below in ((2, False), (6, True)):
        curves = seeds([0.0, 1.0, 2.0], **{name: [[0.05, 0.05, 0.05]] for name in names[:count]})
        targets = pd.DataFrame({"env": "Hopper-v5", "variant": names[:count], "tv_target": 0.05})
        fig = tv_figure({"Hopper-v5": curves}, targets)
        fig.draw_without_rendering()
        ax = fig.axes[0]
        legend, panel = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert bool(legend.y1 < panel.y0) is below
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            f"{name} (n=1)" for name in names[:count]
        ] + ["target ε/2 (variant's colour)"]
        assert len([line for line in ax.get_lines() if line.get_linestyle() == ":"]) == count + 1
