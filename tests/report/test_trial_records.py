"""Trial records (:mod:`rllib_geppo.records.trial_record`): a trial's rows cut to what the report
reads, read back as the trial folder they came from, and ``report --keep-trials``."""

from __future__ import annotations

import json
from pathlib import Path

from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TV_KEY, lookup
from rllib_geppo.records.trial_record import RECORD_FILE, read_rows, write_record
from rllib_geppo.report.trials import load_trial

from report_helpers import GEPPO, GEPPO_STEPS, linear, run_cli, write_results, write_trial
from report_helpers import read_rows as read_table

CONFIG = {"lr": 3e-4, "gamma": 0.995, "model_config": {"fcnet_hiddens": [64, 64]}, "padding": "x" * 5000}
FINISHED = {"trainable_name": "GePPO", "status": "TERMINATED"}


def with_tune_keys(trial: Path) -> Path:
    """Give each row what Tune's rows hold besides the report's keys: the whole config, timers,
    other learner metrics, and the module's sample lag."""
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    for row in rows:
        row["config"] = CONFIG
        row["perf"] = {"cpu_util_percent": 50.0}
        row.setdefault("learners", {}).setdefault("default_policy", {}).update(total_loss=0.5, sample_lag=1)
    (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trial


def save_state(experiment: Path, statuses: dict[str, str], trainable: str = "GePPO") -> None:
    """Tune's saved state of the trials in ``experiment``: each folder's status."""
    records = [
        [json.dumps({"relative_logdir": name, "trainable_name": trainable, "status": status}), "{}"]
        for name, status in statuses.items()
    ]
    (experiment / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": records}))


def test_a_record_keeps_the_reports_keys_and_the_config_once(tmp_path: Path):
    returns = linear(0.2, 0, GEPPO_STEPS)
    trial = with_tune_keys(
        write_trial(tmp_path / "run", "GePPO", "Hopper-v5", 0, GEPPO, GEPPO_STEPS, returns, 500, 0.04)
    )
    record = write_record(trial, tmp_path / "kept", FINISHED)
    assert sorted(p.name for p in record.iterdir()) == ["params.json", "record.json", RECORD_FILE]
    assert (record / "params.json").read_bytes() == (trial / "params.json").read_bytes()
    assert json.loads((record / "record.json").read_text()) == FINISHED
    rows, kept = read_rows(trial), read_rows(record)
    assert [r.get("config") for r in kept] == [CONFIG] + [None] * (len(rows) - 1)
    for key in (STEPS_KEY, RETURN_KEY, TV_KEY, "learners/default_policy/sample_lag", "time_total_s"):
        assert [lookup(r, key) for r in kept] == [lookup(r, key) for r in rows]
    assert "perf" not in kept[1] and "total_loss" not in kept[1]["learners"]["default_policy"]
    assert (record / RECORD_FILE).stat().st_size * 20 < (trial / "result.json").stat().st_size
    first = (record / RECORD_FILE).read_bytes()
    write_record(trial, tmp_path / "kept", FINISHED)  # rewritten: the same bytes, so git sees no change
    assert (record / RECORD_FILE).read_bytes() == first
    assert not list((tmp_path / "kept").glob(".*"))  # no staging folder left
    (record / RECORD_FILE).write_bytes(first[: len(first) // 2])  # cut short: no rows, a warning
    assert read_rows(record) == []


def test_a_records_trial_is_labelled_as_its_folder_was(tmp_path: Path):
    """RLlib's PPO run by `rllib train file`: its folder is named after its experiment, so its
    variant comes from Tune's saved state, which the record keeps."""
    run = tmp_path / "run"
    written = write_trial(run, "PPO", "Hopper-v5", 0, {}, GEPPO_STEPS, GEPPO_STEPS, 500)
    trial = written.rename(run / "anchor_rllib-ppo_5a060_00000_0_seed=0_2026-01-01_00-00-00")
    save_state(run, {trial.name: "TERMINATED"}, trainable="PPO")
    assert load_trial(trial).variant == "RLlib PPO"
    assert run_cli(run, "--out", tmp_path / "out", "--keep-trials", tmp_path / "kept") == 0
    assert load_trial(tmp_path / "kept" / trial.name).variant == "RLlib PPO"
    assert load_trial(tmp_path / "kept" / trial.name, group_by="experiment").variant == "anchor_rllib-ppo"


def test_keep_trials_records_the_finished_trials_the_table_averages(tmp_path: Path):
    results = write_results(tmp_path)
    steps = GEPPO_STEPS[:5]
    early = write_trial(results / "exp", "GePPO", "Hopper-v5", 9, GEPPO, steps, linear(0.2, 0, steps), 500)
    statuses = {t.name: "TERMINATED" for t in (results / "exp").iterdir()}
    running = sorted(statuses)[0]
    save_state(results / "exp", statuses | {running: "RUNNING"})
    kept, out = tmp_path / "kept", tmp_path / "out"
    assert run_cli(results, "--out", out, "--budget", "10000", "--keep-trials", kept) == 0
    # Seed 9 stopped at 5000 env steps: flagged, not kept; the running trial is averaged, not kept.
    assert sorted(p.name for p in kept.iterdir()) == sorted(set(statuses) - {early.name, running})
    # Records and the folders they came from: each trial counts once, records first.
    assert run_cli(kept, results, "--out", tmp_path / "both", "--budget", "10000") == 0
    assert read_table(tmp_path / "both") == read_table(out)
