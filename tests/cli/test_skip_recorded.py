"""`rllib train file --skip-recorded DIR`: a new run of the trials that no finished trial under DIR
ran, each experiment's grid cut to them. Dry runs, in-process: no Ray starts."""

import functools
import json
from pathlib import Path

import pytest
import ray
import yaml

from rllib_geppo.cli.main import main
from rllib_geppo.records.result_keys import STEPS_KEY
from rllib_geppo.records.trial_record import experiment_of, write_record

pytestmark = pytest.mark.usefixtures("no_ray")

STUDY = """
sweep:
  run: GePPO
  stop: {num_env_steps_sampled_lifetime: 1000}
  config:
    env: {grid_search: [Pendulum-v1, MountainCarContinuous-v0]}
    seed: {grid_search: [0, 1, 2]}
    lr: 3.0e-4
single:
  run: GePPO
  env: Pendulum-v1
  stop: {num_env_steps_sampled_lifetime: 1000}
  config: {seed: 0}
nets:
  run: GePPO
  env: Pendulum-v1
  stop: {num_env_steps_sampled_lifetime: 1000}
  config:
    seed: {grid_search: [0, 1]}
    model_config: {fcnet_hiddens: [{grid_search: [32, 64]}, 64]}
timed:
  run: GePPO
  env: Pendulum-v1
  stop: {time_total_s: 100}
  num_samples: 2
  config: {seed: 0}
"""


