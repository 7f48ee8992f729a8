"""The report's tables, every value known by hand (:mod:`report_helpers`): the rows that
:mod:`rllib_geppo.report.build` computes, as :mod:`rllib_geppo.report.main` writes them to the
CSVs and :mod:`rllib_geppo.report.markdown` to table.md."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from report_helpers import (
    GEPPO,
    GEPPO_STEPS,
    PPO,
    PPO_STEPS,
    as_float,
    linear,
    read_rows,
    run_cli,
    sweep,
    write_results,
    write_trial,
)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def test_table_values_known_by_hand(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    rows = read_rows(out)
    geppo, ppo = rows["Hopper-v5", "GePPO"], rows["Hopper-v5", "PPO"]
    # At equal wall-clock: PPO (1000 env steps/s) reaches the budget in T = 10 s, when GePPO
    # (500/s) is at 5000 steps: R = 1000 and 1200 -> 1100 +- 100; PPO's R at 10 s is its final.
    expected_geppo = {
        "seeds": 2,
        "budget": 10000,
        "avg": 1300,
        "avg_se": 100,
        "final": 2100,
        "final_se": 100,
        "avg_vs_baseline_pct": 100,
        "final_vs_baseline_pct": 100,
        # differences in standard errors of the difference: 650 / 111.8, 1050 / 111.8
        "avg_vs_baseline_se": 650 / math.hypot(100, 50),
        "final_vs_baseline_se": 1050 / math.hypot(100, 50),
        "steps_to_baseline_final": 4750,
        "env_steps_per_s": 500,
        "time_to_baseline_final_s": 9.5,
        "return_at_time": 1100,
        "return_at_time_se": 100,
        "time_budget_s": 10,
    }
    expected_ppo = {
        "seeds": 2,
        "avg": 650,
        "avg_se": 50,
        "final": 1050,
        "final_se": 50,
        "steps_to_baseline_final": 10000,
        "env_steps_per_s": 1000,
        "time_to_baseline_final_s": 10.0,
        "return_at_time": 1050,
        "time_budget_s": 10,
    }
    for row, expected in ((geppo, expected_geppo), (ppo, expected_ppo)):
        for key, value in expected.items():
            assert as_float(row, key) == pytest.approx(value), key
    assert ppo["avg_vs_baseline_pct"] == ppo["final_vs_baseline_pct"] == ""
    table = (out / "table.md").read_text()
    assert (
        "| Hopper-v5 | 0.01 | GePPO | 2 | 1,300 ± 100 | +100.0% (+5.81 s.e.) | 2,100 ± 100 "
        "| +100.0% (+9.39 s.e.) "
        "| 0.00475 | 10 s | 500 | 1,100 ± 100 | 10 s |"
    ) in table
    assert (
        "| Hopper-v5 | 0.01 | PPO | 2 | 650 ± 50 | — | 1,050 ± 50 | — | 0.01 | 10 s "
        "| 1,000 | 1,050 ± 50 | 10 s |"
    ) in table


def test_mean_gains_across_environments_known_by_hand(results: Path, tmp_path: Path):
    """Hopper (the fixture): GePPO 1,300 +- 100 against PPO's 650 +- 50, +100% and 5.8 s.e. the
    better. Walker2d: both average 650 +- 50, 0%. So GePPO's mean gain over PPO is +50% with
    1 environment above, and PPO's over GePPO (-50% and 0%) is -25% with 1 below. PPO-Adapt ran
    on Hopper alone: a mean over one environment is no mean, so its cells are n/a."""
    single = tmp_path / "single"
    assert run_cli(results, "--out", single) == 0
    assert "Across environments" not in (single / "table.md").read_text()
    assert not (single / "mean_gains.csv").exists()
    walker = results / "walker"
    for seed, offset in ((0, 0), (1, 100)):
        write_trial(
            walker, "GePPO", "Walker2d-v5", seed, GEPPO, GEPPO_STEPS, linear(0.1, offset, GEPPO_STEPS), 500
        )
        write_trial(
            walker, "GePPO", "Walker2d-v5", seed + 2, PPO, PPO_STEPS, linear(0.1, offset, PPO_STEPS), 1000
        )
    write_trial(
        results / "adapt",
        "GePPO",
        "Hopper-v5",
        0,
        {**PPO, "adaptive_lr": True},
        PPO_STEPS,
        linear(0.1, 0, PPO_STEPS),
        1000,
    )
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    with (out / "mean_gains.csv").open() as handle:
        gains = {(r["variant"], r["versus"]): r for r in csv.DictReader(handle)}
    assert set(gains) == {("GePPO", "PPO"), ("PPO", "GePPO")}
    for pair, mean_pct, above, below in ((("GePPO", "PPO"), 50, 1, 0), (("PPO", "GePPO"), -25, 0, 1)):
        assert float(gains[pair]["mean_pct"]) == pytest.approx(mean_pct)
        assert (gains[pair]["envs"], gains[pair]["above"], gains[pair]["below"]) == (
            "2",
            str(above),
            str(below),
        )
    table = (out / "table.md").read_text().split("## Across environments")[1]
    assert "| variant | vs GePPO | vs PPO | vs PPO-Adapt |" in table
    assert "| GePPO | — | +50.0% (1↑ 0↓) | n/a |" in table
    assert "| PPO | -25.0% (0↑ 1↓) | — | n/a |" in table
    assert "| PPO-Adapt | n/a | n/a | — |" in table


def test_update_size_against_its_target_and_the_late_change(results: Path, tmp_path: Path):
    """GePPO's seeds logged TV 0.04 and 0.06 against a target of 0.05: 0.05 ± 0.01 over the last
    tenth, on target. Every return curve rises to the budget: its peak is the last tenth, no
    decline. PPO logged no TV."""
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    with (out / "stability.csv").open() as handle:
        rows = {r["variant"]: r for r in csv.DictReader(handle)}
    expected = {
        "seeds": 2,
        "tv_last": 0.05,
        "tv_last_se": 0.01,
        "tv_target": 0.05,
        "peak_start": 9200,
        "peak_end": 10000,
        "late_change": 0,
        "late_change_se": 0,
    }
    for key, value in expected.items():
        assert as_float(rows["GePPO"], key) == pytest.approx(value), key
    assert rows["PPO"]["tv_last"] == rows["PPO"]["tv_target"] == ""
    table = (out / "table.md").read_text()
    assert "| Hopper-v5 | GePPO | 2 | 0.05 ± 0.01 | 0.05 | +0.0% | 0.0092–0.01 | 0 ± 0 |" in table
    assert "| Hopper-v5 | PPO | 2 | n/a | n/a | n/a | 0.0092–0.01 | 0 ± 0 |" in table


def test_steps_and_time_to_a_target_return(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out, "--target", "Hopper-v5=1100") == 0
    rows = read_rows(out)
    geppo, ppo = rows["Hopper-v5", "GePPO"], rows["Hopper-v5", "PPO"]
    assert as_float(geppo, "steps_to_target") == pytest.approx(5000)  # mean curve 0.2 x + 100
    assert as_float(geppo, "time_to_target_s") == pytest.approx(10)  # at 500 env steps/s
    assert math.isnan(as_float(ppo, "steps_to_target"))  # PPO's curve ends at 1,050
    table = (out / "table.md").read_text()
    assert "| Hopper-v5 | GePPO | 1,100 | 0.005 | 10 s |" in table
    assert "| Hopper-v5 | PPO | 1,100 | not reached | not reached |" in table


def test_trials_csv_holds_each_trials_figures_behind_its_row(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    with (out / "trials.csv").open() as handle:
        trials = {(r["variant"], int(r["seed"])): r for r in csv.DictReader(handle)}
    # Lines 0.2 s + {0, 200} and 0.1 s + {0, 100}, averaged over the common grid, 2,000-10,000 env steps.
    expected = {
        ("GePPO", 0): (1200, 2000),
        ("GePPO", 1): (1400, 2200),
        ("PPO", 2): (600, 1000),
        ("PPO", 3): (700, 1100),
    }
    assert set(trials) == set(expected)
    for key, (avg, final) in expected.items():
        assert (float(trials[key]["avg"]), float(trials[key]["final"])) == pytest.approx((avg, final))
        assert trials[key]["env"] == "Hopper-v5" and float(trials[key]["budget"]) == 10000
        assert trials[key]["trial"].startswith("GePPO_Hopper-v5_abcde_")


def test_without_the_baseline_the_comparison_columns_say_na(results: Path, tmp_path: Path):
    write_trial(
        results / "exp", "GePPO", "Swimmer-v5", 0, GEPPO, GEPPO_STEPS, linear(0.01, 0, GEPPO_STEPS), 500
    )
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    line = next(text for text in (out / "table.md").read_text().splitlines() if "Swimmer-v5" in text)
    assert line.count("| n/a ") == 4
    assert read_rows(out)["Swimmer-v5", "GePPO"]["steps_to_baseline_final"] == ""


def test_a_baseline_split_by_its_settings_is_named(tmp_path: Path, caplog):
    sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    assert run_cli(tmp_path, "--baseline", "GePPO", "--out", tmp_path / "out") == 0
    assert (
        "--baseline GePPO: its trials differ in settings and form the rows "
        "'GePPO lr=0.0003', 'GePPO lr=0.001'"
    ) in caplog.text
