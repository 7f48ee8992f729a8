"""Reports' tables read back and joined: the mean gains across studies that ran apart.

A study of several parts (one per task, run months apart, or on machines long gone) leaves one
``table.csv`` per part. The paper's six-task claims are means over tasks of each task's %
gain in average return (:func:`rllib_geppo.report.stats.mean_gains`), which need no more than
those rows: given ``table.csv`` files instead of result folders, ``rllib-geppo report`` reads
their rows, relabels them with ``--pool`` (each part names its variants after its own
experiments: ``walker2d-geppo``, ``swimmer-geppo``), and writes the rows and their mean gains.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from rllib_geppo.report.grouping import pool_variants
from rllib_geppo.report.markdown import format_return, mean_gain_lines
from rllib_geppo.report.stats import MeanGain, Row
from rllib_geppo.report.trials import ReportError

_PARSE = {
    "str": str,
    "int": lambda text: int(float(text)),
    "float": lambda text: float(text) if text else math.nan,
}


def read_table(path: Path) -> list[Row]:
    """The rows of a report's ``table.csv`` (empty cells: NaN).

    Raises ReportError for a file that is missing or not a report's table.
    """
    try:
        with path.open(newline="") as handle:
            records = list(csv.DictReader(handle))
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    fields = dataclasses.fields(Row)
    missing = [
        f.name for f in fields if f.default is dataclasses.MISSING and f.name not in (records or [{}])[0]
    ]
    if not records or missing:
        what = f"no column {', '.join(missing)}" if records else "no rows"
        raise ReportError(
            f"{path}: not a report's table.csv ({what}); for a trial's results, pass its folder"
        )
    parse = {f.name: _PARSE[f.type if isinstance(f.type, str) else f.type.__name__] for f in fields}
    try:
        return [Row(**{k: parse[k](v) for k, v in record.items() if k in parse}) for record in records]
    except ValueError as err:
        raise ReportError(f"{path}: not a report's table.csv ({err})") from None


def joined_rows(tables: Sequence[Path], pools: Sequence[tuple[str, Sequence[str]]]) -> list[Row]:
    """The rows of the ``tables``, each pool's members relabelled as the pool
    (:func:`~rllib_geppo.report.grouping.pool_variants`).

    Raises ReportError for a member no row has, a variant in two pools, two rows of one variant
    in one environment (rows are means over seeds: pooling seeds needs the trials), or rows of
    one environment read at different budgets.
    """
    sources = [(path, row) for path in tables for row in read_table(path)]
    pooled = pool_variants([row for _, row in sources], pools, kind="row")
    seen: dict[tuple[str, str], tuple[Path, Row]] = {}
    budgets: dict[str, tuple[Path, Row]] = {}
    for (path, before), row in zip(sources, pooled, strict=True):
        if (first := seen.setdefault((row.env, row.variant), (path, before)))[1] is not before:
            raise ReportError(
                f"two rows of {row.variant!r} in {row.env}: {first[1].variant!r} in {first[0]} and "
                f"{before.variant!r} in {path}; join one row per variant and environment (pooling "
                "seeds needs the trials' folders)"
            )
        if (other := budgets.setdefault(row.env, (path, row)))[1].budget != row.budget:
            raise ReportError(
                f"{row.env}: rows at {other[1].budget:,.0f} env steps ({other[0]}) and at "
                f"{row.budget:,.0f} ({path}); their average returns are over different spans of training"
            )
    return pooled


def render_tables(rows: Sequence[Row], gains: Sequence[MeanGain], sources: Sequence[Path]) -> str:
    """``table.md`` of tables joined: the rows used, then their mean gains across environments."""
    lines = [
        "# Results report: tables joined",
        "",
        "Rows read from " + ", ".join(f"`{p}`" for p in sources) + "; ± is the standard error over seeds.",
        "",
        "| env | budget (M steps) | variant | seeds | avg return | final return |",
        "|" + " --- |" * 6,
        *(
            f"| {r.env} | {r.budget / 1e6:.3g} | {r.variant} | {r.seeds} | {format_return(r.avg, r.avg_se)} "
            f"| {format_return(r.final, r.final_se)} |"
            for r in rows
        ),
    ]
    lines += mean_gain_lines(gains, {r.variant for r in rows})
    return "\n".join(lines) + "\n"
