"""The report's files in ``--out``: ``table.md``, the CSVs of raw numbers, and the PNG figures."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from rllib_geppo.records.result_keys import TV_KEY
from rllib_geppo.report.build import Report
from rllib_geppo.report.markdown import render_markdown
from rllib_geppo.report.plots import figures

logger = logging.getLogger(__name__)


def write_csv(table: pd.DataFrame, path: Path) -> None:
    """``table`` as CSV: raw numbers, empty cells for NaN, lines ended as RFC 4180 ends them."""
    table.to_csv(path, index=False, lineterminator="\r\n")


def write_report(report: Report, out: Path) -> list[Path]:
    """Write the tables and figures into ``out`` (CSVs: raw numbers, empty cells for NaN); returns
    the files written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(render_markdown(report))
    tables = {
        "table.csv": report.rows,
        "paper.csv": report.paper,
        "trials.csv": report.trials,
        "stability.csv": report.stability,
        "mean_gains.csv": report.mean_gains,
    }
    written = [out / "table.md"]
    for name, table in tables.items():
        if name in ("table.csv", "trials.csv", "stability.csv") or not table.empty:
            write_csv(table, out / name)
            written.append(out / name)
    drawn = figures(report)
    for name, figure in drawn.items():
        figure.savefig(out / name, dpi=120)
        written.append(out / name)
    if "returns_vs_time.png" not in drawn:
        logger.info("no environment's runs share a window of training time: returns_vs_time.png not written")
    if "tv.png" not in drawn:
        logger.info("no trial logged %s: tv.png not written", TV_KEY)
    return written
