"""The paper's Table 1 beside ours (``--paper``, :func:`rllib_geppo.report.build.compare_with_paper`),
and the study that runs its tasks.

Synthetic 1M-step runs on Hopper-v5, linear again: on the grid [200k, 1M] env steps,

    GePPO seeds: R = 0.003 s and 0.003 s + 200   -> avg 1800, 2000 (1900 ± 100); final 3100 ± 100
    PPO seeds:   R = 0.0025 s and 0.0025 s + 100 -> avg 1500, 1600 (1550 ±  50); final 2550 ±  50

GePPO's mean curve 0.003 s + 100 reaches PPO's final 2550 at s = 816,667. The paper's Hopper:
PPO 2,362 / 3,126, GePPO 2,544 / 3,450 (avg / final), GePPO +8% / +10%, 0.41M steps.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import pandas as pd
import pytest

from rllib_geppo.cli.experiment_file import load_experiments, resolve_trials
from rllib_geppo.report import build as report_paper
from rllib_geppo.report.build import ROW_COLUMNS, build_report
from rllib_geppo.report.grouping import load_trials
from rllib_geppo.report.plots import figures

from helpers import TUNED_EXAMPLES
from report_helpers import GEPPO, PPO, as_float, linear, run_cli, write_results, write_trial

PAPER_GEPPO_STEPS = list(range(100_000, 1_000_001, 100_000))
PAPER_PPO_STEPS = list(range(200_000, 1_000_001, 200_000))


@pytest.fixture
def million_step_results(tmp_path: Path) -> Path:
    root = tmp_path / "results" / "table1"
    for seed, offset in ((0, 0), (1, 200)):
        write_trial(
            root,
            "GePPO",
            "Hopper-v5",
            seed,
            GEPPO,
            PAPER_GEPPO_STEPS,
            linear(0.003, offset, PAPER_GEPPO_STEPS),
            1000,
        )
    for seed, offset in ((2, 0), (3, 100)):
        write_trial(
            root,
            "GePPO",
            "Hopper-v5",
            seed,
            PPO,
            PAPER_PPO_STEPS,
            linear(0.0025, offset, PAPER_PPO_STEPS),
            1000,
        )
    # GePPO alone on Swimmer (no PPO row: avg 110 and final 200 over [100k, 1M]), and a task
    # the paper does not report.
    write_trial(
        root, "GePPO", "Swimmer-v5", 0, GEPPO, PAPER_GEPPO_STEPS, linear(0.0002, 0, PAPER_GEPPO_STEPS), 1000
    )
    write_trial(
        root,
        "GePPO",
        "Pendulum-v1",
        0,
        GEPPO,
        PAPER_GEPPO_STEPS,
        linear(0.0001, -1000, PAPER_GEPPO_STEPS),
        1000,
    )
    return tmp_path / "results"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def read_paper_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "paper.csv").open() as handle:
        return {(r["env"], r["variant"]): r for r in csv.DictReader(handle)}


def test_paper_columns_beside_ours(million_step_results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(million_step_results, "--paper", "--budget", "1e6", "--out", out) == 0
    rows = read_paper_rows(out)
    assert set(rows) == {("Hopper-v5", "GePPO"), ("Hopper-v5", "PPO"), ("Swimmer-v5", "GePPO")}
    expected_geppo = {
        "seeds": 2,
        "budget": 1e6,
        "avg": 1900,
        "avg_se": 100,
        "paper_avg": 2544,
        "avg_vs_paper_pct": 100 * (1900 - 2544) / 2544,
        "avg_vs_ppo_pct": 100 * (1900 - 1550) / 1550,
        "paper_avg_vs_ppo_pct": 8,
        "final": 3100,
        "paper_final": 3450,
        "final_vs_paper_pct": 100 * (3100 - 3450) / 3450,
        "final_vs_ppo_pct": 100 * (3100 - 2550) / 2550,
        "paper_final_vs_ppo_pct": 10,
        "steps_to_ppo_final": 2450 / 0.003,
        "paper_steps_to_ppo_final": 410_000,
    }
    expected_ppo = {
        "avg": 1550,
        "paper_avg": 2362,
        "avg_vs_paper_pct": 100 * (1550 - 2362) / 2362,
        "final": 2550,
        "paper_final": 3126,
        "final_vs_paper_pct": 100 * (2550 - 3126) / 3126,
        "steps_to_ppo_final": 1e6,
        "paper_steps_to_ppo_final": 1e6,
    }
    for key, value in expected_geppo.items():
        assert as_float(rows["Hopper-v5", "GePPO"], key) == pytest.approx(value), key
    for key, value in expected_ppo.items():
        assert as_float(rows["Hopper-v5", "PPO"], key) == pytest.approx(value), key
    ppo = rows["Hopper-v5", "PPO"]
    assert ppo["avg_vs_ppo_pct"] == ppo["paper_avg_vs_ppo_pct"] == ""

    table = (out / "table.md").read_text()
    assert (
        "| Hopper-v5 | 1 | GePPO | 2 | 1,900 ± 100 | 2,544 | -25.3% | +22.6% (+8%) "
        "| 3,100 ± 100 | 3,450 | -10.1% | +21.6% (+10%) | 0.82 (0.41) |"
    ) in table
    assert (
        "| Hopper-v5 | 1 | PPO | 2 | 1,550 ± 50 | 2,362 | -34.4% | — | 2,550 ± 50 | 3,126 "
        "| -18.4% | — | 1.00 (1.00) |"
    ) in table
    # Without a PPO run ours is n/a; the paper's figures stay.
    assert "| Swimmer-v5 | 1 | GePPO | 1 | 110 | 161 | -31.7% | n/a (+65%) |" in table
    assert "n/a (+44%) | n/a (0.23) |" in table
    # The paper's table comes first (pages include a report's first table); every row follows.
    first_table = [line for line in table.split("## All rows")[0].splitlines() if line.startswith("|")]
    assert "paper avg" in first_table[0] and not any("Pendulum" in line for line in first_table)
    assert "| Pendulum-v1 | 1 | GePPO |" in table.split("## All rows")[1]
    assert "MuJoCo v3" in table and "5 seeds" in table


def stars(built) -> dict[str, list[tuple[str, float, float]]]:
    """Per panel of returns.png, the paper's final returns it marks: (label, env steps, return)."""
    return {
        ax.get_title(): sorted(
            (line.get_label(), line.get_xdata()[0], line.get_ydata()[0])
            for line in ax.get_lines()
            if line.get_marker() == "*"
        )
        for ax in figures(built)["returns.png"].axes
    }


