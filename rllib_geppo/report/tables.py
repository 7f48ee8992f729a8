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

from rllib_geppo.report.markdown import format_return, mean_gain_lines
from rllib_geppo.report.stats import Row
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
        raise ReportError(f"{path}: not a report's table.csv ({what})")
    parse = {f.name: _PARSE[f.type if isinstance(f.type, str) else f.type.__name__] for f in fields}
    try:
        return [Row(**{k: parse[k](v) for k, v in record.items() if k in parse}) for record in records]
    except ValueError as err:
        raise ReportError(f"{path}: not a report's table.csv ({err})") from None


def pool_rows(rows: Sequence[Row], pools: Sequence[tuple[str, Sequence[str]]]) -> list[Row]:
    """``rows`` with each pool's members relabelled as the pool.

    Raises ReportError for a member no row has, or a pool with two rows in one environment
    (rows are means over seeds: pooling seeds needs the trials).
    """
    label_of = {}
    for label, members in pools:
        for member in members:
            if not any(r.variant == member for r in rows):
                names = ", ".join(sorted({r.variant for r in rows}))
                raise ReportError(f"--pool {label}: no row is labelled {member!r} (rows: {names})")
            label_of[member] = label
    pooled = [dataclasses.replace(r, variant=label_of.get(r.variant, r.variant)) for r in rows]
    seen: dict[tuple[str, str], str] = {}
    for before, row in zip(rows, pooled):
        if (other := seen.setdefault((row.env, row.variant), before.variant)) != before.variant:
            raise ReportError(
                f"--pool {row.variant}: two rows in {row.env} ({other}, {before.variant}); tables "
                "join rows of different environments, and pooling seeds needs the trials' folders"
            )
    return pooled


def render_tables(rows: Sequence[Row], gains, sources: Sequence[Path]) -> str:
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
