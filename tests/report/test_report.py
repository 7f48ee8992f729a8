"""The results report: Table 1 arithmetic, trial selection, files written, and a real Tune run.

The synthetic trials have linear return curves, so every table value is known by hand:
on the common grid [2000, 10000] env steps,

    GePPO seeds: R = 0.2 s and 0.2 s + 200   -> avg 1200, 1400 (1300 ± 100); final 2100 ± 100
    PPO seeds:   R = 0.1 s and 0.1 s + 100   -> avg  600,  700 ( 650 ±  50); final 1050 ±  50

so GePPO improves on PPO by 100% in both, and its mean curve 0.2 s + 100 reaches PPO's final
1050 at s = 4750 env steps, i.e. 9.5 s into training at 500 env steps per second.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from helpers import TUNED_EXAMPLES
from rllib_geppo.report import main as report, paper as report_paper
from rllib_geppo.cli.experiment_file import load_experiments, resolve_trials
from rllib_geppo.report.plots import ReturnsPanel, TVPanel, returns_figure, tv_figure
from rllib_geppo.report.stats import (
    Row,
    Run,
    band,
    changes_from_peak,
    common_budget,
    compare_at_time,
    difference_in_se,
    first_crossing,
    improvement_pct,
    late_change,
    step_grid,
    time_average,
    window_average,
)

GEPPO = {"sample_reuse": True, "adaptive_lr": True}
PPO = {"sample_reuse": False, "adaptive_lr": False}


# ----------------------------------------------------------------------------- synthetic folders


def _nest(flat: dict[str, float]) -> dict:
    """{"a/b": 1} -> {"a": {"b": 1}}, as Tune writes result.json."""
    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def write_trial(root: Path, algo: str, env: str, seed: int, params: dict, steps, returns,
                steps_per_s: float, tv: float | None = None) -> Path:
    """A Tune-like trial folder: params.json and one result.json line per iteration."""
    trial = root / f"{algo}_{env}_abcde_{seed:05d}_{seed}_seed={seed}_2026-01-01_00-00-00"
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps({"env": env, "seed": seed, **params}))
    lines = []
    for i, (s, r) in enumerate(zip(steps, returns), start=1):
        flat = {"training_iteration": i, report.STEPS_KEY: s, report.RETURN_KEY: r,
                report.TIME_KEY: s / steps_per_s}
        if tv is not None:
            flat |= {report.TV_KEY: tv, report.TV_TARGET_KEY: 0.05}
        lines.append(json.dumps(_nest(flat)))
    (trial / "result.json").write_text("\n".join(lines) + "\n")
    return trial


def linear(slope: float, offset: float, steps) -> list[float]:
    return [slope * s + offset for s in steps]


GEPPO_STEPS = list(range(1000, 10001, 1000))
PPO_STEPS = list(range(2000, 10001, 2000))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table above."""
    root = tmp_path / "results" / "exp"
    gappy = linear(0.2, 0, GEPPO_STEPS)
    gappy[4] = float("nan")  # no episode ended in that iteration: skipped, the line stays exact
    write_trial(root, "GePPO", "Hopper-v5", 0, GEPPO, GEPPO_STEPS, gappy, 500, tv=0.04)
    write_trial(root, "GePPO", "Hopper-v5", 1, GEPPO, GEPPO_STEPS, linear(0.2, 200, GEPPO_STEPS),
                500, tv=0.06)
    write_trial(root, "GePPO", "Hopper-v5", 2, PPO, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 1000)
    write_trial(root, "GePPO", "Hopper-v5", 3, PPO, PPO_STEPS, linear(0.1, 100, PPO_STEPS), 1000)
    return tmp_path / "results"


def run_cli(*args: str) -> int:
    return report.main([str(a) for a in args])


def read_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "table.csv").open() as handle:
        return {(r["env"], r["variant"]): r for r in csv.DictReader(handle)}