def test_paper_finals_are_marked_on_the_returns_panels(million_step_results: Path):
    built = build_report(load_trials([million_step_results]), 1e6, paper=True)
    marked = stars(built)
    assert marked["Hopper-v5"] == [("GePPO: paper final", 1e6, 3450), ("PPO: paper final", 1e6, 3126)]
    assert marked["Pendulum-v1"] == []
    assert build_report(load_trials([million_step_results]), 1e6).paper.empty


def test_paper_at_another_budget_warns_and_marks_nothing(results: Path, tmp_path: Path, caplog):
    with caplog.at_level(logging.WARNING):
        built = build_report(load_trials([results]), paper=True)
    assert built.paper.variant.tolist() == ["GePPO", "PPO"]
    assert "Hopper-v5 is read at 10,000 env steps, the paper at 1,000,000" in caplog.text
    assert stars(built) == {"Hopper-v5": []}


def test_paper_needs_the_ppo_baseline(million_step_results: Path, tmp_path: Path, caplog):
    assert run_cli(million_step_results, "--paper", "--baseline", "GePPO", "--out", tmp_path / "out") == 2
    assert "--paper compares with the paper's PPO" in caplog.text


@pytest.mark.parametrize(
    ("env", "task"),
    [
        ("Hopper-v5", "Hopper"),
        ("Humanoid-v3", "Humanoid"),
        ("HalfCheetah-v4", "HalfCheetah"),
        ("HumanoidStandup-v5", None),
        ("Pendulum-v1", None),
        ("Hopper", None),
    ],
)
def test_paper_task_names(env: str, task: str | None):
    assert report_paper.paper_task(env) == task


@pytest.mark.parametrize(
    ("variant", "paper_avg"),
    [
        ("GePPO", 762),
        ("GePPO overlapped", 762),
        ("PPO", 545),
        ("PPO-Adapt", None),
        ("SB3 PPO", None),
    ],
)
def test_paper_variants(variant: str, paper_avg: float | None):
    given = dict(env="Ant-v5", variant=variant, seeds=5, excluded=0, budget=1e6, avg=700, final=1500)
    row = (
        {column: math.nan for column in ROW_COLUMNS}
        | given
        | {"env_steps_per_s": 1000, "time_budget_s": 1000}
    )
    paper = report_paper.compare_with_paper(pd.DataFrame([row]))
    assert (paper.paper_avg.iloc[0] if len(paper) else None) == paper_avg


def test_table1_study_covers_the_papers_tasks():
    """tuned_examples/table1.yaml runs GePPO and the paper's PPO on each task of the paper's
    table, 5 seeds x 1M steps, with the paper's per-task settings, and checkpoints to resume."""
    specs = load_experiments(TUNED_EXAMPLES / "table1.yaml")
    trials = {(t["env"], t.get("sample_reuse", True), t["seed"]): t for s in specs for t in resolve_trials(s)}
    assert len(trials) == 60
    tasks = {report_paper.paper_task(env) for env, _, _ in trials}
    assert tasks == set(report_paper.PAPER_TABLE1.task)
    assert {seed for _, _, seed in trials} == {0, 1, 2, 3, 4}
    for (env, reuse, _), trial in trials.items():
        assert trial.get("adaptive_lr", True) == reuse  # the paper's PPO keeps its lr fixed
        lr, std = {"Ant": (1e-4, 0.5), "Humanoid": (3e-5, 0.5)}.get(
            report_paper.paper_task(env), (None, None)
        )
        assert (trial.get("lr"), trial.get("init_std_multiple")) == (lr, std)
    for spec in specs:
        assert spec.run == "GePPO"
        assert spec.stop == {"num_env_steps_sampled_lifetime": report_paper.PAPER_BUDGET}
        assert spec.checkpoint_config["checkpoint_at_end"]
        assert spec.checkpoint_config["checkpoint_frequency"] > 0
