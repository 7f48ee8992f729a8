"""The report's files in ``--out``: ``table.md``, the CSVs of raw numbers, and the PNG figures."""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from rllib_geppo.records.result_keys import TV_KEY
from rllib_geppo.report.build import Report, TrialRow
from rllib_geppo.report.markdown import render_markdown
from rllib_geppo.report.paper import PaperRow
from rllib_geppo.report.plots import returns_figure, returns_vs_time_figure, tv_figure
from rllib_geppo.report.stats import MeanGain, Row, Stability

logger = logging.getLogger(__name__)


def write_csv(
    rows: Sequence[Row | PaperRow | TrialRow | Stability | MeanGain], row_type: type, path: Path
) -> None:
    """One line per row of ``row_type`` (``table.csv``: Row, ``paper.csv``: PaperRow,
    ``trials.csv``: TrialRow, ``stability.csv``: Stability, ``mean_gains.csv``: MeanGain): raw
    numbers, empty cells for NaN."""
    fields = [f.name for f in dataclasses.fields(row_type)]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    k: "" if isinstance(v, float) and math.isnan(v) else v
                    for k, v in dataclasses.asdict(row).items()
                }
            )


def write_report(report: Report, out: Path) -> list[Path]:
    """Write the table and figures into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(render_markdown(report))
    write_csv(report.rows, Row, out / "table.csv")
    write_csv(report.trial_rows, TrialRow, out / "trials.csv")
    write_csv(report.stability, Stability, out / "stability.csv")
    written = [
        out / "table.md",
        out / "table.csv",
        out / "trials.csv",
        out / "stability.csv",
        out / "returns.png",
    ]
    if report.paper_rows:
        write_csv(report.paper_rows, PaperRow, out / "paper.csv")
        written.insert(2, out / "paper.csv")
    if report.mean_gains:
        write_csv(report.mean_gains, MeanGain, out / "mean_gains.csv")
        written.insert(-1, out / "mean_gains.csv")
    returns_figure(report.returns_panels).savefig(out / "returns.png", dpi=120)
    if report.time_panels:
        returns_vs_time_figure(report.time_panels).savefig(out / "returns_vs_time.png", dpi=120)
        written.append(out / "returns_vs_time.png")
    else:
        logger.info("no environment's runs share a window of training time: returns_vs_time.png not written")
    if report.tv_panels:
        tv_figure(report.tv_panels).savefig(out / "tv.png", dpi=120)
        written.append(out / "tv.png")
    else:
        logger.info("no trial logged %s: tv.png not written", TV_KEY)
    return written