def as_float(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row[key] else float("nan")


# ----------------------------------------------------------------------------- the table


def test_table_values_known_by_hand(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    rows = read_rows(out)
    geppo, ppo = rows["Hopper-v5", "GePPO"], rows["Hopper-v5", "PPO"]
    # At equal wall-clock: PPO (1000 env steps/s) reaches the budget in T = 10 s, when GePPO
    # (500/s) is at 5000 steps: R = 1000 and 1200 -> 1100 +- 100; PPO's R at 10 s is its final.
    expected_geppo = {"seeds": 2, "budget": 10000, "avg": 1300, "avg_se": 100, "final": 2100,
                      "final_se": 100, "avg_vs_baseline_pct": 100, "final_vs_baseline_pct": 100,
                      # differences in standard errors of the difference: 650 / 111.8, 1050 / 111.8
                      "avg_vs_baseline_se": 650 / math.hypot(100, 50),
                      "final_vs_baseline_se": 1050 / math.hypot(100, 50),
                      "steps_to_baseline_final": 4750, "env_steps_per_s": 500,
                      "time_to_baseline_final_s": 9.5, "return_at_time": 1100,
                      "return_at_time_se": 100, "time_budget_s": 10}
    expected_ppo = {"seeds": 2, "avg": 650, "avg_se": 50, "final": 1050, "final_se": 50,
                    "steps_to_baseline_final": 10000, "env_steps_per_s": 1000,
                    "time_to_baseline_final_s": 10.0, "return_at_time": 1050, "time_budget_s": 10}
    for row, expected in ((geppo, expected_geppo), (ppo, expected_ppo)):
        for key, value in expected.items():
            assert as_float(row, key) == pytest.approx(value), key
    assert ppo["avg_vs_baseline_pct"] == ppo["final_vs_baseline_pct"] == ""
    table = (out / "table.md").read_text()
    assert ("| Hopper-v5 | 0.01 | GePPO | 2 | 1,300 ± 100 | +100.0% (+5.81 s.e.) | 2,100 ± 100 "
            "| +100.0% (+9.39 s.e.) "
            "| 0.00475 | 10 s | 500 | 1,100 ± 100 | 10 s |") in table
    assert ("| Hopper-v5 | 0.01 | PPO | 2 | 650 ± 50 | — | 1,050 ± 50 | — | 0.01 | 10 s "
            "| 1,000 | 1,050 ± 50 | 10 s |") in table


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
        write_trial(walker, "GePPO", "Walker2d-v5", seed, GEPPO, GEPPO_STEPS,
                    linear(0.1, offset, GEPPO_STEPS), 500)
        write_trial(walker, "GePPO", "Walker2d-v5", seed + 2, PPO, PPO_STEPS,
                    linear(0.1, offset, PPO_STEPS), 1000)
    write_trial(results / "adapt", "GePPO", "Hopper-v5", 0, {**PPO, "adaptive_lr": True},
                PPO_STEPS, linear(0.1, 0, PPO_STEPS), 1000)
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    with (out / "mean_gains.csv").open() as handle:
        gains = {(r["variant"], r["versus"]): r for r in csv.DictReader(handle)}
    assert set(gains) == {("GePPO", "PPO"), ("PPO", "GePPO")}
    for pair, mean_pct, above, below in ((("GePPO", "PPO"), 50, 1, 0), (("PPO", "GePPO"), -25, 0, 1)):
        assert float(gains[pair]["mean_pct"]) == pytest.approx(mean_pct)
        assert (gains[pair]["envs"], gains[pair]["above"], gains[pair]["below"]) == \
            ("2", str(above), str(below))
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
    expected = {"seeds": 2, "tv_last": 0.05, "tv_last_se": 0.01, "tv_target": 0.05,
                "peak_start": 9200, "peak_end": 10000, "late_change": 0, "late_change_se": 0}
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


@pytest.mark.parametrize("target", ["Hopper-v5", "Hopper-v5=many", "=1100", "Hopper-v5=nan"])
def test_a_malformed_target_is_a_usage_error(results: Path, capsys, target: str):
    with pytest.raises(SystemExit):
        run_cli(results, "--target", target)
    assert f"expected ENV=RETURN (e.g. Hopper-v5=2500), got {target!r}" in capsys.readouterr().err


def test_trials_csv_holds_each_trials_figures_behind_its_row(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    with (out / "trials.csv").open() as handle:
        trials = {(r["variant"], int(r["seed"])): r for r in csv.DictReader(handle)}
    # Lines 0.2 s + {0, 200} and 0.1 s + {0, 100}, averaged over the common grid, 2,000-10,000 env steps.
    expected = {("GePPO", 0): (1200, 2000), ("GePPO", 1): (1400, 2200),
                ("PPO", 2): (600, 1000), ("PPO", 3): (700, 1100)}
    assert set(trials) == set(expected)
    for key, (avg, final) in expected.items():
        assert (float(trials[key]["avg"]), float(trials[key]["final"])) == pytest.approx((avg, final))
        assert trials[key]["env"] == "Hopper-v5" and float(trials[key]["budget"]) == 10000
        assert trials[key]["trial"].startswith("GePPO_Hopper-v5_abcde_")


def test_early_stopped_and_crashed_trials_are_flagged_and_left_out(results: Path, tmp_path: Path,
                                                                   caplog):
    exp = results / "exp"
    write_trial(exp, "GePPO", "Hopper-v5", 4, GEPPO, GEPPO_STEPS[:6], linear(5, 0, GEPPO_STEPS[:6]),
                500)
    crashed = write_trial(exp, "GePPO", "Hopper-v5", 5, GEPPO, GEPPO_STEPS,
                          linear(5, 0, GEPPO_STEPS), 500)
    (crashed / "error.txt").write_text("Traceback ...")
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        assert run_cli(results, "--out", out) == 0
    geppo = read_rows(out)["Hopper-v5", "GePPO"]
    # The outliers (slope 5) would move every number: unchanged means left out.
    assert (as_float(geppo, "seeds"), as_float(geppo, "excluded")) == (2, 2)
    assert as_float(geppo, "avg") == pytest.approx(1300)
    table = (out / "table.md").read_text()
    assert "| GePPO | 2 (2 excluded) |" in table
    assert "seed 4: stopped early at 6,000 env steps (budget 10,000)" in table
    assert "seed 5: crashed (error.txt)" in table
    assert "stopped early" in caplog.text and "crashed" in caplog.text


def test_a_trial_that_ran_on_without_ending_an_episode_is_told_apart_from_one_that_stopped(
        results: Path, tmp_path: Path):
    """An env without a time limit ends no episode once its policy balances: the trial reaches
    the budget, its return curve does not."""
    unending = linear(0.2, 100, GEPPO_STEPS)
    unending[6:] = [float("nan")] * 4
    write_trial(results / "exp", "GePPO", "Hopper-v5", 7, GEPPO, GEPPO_STEPS, unending, 500)
    assert run_cli(results, "--out", tmp_path / "out", "--budget", "1e4") == 0
    assert ("seed 7: no return after 6,000 env steps (budget 10,000): the trial ran to 10,000 but "
            "finished no episode (give the env a time limit)") in (tmp_path / "out" / "table.md").read_text()


def test_tune_error_status_marks_a_trial_crashed(results: Path, tmp_path: Path):
    exp = results / "exp"
    failed = write_trial(exp, "GePPO", "Hopper-v5", 6, GEPPO, GEPPO_STEPS,
                         linear(5, 0, GEPPO_STEPS), 500)
    record = {"relative_logdir": failed.name, "trainable_name": "GePPO", "status": "ERROR"}
    state = {"trial_data": [[json.dumps(record), "{}"]]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    assert run_cli(results, "--out", tmp_path / "out") == 0
    assert "seed 6: crashed (Tune status ERROR)" in (tmp_path / "out" / "table.md").read_text()


def test_copied_folders_of_a_run_file_are_labelled_by_the_config_in_their_results(tmp_path: Path):
    """`rllib train file` names trial folders after their experiments ("geppo-hopper_..."), and
    copied folders have no Tune record: the variant comes from the config in result.json."""
    root = tmp_path / "copied"
    for name, config in (("geppo-hopper", GEPPO), ("ppo-hopper", PPO)):
        trial = write_trial(root, name, "Hopper-v5", 0, {}, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 500)
        lines = [json.loads(line) | {"config": {"lr": 3e-4, **config}}
                 for line in (trial / "result.json").read_text().splitlines()]
        (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")
    assert sorted(report.load_trial(t).variant for t in root.iterdir()) == ["GePPO", "PPO"]


def test_explicit_budget_reads_final_there_and_keeps_trials_that_reach_it(results: Path,
                                                                          tmp_path: Path):
    # Stopped at 6000 env steps on the seeds' mean line: counted at a 6000-step budget.
    write_trial(results / "exp", "GePPO", "Hopper-v5", 4, GEPPO, GEPPO_STEPS[:6],
                linear(0.2, 100, GEPPO_STEPS[:6]), 500)
    out = tmp_path / "out"
    assert run_cli(results, "--out", out, "--budget", "6e3") == 0
    rows = read_rows(out)
    geppo, ppo = rows["Hopper-v5", "GePPO"], rows["Hopper-v5", "PPO"]
    assert as_float(geppo, "seeds") == 3
    assert as_float(geppo, "final") == pytest.approx(1300)  # 0.2 * 6000 + 100
    assert as_float(ppo, "final") == pytest.approx(650)  # 0.1 * 6000 + 50
    assert as_float(geppo, "budget") == 6000


def test_budget_beyond_every_trial_is_an_input_error(results: Path, tmp_path: Path, caplog):
    assert run_cli(results, "--out", tmp_path / "out", "--budget", "20000") == 2
    assert "no trial reaches the budget" in caplog.text


def test_without_the_baseline_the_comparison_columns_say_na(results: Path, tmp_path: Path):
    write_trial(results / "exp", "GePPO", "Swimmer-v5", 0, GEPPO, GEPPO_STEPS,
                linear(0.01, 0, GEPPO_STEPS), 500)
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    line = next(l for l in (out / "table.md").read_text().splitlines() if "Swimmer-v5" in l)
    assert line.count("| n/a ") == 4
    assert read_rows(out)["Swimmer-v5", "GePPO"]["steps_to_baseline_final"] == ""


@pytest.mark.parametrize(("algorithm", "params", "variant"), [
    ("GePPO", {"sample_reuse": True, "adaptive_lr": True}, "GePPO"),
    ("GePPO", {"sample_reuse": True, "adaptive_lr": False}, "GePPO"),
    ("GePPO", {"sample_reuse": False, "adaptive_lr": False}, "PPO"),
    ("GePPO", {"sample_reuse": False, "adaptive_lr": True}, "PPO-Adapt"),
    ("PPO", {}, "RLlib PPO"),
    ("SB3PPO", {}, "SB3 PPO"),
    ("APPO", {}, "APPO"),
])
def test_variant_names(algorithm: str, params: dict, variant: str):
    assert report.variant_name(algorithm, params) == variant


def test_a_trial_whose_updates_lagged_is_overlapped_geppo(tmp_path: Path):
    """Whether sampling overlapped is read from the run (``sample_lag``), not from params, where
    ``overlap_sampling="auto"`` would not say."""
    for seed, lag, module in ((0, 0, "default_policy"), (1, 1, "default_policy"), (2, 1, "p1")):
        trial = write_trial(tmp_path, "GePPO", "Hopper-v5", seed, GEPPO, GEPPO_STEPS,
                            linear(0.1, 0, GEPPO_STEPS), 500)
        lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        for i, line in enumerate(lines):  # the first update of an overlapped run is synchronous
            line.setdefault("learners", {})[module] = {"sample_lag": lag if i else 0}
        (trial / "result.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    # Seed 2: a multi-agent run, whose modules each report their own lag.
    assert {t.seed: t.variant for t in report.load_trials([tmp_path])} == {
        0: "GePPO", 1: "GePPO overlapped", 2: "GePPO overlapped"}


def _experiment_trials(root: Path, offsets: dict[str, tuple[int, ...]]) -> None:
    """Trials labelled by experiment, R = 0.1 s + offset on PPO_STEPS (avg 600 + offset)."""
    for name, seeds in offsets.items():
        for seed, offset in enumerate(seeds):
            trial = write_trial(root, "x", "Hopper-v5", seed, PPO, PPO_STEPS,
                                linear(0.1, offset, PPO_STEPS), 500)
            trial.rename(trial.with_name(f"{name}_abcde_{seed:05d}_{seed}_seed={seed}_2026-01-01"))


def test_group_by_experiment_labels_trials_with_their_experiment(tmp_path: Path):
    _experiment_trials(tmp_path, {"ppo-adam-eps": (0, 0), "ppo-joint-clip": (600, 600)})
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--group-by", "experiment", "--baseline", "ppo-adam-eps", "--out", out) == 0
    rows = read_rows(out)
    assert {variant for _, variant in rows} == {"ppo-adam-eps", "ppo-joint-clip"}
    assert as_float(rows["Hopper-v5", "ppo-joint-clip"], "avg_vs_baseline_pct") == pytest.approx(100.0)


def test_pooled_variants_are_one_row_with_all_their_seeds(tmp_path: Path):
    _experiment_trials(tmp_path, {"whole": (0, 200), "split-a": (0, 100), "split-b": (200, 300)})
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--group-by", "experiment", "--pool", "split=split-a,split-b",
                   "--baseline", "whole", "--out", out) == 0
    rows = read_rows(out)
    assert {variant for _, variant in rows} == {"whole", "split"}
    split = rows["Hopper-v5", "split"]
    # avgs 600, 700, 800, 900: mean 750, std (ddof 1) 129.1, s.e. 64.55; whole: 700 ± 100
    split_se = np.std([600, 700, 800, 900], ddof=1) / 2
    assert as_float(split, "seeds") == 4
    assert as_float(split, "avg") == pytest.approx(750)
    assert as_float(split, "avg_se") == pytest.approx(split_se)
    assert as_float(split, "avg_vs_baseline_se") == pytest.approx(50 / math.hypot(split_se, 100))


@pytest.mark.parametrize("pool, message", [
    ("split=split-a,split-c", "no trial is labelled 'split-c'"),
    ("whole=split-a,split-b", "'whole' is already a variant of its own"),
])
def test_a_pool_that_cannot_be_made_is_a_clear_error(tmp_path: Path, caplog, pool: str,
                                                     message: str):
    _experiment_trials(tmp_path, {"whole": (0, 200), "split-a": (0, 100), "split-b": (200, 300)})
    assert run_cli(tmp_path, "--group-by", "experiment", "--pool", pool,
                   "--out", tmp_path / "out") == report.EXIT_BAD_INPUT
    assert message in caplog.text


def test_a_variant_in_two_pools_is_a_clear_error(tmp_path: Path, caplog):
    _experiment_trials(tmp_path, {"whole": (0,), "split-a": (0,), "split-b": (0,)})
    assert run_cli(tmp_path, "--group-by", "experiment", "--pool", "p=split-a",
                   "--pool", "q=split-a,split-b", "--out", tmp_path / "out") == report.EXIT_BAD_INPUT
    assert "'split-a' is in both 'p' and 'q'" in caplog.text


def _log_config(trial: Path, config: dict) -> None:
    """Put ``config`` into every result line, as Tune logs the trial's whole config."""
    lines = [json.loads(line) | {"config": config}
             for line in (trial / "result.json").read_text().splitlines()]
    (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")


def _sweep(root: Path, settings: dict[str, dict], seeds=(0, 1)) -> None:
    """GePPO trials per named settings and seed, R = 0.1 s + 100 * (seed + index of the
    settings): each settings' avg is 650 + 100 * index."""
    for index, (name, params) in enumerate(settings.items()):
        for seed in seeds:
            write_trial(root / name, "GePPO", "Hopper-v5", seed, GEPPO | params, PPO_STEPS,
                        linear(0.1, 100 * (seed + index), PPO_STEPS), 500)


def test_trials_that_differ_in_a_setting_besides_the_seed_are_never_pooled(tmp_path: Path):
    """A 2 lr x 2 seed sweep is two rows of two seeds, each labelled with its lr."""
    _sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--out", out) == 0
    rows = read_rows(out)
    assert set(rows) == {("Hopper-v5", "GePPO lr=0.0003"), ("Hopper-v5", "GePPO lr=0.001")}
    assert [as_float(rows["Hopper-v5", f"GePPO lr={lr}"], "avg") for lr in ("0.0003", "0.001")] == \
        pytest.approx([650, 750])
    with (out / "trials.csv").open() as handle:
        seeds = sorted((r["variant"], r["seed"]) for r in csv.DictReader(handle))
    assert seeds == [("GePPO lr=0.0003", "0"), ("GePPO lr=0.0003", "1"),
                     ("GePPO lr=0.001", "0"), ("GePPO lr=0.001", "1")]


def test_a_default_against_a_command_line_override_is_two_rows(tmp_path: Path):
    """The quickstart run twice, once with ``-c lr=1e-3``: params.json holds only what the run
    file set, the config logged with the results the rest; both seed 0."""
    for name, params in (("default", {}), ("override", {"lr": 1e-3})):
        trial = write_trial(tmp_path / name, "GePPO", "Pendulum-v1", 0, params, PPO_STEPS,
                            linear(0.1, 0, PPO_STEPS), 500)
        _log_config(trial, {**GEPPO, "lr": 3e-4, "seed": 0, "model_config": {},
                            "policy_mapping_fn": f"<function f at 0x7f{len(name)}>"})
    assert sorted(t.variant for t in report.load_trials([tmp_path])) == [
        "GePPO lr=0.0003", "GePPO lr=0.001"]


def test_settings_a_trial_does_not_record_are_no_difference(tmp_path: Path):
    """Results written before a setting existed lack it; a mapping's missing entry is its
    default, and nested settings are named by their path."""
    _sweep(tmp_path, {"old": {}, "new": {"sample_lag": None}})
    assert {t.variant for t in report.load_trials([tmp_path])} == {"GePPO"}
    for name, model in (("wide", {"model": {"fcnet_hiddens": [400, 300]}}), ("plain", {"model": {}})):
        write_trial(tmp_path / "more" / name, "PPO", "Hopper-v5", 5, model, PPO_STEPS,
                    linear(0.1, 0, PPO_STEPS), 500)
    assert {t.variant for t in report.load_trials([tmp_path / "more"])} == {
        "RLlib PPO model/fcnet_hiddens=[400,300]", "RLlib PPO model/fcnet_hiddens=default"}


def test_geppo_trials_are_labelled_by_the_network_they_built(tmp_path: Path):
    """GePPO's config spells its default network out, a wide-network run file sets only what it
    changes: the labels name the one difference, the policy's layers."""
    _sweep(tmp_path, {
        "default": {"model_config": {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}},
        "wide": {"model_config": {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]}},
        "unset": {"model_config": {}}}, seeds=(0,))
    logged = write_trial(tmp_path / "logged", "GePPO", "Hopper-v5", 1, GEPPO, PPO_STEPS,
                         linear(0.1, 0, PPO_STEPS), 500)  # the network in the logged config only
    _log_config(logged, {**GEPPO, "_model_config": {"fcnet_hiddens": [400, 300],
                                                    "vf_fcnet_hiddens": [64, 64]}})
    assert sorted(t.variant for t in report.load_trials([tmp_path])) == [
        "GePPO model_config/fcnet_hiddens=[400,300]", "GePPO model_config/fcnet_hiddens=[400,300]",
        "GePPO model_config/fcnet_hiddens=[64,64]", "GePPO model_config/fcnet_hiddens=[64,64]"]


def test_a_setting_that_splits_a_variant_labels_it_in_every_environment(tmp_path: Path):
    """Hopper ran both networks, Walker2d the default alone (a study still running): Walker2d's
    trials are labelled with their network too, so the default-network rows of the two tasks
    pair up across environments. Walker2d's own lr differs between tasks only: no label."""
    _sweep(tmp_path, {"default": {"model_config": {"fcnet_hiddens": [64, 64]}},
                      "wide": {"model_config": {"fcnet_hiddens": [400, 300],
                                                "vf_fcnet_hiddens": [64, 64]}}}, seeds=(0,))
    for seed in (0, 1):
        write_trial(tmp_path / "walker", "GePPO", "Walker2d-v5", seed,
                    GEPPO | {"lr": 1e-4, "model_config": {"fcnet_hiddens": [64, 64]}},
                    PPO_STEPS, linear(0.1, 100 * seed, PPO_STEPS), 500)
    assert sorted((t.env, t.variant) for t in report.load_trials([tmp_path])) == [
        ("Hopper-v5", "GePPO model_config/fcnet_hiddens=[400,300]"),
        ("Hopper-v5", "GePPO model_config/fcnet_hiddens=[64,64]"),
        ("Walker2d-v5", "GePPO model_config/fcnet_hiddens=[64,64]"),
        ("Walker2d-v5", "GePPO model_config/fcnet_hiddens=[64,64]")]


def test_group_by_named_settings_pools_the_others_with_a_warning(tmp_path: Path, caplog):
    _sweep(tmp_path, {"a": {"lr": 3e-4, "num_epochs": 5}, "b": {"lr": 3e-4, "num_epochs": 10},
                      "c": {"lr": 1e-3, "num_epochs": 5}})
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--group-by", "lr", "--out", out) == 0
    rows = read_rows(out)
    assert {variant: as_float(row, "seeds") for (_, variant), row in rows.items()} == {
        "GePPO lr=0.0003": 4, "GePPO lr=0.001": 2}
    assert "Hopper-v5 / GePPO: --group-by lr pools trials that differ in num_epochs" in caplog.text
    # Pooling by hand instead: a label with a list in it is one member of the pool.
    _sweep(tmp_path / "nets", {"a": {"model_config": {"fcnet_hiddens": [64, 64]}},
                               "b": {"model_config": {"fcnet_hiddens": [32], "vf_fcnet_hiddens": [64, 64]}}})
    assert run_cli(tmp_path / "nets", "--out", out, "--pool", "nets=GePPO model_config/"
                   "fcnet_hiddens=[64,64],GePPO model_config/fcnet_hiddens=[32]") == 0
    assert as_float(read_rows(out)["Hopper-v5", "nets"], "seeds") == 4


def test_grouping_by_a_setting_no_trial_has_is_a_clear_error(tmp_path: Path, caplog, capsys):
    _sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    assert run_cli(tmp_path, "--group-by", "lr,nmu_epochs", "--out", tmp_path / "out") == 2
    assert ("--group-by lr,nmu_epochs: no trial records the setting 'nmu_epochs' (settings that "
            "differ between trials: lr; or use variant / experiment)") in caplog.text
    with pytest.raises(SystemExit):
        run_cli(tmp_path, "--group-by", "experiment,lr")
    assert "expected variant or experiment alone, or setting names" in capsys.readouterr().err


def test_a_baseline_split_by_its_settings_is_named(tmp_path: Path, caplog):
    _sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    assert run_cli(tmp_path, "--baseline", "GePPO", "--out", tmp_path / "out") == 0
    assert ("--baseline GePPO: its trials differ in settings and form the rows "
            "'GePPO lr=0.0003', 'GePPO lr=0.001'") in caplog.text


def test_a_malformed_pool_is_a_usage_error(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        run_cli(tmp_path, "--pool", "split")
    assert "expected LABEL=VARIANT" in capsys.readouterr().err


# ----------------------------------------------------------------------------- bad input


def test_empty_folder_is_a_clear_error(tmp_path: Path, caplog):
    (tmp_path / "empty").mkdir()
    assert run_cli(tmp_path / "empty", "--out", tmp_path / "out") == 2
    assert f"{tmp_path / 'empty'}: no Tune trial folders found" in caplog.text
    assert "params.json and result.json" in caplog.text
    assert not (tmp_path / "out").exists()


def test_missing_folder_is_a_clear_error(tmp_path: Path, caplog):
    assert run_cli(tmp_path / "nowhere") == 2
    assert f"{tmp_path / 'nowhere'}: no such directory" in caplog.text


def test_trials_without_results_are_a_clear_error(tmp_path: Path, caplog):
    trial = write_trial(tmp_path / "exp", "GePPO", "Hopper-v5", 0, GEPPO, [], [], 500)
    assert run_cli(tmp_path / "exp", "--out", tmp_path / "out") == 2
    assert f"{trial.resolve()}: no results" in caplog.text


def test_torn_last_line_and_restored_iterations(tmp_path: Path):
    trial = write_trial(tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, [1000, 2000, 3000], [1, 2, 3],
                        500)
    rerun = [json.dumps(_nest({report.STEPS_KEY: s, report.RETURN_KEY: r})) for s, r in
             ((2000, 20), (3000, 30), (4000, 40))]  # restored from the 1000-step checkpoint
    with (trial / "result.json").open("a") as handle:
        handle.write("\n".join(rerun) + '\n{"num_env_steps_sampled_lif')
    results = report.read_results(trial)
    assert [report.lookup(r, report.RETURN_KEY) for r in results] == [1, 20, 30, 40]


def test_evaluation_returns_carried_into_the_next_iteration_are_not_new_points(tmp_path: Path):
    key = report.EVALUATION_PREFIX + report.RETURN_KEY
    trial = write_trial(tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, [1000, 2000, 3000, 4000, 5000],
                        [1, 2, 3, 3, 5], 500)
    lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    # RLlib's pattern with evaluation_interval=2: a result, its copy one iteration later, NaN.
    for line, value in zip(lines, [math.nan, 7.0, 7.0, math.nan, 9.0]):
        line["evaluation"] = _nest({report.RETURN_KEY: value})
    (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")

    evaluation = report.load_trial(trial, return_key=key).run.returns
    training = report.load_trial(trial).run.returns
    np.testing.assert_array_equal(evaluation, [math.nan, 7, math.nan, math.nan, 9])
    np.testing.assert_array_equal(training, [1, 2, 3, 3, 5])  # training returns are read as is

    out = tmp_path / "out"
    assert run_cli(tmp_path, "--return-key", key, "--out", out) == 0
    assert "return of the evaluation episodes" in (out / "table.md").read_text()
    row = read_rows(out)[("Hopper-v5", "GePPO")]
    assert as_float(row, "avg") == pytest.approx(8.0)  # the line from (2000, 7) to (5000, 9)


# ----------------------------------------------------------------------------- figures


def assert_png(path: Path) -> None:
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image) > 0  # something was drawn


def test_figures_are_written(results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    assert_png(out / "returns.png")
    assert_png(out / "returns_vs_time.png")
    assert_png(out / "tv.png")
    trials = report.load_trials([results])
    built = report.build_report(trials)
    (tv_panel,) = built.tv_panels
    assert set(tv_panel.bands) == {"GePPO"}  # PPO trials logged no TV
    assert tv_panel.bands["GePPO"].mean == pytest.approx(0.05)
    assert tv_panel.targets == {"GePPO": 0.05}


def test_returns_figure_has_one_panel_per_env_with_markers():
    grid = np.array([0.0, 1.0, 2.0])
    bands = {"GePPO": band(np.array([[0.0, 2.0, 4.0], [0.0, 2.0, 4.0]])),
             "PPO": band(np.array([[0.0, 1.0, 2.0]]))}
    panels = [ReturnsPanel(env=f"env{i}", grid=grid, bands=bands, baseline="PPO",
                           baseline_final=2.0, crossings={"GePPO": 1.0, "PPO": 2.0})
              for i in range(4)]
    fig = returns_figure(panels)
    assert len(fig.axes) == 4
    ax = fig.axes[0]
    dotted = [l for l in ax.get_lines() if l.get_linestyle() == ":"]
    # The baseline's final level, and GePPO's crossing (none drawn for the baseline itself).
    assert sorted((tuple(l.get_xdata()), tuple(l.get_ydata())) for l in dotted) == \
        [((0, 1), (2.0, 2.0)), ((1.0, 1.0), (0, 1))]


def test_a_long_legend_sits_below_its_panel_and_a_short_one_inside():
    """A study's six variants would cover the curves; two leave room. Every TV target shares
    one legend entry, each drawn dotted in its variant's colour."""
    grid = np.array([0.0, 1.0, 2.0])
    names = ["GePPO", "PPO", "PPO-Adapt", "GePPO wide", "PPO wide", "PPO-Adapt wide"]
    for count, below in ((2, False), (6, True)):
        bands = {name: band(np.array([[0.05, 0.05, 0.05]])) for name in names[:count]}
        fig = tv_figure([TVPanel(env="Hopper-v5", grid=grid, bands=bands,
                                 targets={name: 0.05 for name in bands})])
        fig.draw_without_rendering()
        ax = fig.axes[0]
        legend, panel = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert bool(legend.y1 < panel.y0) is below
        assert [t.get_text() for t in ax.get_legend().get_texts()] == \
            [f"{name} (n=1)" for name in bands] + ["target ε/2 (variant's colour)"]
        assert len([l for l in ax.get_lines() if l.get_linestyle() == ":"]) == count + 1


# ----------------------------------------------------------------------------- the arithmetic


def test_first_crossing_interpolates_between_grid_points():
    grid = np.array([0.0, 10.0, 20.0])
    assert first_crossing(grid, np.array([0.0, 4.0, 8.0]), 6.0) == pytest.approx(15.0)
    assert first_crossing(grid, np.array([7.0, 4.0, 8.0]), 6.0) == 0.0
    assert np.isnan(first_crossing(grid, np.array([0.0, 1.0, 2.0]), 6.0))


def test_time_average_is_exact_on_an_uneven_grid():
    grid = np.array([0.0, 1.0, 4.0])
    assert time_average(grid, 3 * grid + 1) == pytest.approx(7.0)


def test_window_average_cuts_the_curve_between_knots():
    grid = np.array([0.0, 2.0, 4.0])
    values = np.array([0.0, 4.0, 0.0])  # a peak at 2
    assert window_average(grid, values, 1.0, 3.0) == pytest.approx(3.0)
    assert window_average(grid, values, 0.0, 1.0) == pytest.approx(1.0)


def test_late_change_is_the_last_tenth_against_the_other_seeds_peak_tenth():
    """Two seeds rise to s = 6 and fall back: tenth averages 0.5, 1.5, ..., 5.5, 5.5, 4.5, 3.5,
    2.5 and twice those. Each seed's peak is the other's, tenth 5 (the first of a tie); the last
    tenth lies 3 and 6 below it: -4.5 ± 1.5."""
    grid = np.arange(11.0)
    rise_and_fall = np.minimum(grid, 12 - grid)
    change, se, peak = late_change(grid, np.stack([rise_and_fall, 2 * rise_and_fall]))
    assert (change, se, peak) == (pytest.approx(-4.5), pytest.approx(1.5), (5.0, 6.0))
    assert late_change(grid, np.stack([grid, grid + 1]))[:2] == (0, 0)  # rising: no decline
    assert all(map(math.isnan, late_change(grid, grid[None])[:2]))  # one seed: no estimate


def test_a_seed_does_not_choose_its_own_peak():
    """Each seed's peak tenth is where the others' mean is highest: seed 0's is tenth 1, where it
    is at 0, so it ends 1 above it; seed 1's is tenth 0, likewise. With three seeds, the third's
    is a tie between tenths 0 and 1 (the first counts), where it is at its last value."""
    assert changes_from_peak(np.array([[2.0, 0.0, 1.0], [0.0, 2.0, 1.0]])).tolist() == [1.0, 1.0]
    flat = np.array([[1.0, 3.0, 2.0], [3.0, 1.0, 2.0], [2.0, 2.0, 2.0]])
    assert changes_from_peak(flat).tolist() == [1.0, 1.0, 0.0]


def test_common_budget_ignores_trials_stopped_more_than_an_iteration_short():
    # Stopped by ">= 1M env steps" with 1024- and 2048-step iterations, and one cut short.
    assert common_budget([(1_000_448, 1024), (1_001_472, 2048), (600_064, 1024)]) == 1_000_448
    assert common_budget([(1_001_472, 2048), (999_424, 1024)]) == 1_001_472


def test_step_grid_holds_every_knot_within_range():
    grid = step_grid([np.array([1000, 2000, 3000]), np.array([1500, 3500])], 1500, 3000)
    assert grid.tolist() == [1500, 2000, 3000]


def test_return_at_time_is_empty_when_runs_share_no_window_of_time():
    fast = Run(steps=np.array([256.0, 512.0, 768.0]), returns=np.array([-900.0, -800.0, -800.0]),
               time_s=np.array([0.2, 0.4, 2.5]))
    slow = Run(steps=np.array([256.0, 512.0]), returns=np.array([-700.0, -600.0]),
               time_s=np.array([1.0, 2.0]))
    # Up to 0.4 s only the fast run has reported: the slow one starts at 1.0 s.
    grid, bands = compare_at_time({"fast": [fast], "slow": [slow]}, seconds=0.4)
    assert grid.size == 0 and bands == {}
    grid, bands = compare_at_time({"fast": [fast], "slow": [slow]}, seconds=2.0)
    assert grid.tolist() == [1.0, 2.0] and bands["slow"].mean.tolist() == [-700.0, -600.0]


def test_improvement_is_positive_for_higher_negative_returns():
    assert improvement_pct(-500, -1000) == pytest.approx(50.0)
    assert np.isnan(improvement_pct(1.0, 0.0))


def test_difference_in_standard_errors_of_the_difference():
    # (130 - 100) / sqrt(30^2 + 40^2) = 30 / 50; lower is negative
    assert difference_in_se((130.0, 30.0), (100.0, 40.0)) == pytest.approx(0.6)
    assert difference_in_se((70.0, 30.0), (100.0, 40.0)) == pytest.approx(-0.6)
    # one seed has no standard error; equal constant curves have none to divide by
    assert np.isnan(difference_in_se((130.0, math.nan), (100.0, 40.0)))
    assert np.isnan(difference_in_se((100.0, 0.0), (100.0, 0.0)))


def test_band_standard_error():
    b = band(np.array([[1.0, 2.0], [3.0, 6.0]]))
    assert b.mean.tolist() == [2.0, 4.0]
    assert b.se == pytest.approx([1.0, 2.0])  # std (ddof 1) / sqrt(2)
    assert np.isnan(band(np.array([[1.0, 2.0]])).se).all()


# ----------------------------------------------------------------------------- a real Tune run


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium's Pendulum env checker
def test_report_reads_a_real_tune_run(local_ray, tmp_path: Path):
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    """A 2 lr x 2 seed sweep: two rows of two seeds, nothing else in Tune's records told apart."""
    batch = 256
    config = (PPOConfig().environment("Pendulum-v1").env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=batch, minibatch_size=64, num_epochs=1,
                        lr=tune.grid_search([1e-4, 1e-3]))
              .debugging(seed=tune.grid_search([0, 1])))
    tuner = tune.Tuner("PPO", param_space=config, run_config=tune.RunConfig(
        storage_path=str(tmp_path / "results"), name="pendulum",
        stop={"training_iteration": 2}, verbose=0))
    assert not tuner.fit().errors
    out = tmp_path / "out"
    assert run_cli(tmp_path / "results", "--out", out) == 0
    rows = read_rows(out)
    assert set(rows) == {("Pendulum-v1", "RLlib PPO lr=0.0001"), ("Pendulum-v1", "RLlib PPO lr=0.001")}
    for row in rows.values():
        assert (as_float(row, "seeds"), as_float(row, "budget")) == (2, 2 * batch)
        assert np.isfinite(as_float(row, "final")) and as_float(row, "env_steps_per_s") > 0
    assert "n/a" in (out / "table.md").read_text()  # no GePPO-code PPO baseline in this run
    assert_png(out / "returns.png")
    assert not (out / "tv.png").exists()  # RLlib's PPO logs no TV


def test_old_api_stack_tv_is_read(tmp_path):
    trial = write_trial(tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, GEPPO_STEPS,
                        linear(0.1, 0, GEPPO_STEPS), 500)
    lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    for line in lines:
        line |= _nest({report.OLD_STACK_PREFIX + "tv": 0.03, report.OLD_STACK_PREFIX + "tv_target": 0.05})
    (trial / "result.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    loaded = report.load_trial(trial)
    np.testing.assert_allclose(loaded.tv, 0.03)
    np.testing.assert_allclose(loaded.tv_target, 0.05)


# ----------------------------------------------------------------------------- the paper's Table 1
#
# Synthetic 1M-step runs on Hopper-v5, linear again: on the grid [200k, 1M] env steps,
#
#     GePPO seeds: R = 0.003 s and 0.003 s + 200   -> avg 1800, 2000 (1900 ± 100); final 3100 ± 100
#     PPO seeds:   R = 0.0025 s and 0.0025 s + 100 -> avg 1500, 1600 (1550 ±  50); final 2550 ±  50
#
# GePPO's mean curve 0.003 s + 100 reaches PPO's final 2550 at s = 816,667. The paper's Hopper:
# PPO 2,362 / 3,126, GePPO 2,544 / 3,450 (avg / final), GePPO +8% / +10%, 0.41M steps.

PAPER_GEPPO_STEPS = list(range(100_000, 1_000_001, 100_000))
PAPER_PPO_STEPS = list(range(200_000, 1_000_001, 200_000))


@pytest.fixture
def million_step_results(tmp_path: Path) -> Path:
    root = tmp_path / "results" / "table1"
    for seed, offset in ((0, 0), (1, 200)):
        write_trial(root, "GePPO", "Hopper-v5", seed, GEPPO, PAPER_GEPPO_STEPS,
                    linear(0.003, offset, PAPER_GEPPO_STEPS), 1000)
    for seed, offset in ((2, 0), (3, 100)):
        write_trial(root, "GePPO", "Hopper-v5", seed, PPO, PAPER_PPO_STEPS,
                    linear(0.0025, offset, PAPER_PPO_STEPS), 1000)
    # GePPO alone on Swimmer (no PPO row: avg 110 and final 200 over [100k, 1M]), and a task
    # the paper does not report.
    write_trial(root, "GePPO", "Swimmer-v5", 0, GEPPO, PAPER_GEPPO_STEPS,
                linear(0.0002, 0, PAPER_GEPPO_STEPS), 1000)
    write_trial(root, "GePPO", "Pendulum-v1", 0, GEPPO, PAPER_GEPPO_STEPS,
                linear(0.0001, -1000, PAPER_GEPPO_STEPS), 1000)
    return tmp_path / "results"


def read_paper_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "paper.csv").open() as handle:
        return {(r["env"], r["variant"]): r for r in csv.DictReader(handle)}


def test_paper_columns_beside_ours(million_step_results: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert run_cli(million_step_results, "--paper", "--budget", "1e6", "--out", out) == 0
    rows = read_paper_rows(out)
    assert set(rows) == {("Hopper-v5", "GePPO"), ("Hopper-v5", "PPO"), ("Swimmer-v5", "GePPO")}
    expected_geppo = {"seeds": 2, "budget": 1e6, "avg": 1900, "avg_se": 100, "paper_avg": 2544,
                      "avg_vs_paper_pct": 100 * (1900 - 2544) / 2544,
                      "avg_vs_ppo_pct": 100 * (1900 - 1550) / 1550, "paper_avg_vs_ppo_pct": 8,
                      "final": 3100, "paper_final": 3450,
                      "final_vs_paper_pct": 100 * (3100 - 3450) / 3450,
                      "final_vs_ppo_pct": 100 * (3100 - 2550) / 2550, "paper_final_vs_ppo_pct": 10,
                      "steps_to_ppo_final": 2450 / 0.003, "paper_steps_to_ppo_final": 410_000}
    expected_ppo = {"avg": 1550, "paper_avg": 2362, "avg_vs_paper_pct": 100 * (1550 - 2362) / 2362,
                    "final": 2550, "paper_final": 3126,
                    "final_vs_paper_pct": 100 * (2550 - 3126) / 3126,
                    "steps_to_ppo_final": 1e6, "paper_steps_to_ppo_final": 1e6}
    for key, value in expected_geppo.items():
        assert as_float(rows["Hopper-v5", "GePPO"], key) == pytest.approx(value), key
    for key, value in expected_ppo.items():
        assert as_float(rows["Hopper-v5", "PPO"], key) == pytest.approx(value), key
    ppo = rows["Hopper-v5", "PPO"]
    assert ppo["avg_vs_ppo_pct"] == ppo["paper_avg_vs_ppo_pct"] == ""

    table = (out / "table.md").read_text()
    assert ("| Hopper-v5 | 1 | GePPO | 2 | 1,900 ± 100 | 2,544 | -25.3% | +22.6% (+8%) "
            "| 3,100 ± 100 | 3,450 | -10.1% | +21.6% (+10%) | 0.82 (0.41) |") in table
    assert ("| Hopper-v5 | 1 | PPO | 2 | 1,550 ± 50 | 2,362 | -34.4% | — | 2,550 ± 50 | 3,126 "
            "| -18.4% | — | 1.00 (1.00) |") in table
    # Without a PPO run ours is n/a; the paper's figures stay.
    assert "| Swimmer-v5 | 1 | GePPO | 1 | 110 | 161 | -31.7% | n/a (+65%) |" in table
    assert "n/a (+44%) | n/a (0.23) |" in table
    # The paper's table comes first (pages include a report's first table); every row follows.
    first_table = [line for line in table.split("## All rows")[0].splitlines() if line.startswith("|")]
    assert "paper avg" in first_table[0] and not any("Pendulum" in line for line in first_table)
    assert "| Pendulum-v1 | 1 | GePPO |" in table.split("## All rows")[1]
    assert "MuJoCo v3" in table and "5 seeds" in table


def test_paper_finals_are_marked_on_the_returns_panels(million_step_results: Path):
    built = report.build_report(report.load_trials([million_step_results]), 1e6, paper=True)
    panels = {p.env: p for p in built.returns_panels}
    assert panels["Hopper-v5"].paper_finals == {"GePPO": 3450, "PPO": 3126}
    assert panels["Pendulum-v1"].paper_finals == {}
    fig = returns_figure([panels["Hopper-v5"]])
    stars = [l for l in fig.axes[0].get_lines() if l.get_marker() == "*"]
    assert sorted((l.get_xdata()[0], l.get_ydata()[0]) for l in stars) == [(1e6, 3126), (1e6, 3450)]
    assert report.build_report(report.load_trials([million_step_results]), 1e6).paper_rows == []


def test_paper_at_another_budget_warns_and_marks_nothing(results: Path, tmp_path: Path, caplog):
    with caplog.at_level(logging.WARNING):
        built = report.build_report(report.load_trials([results]), paper=True)
    assert [p.variant for p in built.paper_rows] == ["GePPO", "PPO"]
    assert "Hopper-v5 is read at 10,000 env steps, the paper at 1,000,000" in caplog.text
    assert built.returns_panels[0].paper_finals == {}


def test_paper_needs_the_ppo_baseline(million_step_results: Path, tmp_path: Path, caplog):
    assert run_cli(million_step_results, "--paper", "--baseline", "GePPO",
                   "--out", tmp_path / "out") == 2
    assert "--paper compares with the paper's PPO" in caplog.text


@pytest.mark.parametrize(("env", "task"), [
    ("Hopper-v5", "Hopper"), ("Humanoid-v3", "Humanoid"), ("HalfCheetah-v4", "HalfCheetah"),
    ("HumanoidStandup-v5", None), ("Pendulum-v1", None), ("Hopper", None),
])
def test_paper_task_names(env: str, task: str | None):
    assert report_paper.paper_task(env) == task


@pytest.mark.parametrize(("variant", "paper_avg"), [
    ("GePPO", 762), ("GePPO overlapped", 762), ("PPO", 545), ("PPO-Adapt", None), ("SB3 PPO", None),
])
def test_paper_variants(variant: str, paper_avg: float | None):
    nan = float("nan")
    row = Row(env="Ant-v5", variant=variant, seeds=5, excluded=0, budget=1e6, avg=700, avg_se=nan,
              final=1500, final_se=nan, avg_vs_baseline_pct=nan, final_vs_baseline_pct=nan,
              avg_vs_baseline_se=nan, final_vs_baseline_se=nan,
              steps_to_baseline_final=nan, env_steps_per_s=1000, time_to_baseline_final_s=nan,
              return_at_time=nan, return_at_time_se=nan, time_budget_s=1000)
    paper = report_paper.paper_row(row)
    assert (paper.paper_avg if paper else None) == paper_avg


def test_table1_study_covers_the_papers_tasks():
    """tuned_examples/table1.yaml runs GePPO and the paper's PPO on each task of the paper's
    table, 5 seeds x 1M steps, with the paper's per-task settings, and checkpoints to resume."""
    specs = load_experiments(TUNED_EXAMPLES / "table1.yaml")
    trials = {(t["env"], t.get("sample_reuse", True), t["seed"]): t
              for s in specs for t in resolve_trials(s)}
    assert len(trials) == 60
    tasks = {report_paper.paper_task(env) for env, _, _ in trials}
    assert tasks == set(report_paper.PAPER_TABLE1)
    assert {seed for _, _, seed in trials} == {0, 1, 2, 3, 4}
    for (env, reuse, _), trial in trials.items():
        assert trial.get("adaptive_lr", True) == reuse  # the paper's PPO keeps its lr fixed
        lr, std = {"Ant": (1e-4, 0.5), "Humanoid": (3e-5, 0.5)}.get(report_paper.paper_task(env),
                                                                   (None, None))
        assert (trial.get("lr"), trial.get("init_std_multiple")) == (lr, std)
    for spec in specs:
        assert spec.run == "GePPO"
        assert spec.stop == {"num_env_steps_sampled_lifetime": report_paper.PAPER_BUDGET}
        assert spec.checkpoint_config["checkpoint_at_end"]
        assert spec.checkpoint_config["checkpoint_frequency"] > 0
