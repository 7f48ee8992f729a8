"""Which trials form each row (:mod:`rllib_geppo.report.grouping`): labels by the settings trials
differ in, --group-by and --pool, and the budget a trial must reach to count."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from rllib_geppo.report.grouping import load_trials
from rllib_geppo.report.main import EXIT_BAD_INPUT

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

# ----------------------------------------------------------------------------- labels by settings


def test_trials_that_differ_in_a_setting_besides_the_seed_are_never_pooled(tmp_path: Path):
    """A 2 lr x 2 seed sweep is two rows of two seeds, each labelled with its lr."""
    sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--out", out) == 0
    rows = read_rows(out)
    assert set(rows) == {("Hopper-v5", "GePPO lr=0.0003"), ("Hopper-v5", "GePPO lr=0.001")}
    assert [
        as_float(rows["Hopper-v5", f"GePPO lr={lr}"], "avg") for lr in ("0.0003", "0.001")
    ] == pytest.approx([650, 750])
    with (out / "trials.csv").open() as handle:
        seeds = sorted((r["variant"], r["seed"]) for r in csv.DictReader(handle))
    assert seeds == [
        ("GePPO lr=0.0003", "0"),
        ("GePPO lr=0.0003", "1"),
        ("GePPO lr=0.001", "0"),
        ("GePPO lr=0.001", "1"),
    ]


def test_settings_a_trial_does_not_record_are_no_difference(tmp_path: Path):
    """Results written before a setting existed lack it; a mapping's missing entry is its
    default, and nested settings are named by their path."""
    sweep(tmp_path, {"old": {}, "new": {"sample_lag": None}})
    assert {t.variant for t in load_trials([tmp_path])} == {"GePPO"}
    for name, model in (("wide", {"model": {"fcnet_hiddens": [400, 300]}}), ("plain", {"model": {}})):
        write_trial(
            tmp_path / "more" / name, "PPO", "Hopper-v5", 5, model, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 500
        )
    assert {t.variant for t in load_trials([tmp_path / "more"])} == {
        "RLlib PPO model/fcnet_hiddens=[400,300]",
        "RLlib PPO model/fcnet_hiddens=default",
    }


def test_a_setting_that_splits_a_variant_labels_it_in_every_environment(tmp_path: Path):
    """Hopper ran both networks, Walker2d the default alone (a study still running): Walker2d's
    trials are labelled with their network too, so the default-network rows of the two tasks
    pair up across environments. Walker2d's own lr differs between tasks only: no label."""
    sweep(
        tmp_path,
        {
            "default": {"model_config": {"fcnet_hiddens": [64, 64]}},
            "wide": {"model_config": {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]}},
        },
        seeds=(0,),
    )
    for seed in (0, 1):
        write_trial(
            tmp_path / "walker",
            "GePPO",
            "Walker2d-v5",
            seed,
            GEPPO | {"lr": 1e-4, "model_config": {"fcnet_hiddens": [64, 64]}},
            PPO_STEPS,
            linear(0.1, 100 * seed, PPO_STEPS),
            500,
        )
    assert sorted((t.env, t.variant) for t in load_trials([tmp_path])) == [
        ("Hopper-v5", "GePPO model_config/fcnet_hiddens=[400,300]"),
        ("Hopper-v5", "GePPO model_config/fcnet_hiddens=[64,64]"),
        ("Walker2d-v5", "GePPO model_config/fcnet_hiddens=[64,64]"),
        ("Walker2d-v5", "GePPO model_config/fcnet_hiddens=[64,64]"),
    ]


