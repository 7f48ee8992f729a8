"""Reports' tables read back and joined: the mean gains across studies that ran apart.

A study of several parts (one per task, run months apart, or on machines long gone) leaves one
``table.csv`` per part. The paper's six-task claims are means over tasks of each task's %
gain in average return (:func:`rllib_geppo.report.stats.mean_gains`), which need no more than
those rows: given ``table.csv`` files instead of result folders, ``rllib-geppo report`` reads
their rows, relabels them with ``--pool`` (each part names its variants after its own
experiments: ``walker2d-geppo``, ``swimmer-geppo``), and writes the rows and their mean gains.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rllib_geppo.report.build import OPTIONAL_COLUMNS, ROW_COLUMNS
from rllib_geppo.report.grouping import pool_owners
from rllib_geppo.report.markdown import format_return, markdown_table, mean_gain_lines
from rllib_geppo.report.trials import ReportError


def read_table(path: Path) -> pd.DataFrame:
    """The rows of a report's ``table.csv`` (:data:`~rllib_geppo.report.build.ROW_COLUMNS`;
    empty cells: NaN).

    Raises ReportError for a file that is missing or not a report's table.
    """
    try:
        # Text first, then numpy's conversion, which reads every float exactly as it was written
        # (the parser of pandas 2 can be a last digit off).
        table = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    except ValueError as err:  # pandas' parser errors included
        raise ReportError(f"{path}: not a report's table.csv ({err})") from None
    missing = [c for c in ROW_COLUMNS if c not in table and c not in OPTIONAL_COLUMNS]
    if table.empty or missing:
        what = f"no column {', '.join(missing)}" if missing else "no rows"
        raise ReportError(
            f"{path}: not a report's table.csv ({what}); for a trial's results, pass its folder"
        )
    try:
        return table.reindex(columns=list(ROW_COLUMNS)).astype(ROW_COLUMNS)
    except ValueError as err:
        raise ReportError(f"{path}: not a report's table.csv ({err})") from None


def joined_rows(tables: Sequence[Path], pools: Sequence[tuple[str, Sequence[str]]]) -> pd.DataFrame:
    """The rows of the ``tables``, each pool's members relabelled as the pool
    (:func:`~rllib_geppo.report.grouping.pool_owners`).

    Raises ReportError for a member no row has, a variant in two pools, two rows of one variant
    in one environment (rows are means over seeds: pooling seeds needs the trials), or rows of
    one environment read at different budgets.
    """
    rows = pd.concat([read_table(path).assign(path=path) for path in tables], ignore_index=True)
    rows["label"] = rows.variant
    rows["variant"] = rows.variant.replace(pool_owners(rows.variant, pools, kind="row"))
    if (again := rows[rows.duplicated(["env", "variant"])]).size:
        row = again.iloc[0]
        first = rows[(rows.env == row.env) & (rows.variant == row.variant)].iloc[0]
        raise ReportError(
            f"two rows of {row.variant!r} in {row.env}: {first.label!r} in {first.path} and "
            f"{row.label!r} in {row.path}; join one row per variant and environment (pooling "
            "seeds needs the trials' folders)"
        )
    first = rows.groupby("env").transform("first")
    if (off := rows[rows.budget != first.budget]).size:
        row, other = off.iloc[0], first.loc[off.index[0]]
        raise ReportError(
            f"{row.env}: rows at {other.budget:,.0f} env steps ({other.path}) and at "
            f"{row.budget:,.0f} ({row.path}); their average returns are over different spans of training"
        )
    return rows.drop(columns=["path", "label"])


def render_tables(rows: pd.DataFrame, gains: pd.DataFrame, sources: Sequence[Path]) -> str:
    """``table.md`` of tables joined: the rows used, then their mean gains across environments."""
    cells = pd.DataFrame(
        {
            "env": rows.env,
            "budget (M steps)": [f"{budget / 1e6:.3g}" for budget in rows.budget],
            "variant": rows.variant,
            "seeds": rows.seeds.astype(str),
            "avg return": list(map(format_return, rows.avg, rows.avg_se)),
            "final return": list(map(format_return, rows.final, rows.final_se)),
        }
    )
    lines = [
        "# Results report: tables joined",
        "",
        "Rows read from " + ", ".join(f"`{p}`" for p in sources) + "; ± is the standard error over seeds.",
        "",
        *markdown_table(cells),
        *mean_gain_lines(gains, rows.variant),
    ]
    return "\n".join(lines) + "\n"
