"""Trial records (:mod:`rllib_geppo.records.trial_record`): a trial's rows cut to what the report
reads, read back as the trial folder they came from, and ``report --keep-trials``."""

from __future__ import annotations

import json
from pathlib import Path

from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TV_KEY, lookup
from rllib_geppo.records.trial_record import RECORD_FILE, read_rows, write_record

from report_helpers import (
    GEPPO,
    GEPPO_STEPS,
    linear,
    run_cli,
    write_results,
    write_trial,
)
from report_helpers import (
    read_rows as read_table,
)

CONFIG = {"lr": 3e-4, "gamma": 0.995, "model_config": {"fcnet_hiddens": [64, 64]}, "padding": "x" * 5000}


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


def test_a_record_keeps_the_reports_keys_and_the_config_once(tmp_path: Path):
    trial = with_tune_keys(
        write_trial(
            tmp_path / "run",
            "GePPO",
            "Hopper-v5",
            0,
            GEPPO,
            GEPPO_STEPS,
            linear(0.2, 0, GEPPO_STEPS),
            500,
            tv=0.04,
        )
    )
    record = write_record(trial, tmp_path / "kept")
    assert sorted(p.name for p in record.iterdir()) == ["params.json", RECORD_FILE]
    assert (record / "params.json").read_bytes() == (trial / "params.json").read_bytes()
    rows, kept = read_rows(trial), read_rows(record)
    assert [r.get("config") for r in kept] == [CONFIG] + [None] * (len(rows) - 1)
    for key in (STEPS_KEY, RETURN_KEY, TV_KEY, "learners/default_policy/sample_lag", "time_total_s"):
        assert [lookup(r, key) for r in kept] == [lookup(r, key) for r in rows]
    assert "perf" not in kept[1] and "total_loss" not in kept[1]["learners"]["default_policy"]
    size = (record / RECORD_FILE).stat().st_size
    assert size * 20 < (trial / "result.json").stat().st_size
    first = (record / RECORD_FILE).read_bytes()
    write_record(trial, tmp_path / "kept")  # rewritten: the same bytes, so git sees no change
    assert (record / RECORD_FILE).read_bytes() == first
    assert not list((tmp_path / "kept").glob(".*"))  # no staging folder left


def test_keep_trials_records_what_the_table_averages_and_a_trial_counts_once(tmp_path: Path):
    results = write_results(tmp_path)
    write_trial(
        results / "exp", "GePPO", "Hopper-v5", 9, GEPPO, GEPPO_STEPS[:5], linear(0.2, 0, GEPPO_STEPS[:5]), 500
    )
    kept, out = tmp_path / "kept", tmp_path / "out"
    assert run_cli(results, "--out", out, "--budget", "10000", "--keep-trials", kept) == 0
    assert len(list(kept.iterdir())) == 4  # seed 9 stopped at 5000 env steps: flagged, not kept
    # Records and the folders they came from: each trial counts once, records first.
    assert run_cli(kept, results, "--out", tmp_path / "both", "--budget", "10000") == 0
    assert read_table(tmp_path / "both") == read_table(out)