def test_group_by_named_settings_pools_the_others_with_a_warning(tmp_path: Path, caplog):
    sweep(
        tmp_path,
        {
            "a": {"lr": 3e-4, "num_epochs": 5},
            "b": {"lr": 3e-4, "num_epochs": 10},
            "c": {"lr": 1e-3, "num_epochs": 5},
        },
    )
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--group-by", "lr", "--out", out) == 0
    rows = read_rows(out)
    assert {variant: as_float(row, "seeds") for (_, variant), row in rows.items()} == {
        "GePPO lr=0.0003": 4,
        "GePPO lr=0.001": 2,
    }
    assert "Hopper-v5 / GePPO: --group-by lr pools trials that differ in num_epochs" in caplog.text
    # Pooling by hand instead: a label with a list in it is one member of the pool.
    sweep(
        tmp_path / "nets",
        {
            "a": {"model_config": {"fcnet_hiddens": [64, 64]}},
            "b": {"model_config": {"fcnet_hiddens": [32], "vf_fcnet_hiddens": [64, 64]}},
        },
    )
    assert (
        run_cli(
            tmp_path / "nets",
            "--out",
            out,
            "--pool",
            "nets=GePPO model_config/fcnet_hiddens=[64,64],GePPO model_config/fcnet_hiddens=[32]",
        )
        == 0
    )
    assert as_float(read_rows(out)["Hopper-v5", "nets"], "seeds") == 4


def test_grouping_by_a_setting_no_trial_has_is_a_clear_error(tmp_path: Path, caplog, capsys):
    sweep(tmp_path, {"slow": {"lr": 3e-4}, "fast": {"lr": 1e-3}})
    assert run_cli(tmp_path, "--group-by", "lr,nmu_epochs", "--out", tmp_path / "out") == 2
    assert (
        "--group-by lr,nmu_epochs: no trial records the setting 'nmu_epochs' (settings that "
        "differ between trials: lr; or use variant / experiment)"
    ) in caplog.text
    with pytest.raises(SystemExit):
        run_cli(tmp_path, "--group-by", "experiment,lr")
    assert "expected variant or experiment alone, or setting names" in capsys.readouterr().err


# ----------------------------------------------------------------------------- experiments and pools


def _experiment_trials(root: Path, offsets: dict[str, tuple[int, ...]]) -> None:
    """Trials labelled by experiment, R = 0.1 s + offset on PPO_STEPS (avg 600 + offset)."""
    for name, seeds in offsets.items():
        for seed, offset in enumerate(seeds):
            trial = write_trial(
                root, "x", "Hopper-v5", seed, PPO, PPO_STEPS, linear(0.1, offset, PPO_STEPS), 500
            )
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
    assert (
        run_cli(
            tmp_path,
            "--group-by",
            "experiment",
            "--pool",
            "split=split-a,split-b",
            "--baseline",
            "whole",
            "--out",
            out,
        )
        == 0
    )
    rows = read_rows(out)
    assert {variant for _, variant in rows} == {"whole", "split"}
    split = rows["Hopper-v5", "split"]
    # avgs 600, 700, 800, 900: mean 750, std (ddof 1) 129.1, s.e. 64.55; whole: 700 ± 100
    split_se = np.std([600, 700, 800, 900], ddof=1) / 2
    assert as_float(split, "seeds") == 4
    assert as_float(split, "avg") == pytest.approx(750)
    assert as_float(split, "avg_se") == pytest.approx(split_se)
    assert as_float(split, "avg_vs_baseline_se") == pytest.approx(50 / math.hypot(split_se, 100))


@pytest.mark.parametrize(
    "pool, message",
    [
        ("split=split-a,split-c", "no trial is labelled 'split-c'"),
        ("whole=split-a,split-b", "'whole' is already a variant of its own"),
    ],
)
def test_a_pool_that_cannot_be_made_is_a_clear_error(tmp_path: Path, caplog, pool: str, message: str):
    _experiment_trials(tmp_path, {"whole": (0, 200), "split-a": (0, 100), "split-b": (200, 300)})
    assert (
        run_cli(tmp_path, "--group-by", "experiment", "--pool", pool, "--out", tmp_path / "out")
        == EXIT_BAD_INPUT
    )
    assert message in caplog.text