def record(
    root: Path, experiment: str, index: int, params: dict, steps: int = 1000, done: bool = True
) -> Path:
    """A finished trial as ``rllib train file`` names it, with Tune's params.json."""
    grid = ",".join(f"{k}={v}" for k, v in params.items() if k in ("env", "seed"))
    trial = root / f"{experiment}_abcde_{index:05d}_{index}_{grid}_2026-01-01_00-00-00"
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps(params))
    rows = [{STEPS_KEY: s, "training_iteration": i} for i, s in enumerate(range(200, steps + 1, 200), 1)]
    rows[-1]["done"] = done
    (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trial


def dry_run(capsys, study: Path, *argv: str) -> dict:
    assert main(["train", "file", str(study), *argv, "--dry-run"]) == 0, capsys.readouterr().err
    assert not ray.is_initialized()
    return yaml.safe_load(capsys.readouterr().out) or {}


@pytest.fixture
def study(tmp_path: Path) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    return path


def test_trial_names_give_their_experiment():
    """The names this CLI's trial-name creator gives, and their folders', parse back; trial IDs
    as Tune's variant generator makes them (a 5-digit hex prefix and a counter)."""
    from ray.tune.experiment import Trial

    from rllib_geppo.cli.tune_run import _trial_name

    name = functools.partial(_trial_name, "ant_ppo-wide")
    trial = Trial("__fake", stub=True, trial_id="5a060_00003", trial_name_creator=name)
    assert experiment_of(str(trial)) == "ant_ppo-wide"
    assert experiment_of(f"{trial}_3_seed=2_2026-12-02_05-43-51") == "ant_ppo-wide"
    assert experiment_of("PPO_Hopper-v5") is None  # not a name of this CLI


def test_recorded_seeds_are_left_out_and_the_rest_keep_their_grid(tmp_path, study, capsys):
    records = tmp_path / "records"
    for i, env in enumerate(("Pendulum-v1", "MountainCarContinuous-v0")):
        record(records, "sweep", i, {"env": env, "seed": 0, "lr": 3e-4})
    record(records, "single", 6, {"env": "Pendulum-v1", "seed": 0})
    trials = dry_run(capsys, study, "-e", "sweep", "-e", "single", "--skip-recorded", str(records))
    assert list(trials) == ["sweep"]  # single has no trial left
    left = sorted((t["env"], t["seed"]) for t in trials["sweep"]["trials"])
    assert left == sorted((e, s) for e in ("Pendulum-v1", "MountainCarContinuous-v0") for s in (1, 2))


def test_the_resume_command_of_the_new_run_names_only_the_experiments_it_holds(tmp_path, study, capsys):
    # --resume refuses an -e that selects no experiment of the run, and a --num-samples that the
    # cut grids do not hold: a pattern whose trials are all recorded is left out of the command
    # that resumes the run, and so are --num-samples and --skip-recorded.
    records = tmp_path / "records"
    record(records, "single", 6, {"env": "Pendulum-v1", "seed": 0})
    argv = ["train", "file", str(study), "-e", "s*", "-e", "single", "--num-samples", "1"]
    argv += ["--skip-recorded", str(records)]
    assert main([*argv, "--name", "rest", "--dry-run"]) == 0, capsys.readouterr().err
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("# After a stop, resume the run with: ")
    assert last.endswith(f"train file {study} --storage-path results --name rest -e 's*' --resume")


def test_grids_inside_lists_are_cut_too(tmp_path, study, capsys):
    records = tmp_path / "records"
    for i, width in enumerate((32, 64)):
        params = {"env": "Pendulum-v1", "seed": 0, "_model_config": {"fcnet_hiddens": [width, 64]}}
        record(records, "nets", i, params)
    trials = dry_run(capsys, study, "-e", "nets", "--skip-recorded", str(records))["nets"]["trials"]
    left = sorted((t["seed"], t["model_config"]["fcnet_hiddens"][0]) for t in trials)
    assert left == [(1, 32), (1, 64)]


def test_a_record_without_the_stop_criteria_counts_when_tune_marked_it_done(tmp_path, study, capsys, caplog):
    """Records keep the usual stop keys; for another (time_total_s here), Tune's done decides."""
    records = tmp_path / "records"
    record(records, "timed", 0, {"env": "Pendulum-v1", "seed": 0})
    record(records, "timed", 1, {"env": "Pendulum-v1", "seed": 0}, done=False)
    trials = dry_run(capsys, study, "-e", "timed", "--skip-recorded", str(records))
    assert trials["timed"]["num_trials"] == 1
    assert "its last row holds none of the stop criteria time_total_s" in caplog.text


def test_a_folder_without_trials_skips_nothing_with_a_warning(tmp_path, study, capsys, caplog):
    (tmp_path / "empty").mkdir()
    trials = dry_run(capsys, study, "-e", "single", "--skip-recorded", str(tmp_path / "empty"))
    assert trials["single"]["num_trials"] == 1
    assert "no trial records or trial folders of rllib train file there; it skips nothing" in caplog.text


def test_a_trial_and_its_record_count_as_one_trial(tmp_path, study, capsys):
    """With num_samples 2, one finished trial given twice (its folder and its record) leaves one."""
    trial = record(tmp_path / "runs", "single", 0, {"env": "Pendulum-v1", "seed": 0})
    write_record(trial, tmp_path / "records", {"trainable_name": "GePPO", "status": "TERMINATED"})
    argv = ["-e", "single", "--num-samples", "2", "--skip-recorded", str(tmp_path / "runs")]
    trials = dry_run(capsys, study, *argv, "--skip-recorded", str(tmp_path / "records"))
    assert trials["single"]["num_trials"] == 1


def test_only_a_finished_trial_of_the_same_experiment_and_config_counts(tmp_path, study, capsys):
    records = tmp_path / "records"
    record(records, "single", 0, {"env": "Pendulum-v1", "seed": 0}, steps=800)  # stopped early
    record(records, "single-wide", 1, {"env": "Pendulum-v1", "seed": 0})  # another experiment
    record(records, "single", 2, {"env": "Pendulum-v1", "seed": 0, "lr": 1e-3})  # other settings
    trials = dry_run(capsys, study, "-e", "single", "--skip-recorded", str(records))
    assert trials["single"]["num_trials"] == 1


def test_every_trial_recorded_runs_nothing(tmp_path, study, capsys):
    records = tmp_path / "records"
    record(records, "single", 0, {"env": "Pendulum-v1", "seed": 0})
    argv = ["train", "file", str(study), "-e", "single", "--skip-recorded", str(records)]
    assert main([*argv, "--storage-path", str(tmp_path / "results")]) == 0
    assert not (tmp_path / "results").exists() and not ray.is_initialized()


def test_trials_left_that_are_no_grid_exit_2_naming_them(tmp_path, study, capsys):
    records = tmp_path / "records"
    record(records, "sweep", 0, {"env": "Pendulum-v1", "seed": 0, "lr": 3e-4})
    argv = ["train", "file", str(study), "--skip-recorded", str(records), "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "experiment 'sweep': the trials left after --skip-recorded" in err
    assert 'env="Pendulum-v1", seed=1 x1' in err and "Run each group as its own run, e.g. -e sweep" in err


def test_skip_recorded_with_resume_or_a_missing_folder_exits_2(tmp_path, study, capsys):
    argv = ["train", "file", str(study), "--skip-recorded", str(tmp_path / "nope")]
    assert main([*argv, "--resume"]) == 2
    assert "--resume continues a run as it was saved. Pass one of them." in capsys.readouterr().err
    assert main([*argv, "--dry-run"]) == 2
    assert f"--skip-recorded {tmp_path / 'nope'}: no such folder" in capsys.readouterr().err
