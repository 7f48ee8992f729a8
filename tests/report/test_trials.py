"""Reading Tune trial folders (:mod:`rllib_geppo.report.trials`): variant names, the settings in
params.json and in the config logged with the results, crashes, torn and restored result files,
evaluation returns, and folders that hold nothing to report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rllib_geppo.records import trial_record
from rllib_geppo.records.result_keys import EVALUATION_PREFIX, OLD_STACK_PREFIX, RETURN_KEY, STEPS_KEY, lookup
from rllib_geppo.report.grouping import load_trials
from rllib_geppo.report.trials import load_trial, variant_name

from report_helpers import (
    GEPPO,
    GEPPO_STEPS,
    PPO,
    PPO_STEPS,
    as_float,
    linear,
    nest,
    read_rows,
    run_cli,
    sweep,
    write_results,
    write_trial,
)

# ----------------------------------------------------------------------------- variants


@pytest.mark.parametrize(
    ("algorithm", "params", "variant"),
    [
        ("GePPO", {"sample_reuse": True, "adaptive_lr": True}, "GePPO"),
        ("GePPO", {"sample_reuse": True, "adaptive_lr": False}, "GePPO"),
        ("GePPO", {"sample_reuse": False, "adaptive_lr": False}, "PPO"),
        ("GePPO", {"sample_reuse": False, "adaptive_lr": True}, "PPO-Adapt"),
        ("PPO", {}, "RLlib PPO"),
        ("SB3PPO", {}, "SB3 PPO"),
        ("APPO", {}, "APPO"),
    ],
)
def test_variant_names(algorithm: str, params: dict, variant: str):
    assert variant_name(algorithm, params) == variant


def test_a_trial_whose_updates_lagged_is_overlapped_geppo(tmp_path: Path):
    """Whether sampling overlapped is read from the run (``sample_lag``), not from params, where
    ``overlap_sampling="auto"`` would not say."""
    for seed, lag, module in ((0, 0, "default_policy"), (1, 1, "default_policy"), (2, 1, "p1")):
        trial = write_trial(
            tmp_path, "GePPO", "Hopper-v5", seed, GEPPO, GEPPO_STEPS, linear(0.1, 0, GEPPO_STEPS), 500
        )
        lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        for i, line in enumerate(lines):  # the first update of an overlapped run is synchronous
            line.setdefault("learners", {})[module] = {"sample_lag": lag if i else 0}
        (trial / "result.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    # Seed 2: a multi-agent run, whose modules each report their own lag.
    assert {t.seed: t.variant for t in load_trials([tmp_path])} == {
        0: "GePPO",
        1: "GePPO overlapped",
        2: "GePPO overlapped",
    }


def test_copied_folders_of_a_run_file_are_labelled_by_the_config_in_their_results(tmp_path: Path):
    """`rllib train file` names trial folders after their experiments ("geppo-hopper_..."), and
    copied folders have no Tune record: the variant comes from the config in result.json."""
    root = tmp_path / "copied"
    for name, config in (("geppo-hopper", GEPPO), ("ppo-hopper", PPO)):
        trial = write_trial(root, name, "Hopper-v5", 0, {}, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 500)
        lines = [
            json.loads(line) | {"config": {"lr": 3e-4, **config}}
            for line in (trial / "result.json").read_text().splitlines()
        ]
        (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")
    assert sorted(load_trial(t).variant for t in root.iterdir()) == ["GePPO", "PPO"]


# ----------------------------------------------------------------------------- settings


def _log_config(trial: Path, config: dict) -> None:
    """Put ``config`` into every result line, as Tune logs the trial's whole config."""
    lines = [
        json.loads(line) | {"config": config} for line in (trial / "result.json").read_text().splitlines()
    ]
    (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")


def test_a_default_against_a_command_line_override_is_two_rows(tmp_path: Path):
    """The quickstart run twice, once with ``-c lr=1e-3``: params.json holds only what the run
    file set, the config logged with the results the rest; both seed 0."""
    for name, params in (("default", {}), ("override", {"lr": 1e-3})):
        trial = write_trial(
            tmp_path / name, "GePPO", "Pendulum-v1", 0, params, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 500
        )
        _log_config(
            trial,
            {
                **GEPPO,
                "lr": 3e-4,
                "seed": 0,
                "model_config": {},
                "policy_mapping_fn": f"<function f at 0x7f{len(name)}>",
            },
        )
    assert sorted(t.variant for t in load_trials([tmp_path])) == ["GePPO lr=0.0003", "GePPO lr=0.001"]


def test_geppo_trials_are_labelled_by_the_network_they_built(tmp_path: Path):
    """GePPO's config spells its default network out, a wide-network run file sets only what it
    changes: the labels name the one difference, the policy's layers."""
    sweep(
        tmp_path,
        {
            "default": {"model_config": {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}},
            "wide": {"model_config": {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]}},
            "unset": {"model_config": {}},
        },
        seeds=(0,),
    )
    logged = write_trial(
        tmp_path / "logged", "GePPO", "Hopper-v5", 1, GEPPO, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 500
    )  # the network in the logged config only
    _log_config(
        logged, {**GEPPO, "_model_config": {"fcnet_hiddens": [400, 300], "vf_fcnet_hiddens": [64, 64]}}
    )
    assert sorted(t.variant for t in load_trials([tmp_path])) == [
        "GePPO model_config/fcnet_hiddens=[400,300]",
        "GePPO model_config/fcnet_hiddens=[400,300]",
        "GePPO model_config/fcnet_hiddens=[64,64]",
        "GePPO model_config/fcnet_hiddens=[64,64]",
    ]


