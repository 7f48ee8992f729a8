"""Reports' tables joined (:func:`rllib_geppo.report.build.joined_rows`): rows read back from
``table.csv``, relabelled by ``--pool``, and their mean gains across environments."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd
import pytest

from rllib_geppo.report.build import ROW_COLUMNS
from rllib_geppo.report.main import write_csv

from helpers import REPO
from report_helpers import run_cli, write_results

STUDY = REPO / "docs" / "results" / "wide_networks"
NETWORKS = {"": "[64,64]", "-wide": "[400,300]"}
VARIANTS = {"geppo": "GePPO overlapped", "ppo": "PPO", "ppo-adapt": "PPO-Adapt"}


def row(env: str, variant: str, avg: float, avg_se: float, budget: float = 1e6) -> dict:
    """A row of table.csv: 3 seeds, final as avg, the other columns empty."""
    given = dict(env=env, variant=variant, seeds=3, excluded=0, budget=budget, avg=avg, avg_se=avg_se)
    return {column: math.nan for column in ROW_COLUMNS} | given | {"final": avg, "final_se": avg_se}


def table(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(ROW_COLUMNS))


def gains(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "mean_gains.csv").open() as handle:
        return {(g["variant"], g["versus"]): g for g in csv.DictReader(handle)}


def test_two_tables_give_the_mean_gains_of_their_trials_together(tmp_path: Path):
    """Figure 2's and the appendix's tables (Walker2d; Hopper, HalfCheetah), each labelled by its
    own experiments, joined by network: the mean gains that the report of all their trials
    gave (three_tasks/mean_gains.csv, labelled by variant and network)."""
    pools = [
        f"{VARIANTS[v]} {net}=walker2d-{v}{wide},appendix-{v}{wide}"
        for v in VARIANTS
        for wide, net in NETWORKS.items()
    ]
    argv = [STUDY / "table.csv", STUDY / "appendix" / "table.csv", "--out", tmp_path]
    assert run_cli(*argv, *(item for pool in pools for item in ("--pool", pool))) == 0
    joined = gains(tmp_path)
    expected = {(_net(a), _net(b)): g for (a, b), g in gains(STUDY / "three_tasks").items()}
    assert joined.keys() == expected.keys() and len(joined) == 30
    for pair, gain in expected.items():
        assert float(joined[pair]["mean_pct"]) == pytest.approx(float(gain["mean_pct"]), rel=1e-12)
        assert [joined[pair][k] for k in ("envs", "above", "below")] == [
            gain[k] for k in ("envs", "above", "below")
        ]


def _net(label: str) -> str:
    """A label of the all-trials report (``--group-by model_config/fcnet_hiddens``) as pooled here."""
    return label.replace("model_config/fcnet_hiddens=", "")


def test_a_mean_gain_is_the_mean_of_each_environments_percentage(tmp_path: Path):
    # Hopper: +100%, 7.1 s.e. of the difference above; Walker2d: -10%, 0.71 below (no winner).
    rows = [row("Hopper-v5", "a", 200, 10), row("Hopper-v5", "b", 100, 10)]
    rows += [row("Walker2d-v5", "a2", 90, 10), row("Walker2d-v5", "b", 100, 10)]
    write_csv(table(*rows), tmp_path / "table.csv")
    assert run_cli(tmp_path / "table.csv", "--pool", "A=a,a2", "--out", tmp_path / "out") == 0
    a_vs_b = gains(tmp_path / "out")["A", "b"]
    assert (float(a_vs_b["mean_pct"]), a_vs_b["above"], a_vs_b["below"]) == (pytest.approx(45.0), "1", "0")
    assert "| Hopper-v5 | 1 | A | 3 | 200 ± 10 | 200 ± 10 |" in (tmp_path / "out" / "table.md").read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--pool", "A=a,b"], "two rows of 'A' in Hopper-v5: 'a' in "),
        (["--pool", "A=c"], "--pool A: no row is labelled 'c' (labels: a, b)"),
        (["table.csv"], "two rows of 'a' in Hopper-v5"),  # the same table twice
        (["other.csv"], "Hopper-v5: rows at 1,000,000 env steps"),
        (["--budget", "1e6", "--baseline", "a"], "--budget, --baseline read result folders"),
        (["results"], "pass reports' table.csv files or result folders, not both"),
    ],
)
def test_tables_that_cannot_be_joined_exit_2_naming_why(tmp_path: Path, caplog, extra, message):
    write_csv(table(row("Hopper-v5", "a", 200, 10), row("Hopper-v5", "b", 100, 10)), tmp_path / "table.csv")
    write_csv(table(row("Hopper-v5", "c", 1, 1, budget=5e5)), tmp_path / "other.csv")
    write_results(tmp_path)
    extra = [tmp_path / e if e in ("results", "table.csv", "other.csv") else e for e in extra]
    assert run_cli(tmp_path / "table.csv", *extra, "--out", tmp_path / "out") == 2
    assert message in caplog.text


def test_tables_are_never_overwritten_by_their_join(tmp_path: Path, caplog):
    write_csv(table(row("Hopper-v5", "a", 200, 10), row("Walker2d-v5", "a", 100, 10)), tmp_path / "table.csv")
    assert run_cli(tmp_path / "table.csv", "--out", tmp_path) == 2
    assert f"--out {tmp_path} would overwrite {tmp_path / 'table.csv'}; pass another --out" in caplog.text


def test_a_file_that_is_no_report_table_exits_2(tmp_path: Path, caplog):
    (tmp_path / "other.csv").write_text("env,variant\nHopper-v5,a\n")
    assert run_cli(tmp_path / "other.csv", "--out", tmp_path / "out") == 2
    assert "not a report's table.csv (no column seeds, excluded, budget, avg" in caplog.text
    assert list(ROW_COLUMNS)[0] == "env"