def test_a_variant_in_two_pools_is_a_clear_error(tmp_path: Path, caplog):
    _experiment_trials(tmp_path, {"whole": (0,), "split-a": (0,), "split-b": (0,)})
    assert (
        run_cli(
            tmp_path,
            "--group-by",
            "experiment",
            "--pool",
            "p=split-a",
            "--pool",
            "q=split-a,split-b",
            "--out",
            tmp_path / "out",
        )
        == EXIT_BAD_INPUT
    )
    assert "'split-a' is in both 'p' and 'q'" in caplog.text


# ----------------------------------------------------------------------------- the budget


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def test_explicit_budget_reads_final_there_and_keeps_trials_that_reach_it(results: Path, tmp_path: Path):
    # Stopped at 6000 env steps on the seeds' mean line: counted at a 6000-step budget.
    write_trial(
        results / "exp",
        "GePPO",
        "Hopper-v5",
        4,
        GEPPO,
        GEPPO_STEPS[:6],
        linear(0.2, 100, GEPPO_STEPS[:6]),
        500,
    )
    out = tmp_path / "out"
    assert run_cli(results, "--out", out, "--budget", "6e3") == 0
    rows = read_rows(out)
    geppo, ppo = rows["Hopper-v5", "GePPO"], rows["Hopper-v5", "PPO"]
    assert as_float(geppo, "seeds") == 3
    assert as_float(geppo, "final") == pytest.approx(1300)  # 0.2 * 6000 + 100
    assert as_float(ppo, "final") == pytest.approx(650)  # 0.1 * 6000 + 50
    assert as_float(geppo, "budget") == 6000


def test_default_budget_waits_for_a_trial_whose_episodes_end_every_other_iteration(
    results: Path, tmp_path: Path
):
    """It stopped at 9,000 env steps, within one of PPO's 2,000-step iterations of the others'
    10,000, so it is complete; but that last report holds no return. The budget is its last
    return, 8,000, where every trial has one: the trial is counted, not flagged as stopped early."""
    steps = GEPPO_STEPS[:9]
    every_other = [r if s % 2000 == 0 else float("nan") for s, r in zip(steps, linear(0.2, 100, steps))]
    write_trial(results / "exp", "GePPO", "Hopper-v5", 4, GEPPO, steps, every_other, 500)
    out = tmp_path / "out"
    assert run_cli(results, "--out", out) == 0
    geppo = read_rows(out)["Hopper-v5", "GePPO"]
    assert (as_float(geppo, "seeds"), as_float(geppo, "excluded"), as_float(geppo, "budget")) == (3, 0, 8000)
    assert as_float(geppo, "final") == pytest.approx(1700)  # 0.2 * 8000 + (0, 200, 100) on average


def test_budget_beyond_every_trial_is_an_input_error(results: Path, tmp_path: Path, caplog):
    assert run_cli(results, "--out", tmp_path / "out", "--budget", "20000") == 2
    assert "no trial reaches the budget" in caplog.text


def test_early_stopped_and_crashed_trials_are_flagged_and_left_out(results: Path, tmp_path: Path, caplog):
    exp = results / "exp"
    write_trial(exp, "GePPO", "Hopper-v5", 4, GEPPO, GEPPO_STEPS[:6], linear(5, 0, GEPPO_STEPS[:6]), 500)
    crashed = write_trial(exp, "GePPO", "Hopper-v5", 5, GEPPO, GEPPO_STEPS, linear(5, 0, GEPPO_STEPS), 500)
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
    results: Path, tmp_path: Path
):
    """An env without a time limit ends no episode once its policy balances: the trial reaches
    the budget, its return curve does not."""
    unending = linear(0.2, 100, GEPPO_STEPS)
    unending[6:] = [float("nan")] * 4
    write_trial(results / "exp", "GePPO", "Hopper-v5", 7, GEPPO, GEPPO_STEPS, unending, 500)
    assert run_cli(results, "--out", tmp_path / "out", "--budget", "1e4") == 0
    assert (
        "seed 7: no return after 6,000 env steps (budget 10,000): the trial ran to 10,000 but "
        "finished no episode (give the env a time limit)"
    ) in (tmp_path / "out" / "table.md").read_text()