# ----------------------------------------------------------------------------- result files


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table of
    :func:`report_helpers.write_results`."""
    return write_results(tmp_path)


def test_tune_error_status_marks_a_trial_crashed(results: Path, tmp_path: Path):
    exp = results / "exp"
    failed = write_trial(exp, "GePPO", "Hopper-v5", 6, GEPPO, GEPPO_STEPS, linear(5, 0, GEPPO_STEPS), 500)
    record = {"relative_logdir": failed.name, "trainable_name": "GePPO", "status": "ERROR"}
    state = {"trial_data": [[json.dumps(record), "{}"]]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    assert run_cli(results, "--out", tmp_path / "out") == 0
    assert "seed 6: crashed (Tune status ERROR)" in (tmp_path / "out" / "table.md").read_text()


def test_torn_last_line_and_restored_iterations(tmp_path: Path):
    trial = write_trial(tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, [1000, 2000, 3000], [1, 2, 3], 500)
    rerun = [
        json.dumps(nest({STEPS_KEY: s, RETURN_KEY: r})) for s, r in ((2000, 20), (3000, 30), (4000, 40))
    ]  # restored from the 1000-step checkpoint
    with (trial / "result.json").open("a") as handle:
        handle.write("\n".join(rerun) + '\n{"num_env_steps_sampled_lif')
    results = trial_record.read_rows(trial)
    assert [lookup(r, RETURN_KEY) for r in results] == [1, 20, 30, 40]


def test_evaluation_returns_carried_into_the_next_iteration_are_not_new_points(tmp_path: Path):
    key = EVALUATION_PREFIX + RETURN_KEY
    trial = write_trial(
        tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, [1000, 2000, 3000, 4000, 5000], [1, 2, 3, 3, 5], 500
    )
    lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    # RLlib's pattern with evaluation_interval=2: a result, its copy one iteration later, NaN.
    for line, value in zip(lines, [math.nan, 7.0, 7.0, math.nan, 9.0]):
        line["evaluation"] = nest({RETURN_KEY: value})
    (trial / "result.json").write_text("\n".join(map(json.dumps, lines)) + "\n")

    evaluation = load_trial(trial, return_key=key).curves["return"]
    training = load_trial(trial).curves["return"]
    np.testing.assert_array_equal(evaluation, [math.nan, 7, math.nan, math.nan, 9])
    np.testing.assert_array_equal(training, [1, 2, 3, 3, 5])  # training returns are read as is

    out = tmp_path / "out"
    assert run_cli(tmp_path, "--return-key", key, "--out", out) == 0
    assert "return of the evaluation episodes" in (out / "table.md").read_text()
    row = read_rows(out)[("Hopper-v5", "GePPO")]
    assert as_float(row, "avg") == pytest.approx(8.0)  # the line from (2000, 7) to (5000, 9)


def test_old_api_stack_tv_is_read(tmp_path):
    trial = write_trial(
        tmp_path, "GePPO", "Hopper-v5", 0, GEPPO, GEPPO_STEPS, linear(0.1, 0, GEPPO_STEPS), 500
    )
    lines = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    for line in lines:
        line |= nest({OLD_STACK_PREFIX + "tv": 0.03, OLD_STACK_PREFIX + "tv_target": 0.05})
    (trial / "result.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    loaded = load_trial(trial)
    np.testing.assert_allclose(loaded.curves["tv"], 0.03)
    np.testing.assert_allclose(loaded.curves["tv_target"], 0.05)


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
