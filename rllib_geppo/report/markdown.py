"""``table.md``: the report's tables in markdown, and how they write numbers.

Table 1 per environment and variant (with ``--paper``, the paper's Table 1 beside ours first),
the steps and time to ``--target`` returns, the update sizes and late changes, the mean gains
across environments, and the trials left out; or, for reports' tables joined, their rows and
mean gains (:func:`render_tables`). Each table is a DataFrame of its cells' text, written by
pandas (:func:`markdown_table`); :func:`format_return` is how every table writes a return and its
standard error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
from tabulate import DataRow, TableFormat

from rllib_geppo.records.result_keys import EVALUATION_RETURN_KEY, RETURN_KEY
from rllib_geppo.report import stats
from rllib_geppo.report.build import PAPER_BASELINE, PAPER_BUDGET, PAPER_ENV_VERSION, PAPER_SEEDS, Report
from rllib_geppo.report.grouping import variant_key

#: Markdown's pipe tables with every cell as it is, "| --- |" under the header (tabulate's own
#: "pipe" format pads each column to its widest cell: one long label would widen every line).
_PIPE = TableFormat(
    lineabove=None,
    linebelowheader=lambda widths, _: "|" + " --- |" * len(widths),
    linebetweenrows=None,
    linebelow=None,
    headerrow=DataRow("|", "|", "|"),
    datarow=DataRow("|", "|", "|"),
    padding=1,
    with_header_hide=None,
)


def markdown_table(cells: pd.DataFrame) -> list[str]:
    """The lines of a markdown table of ``cells`` (text), headed by their column names."""
    text = cells.to_markdown(index=False, tablefmt=_PIPE, stralign=None, numalign=None, disable_numparse=True)
    return text.splitlines()


def format_return(value: float, se: float = math.nan) -> str:
    """``value ± se`` as the report's tables write returns ("n/a" where value is not finite)."""
    if not math.isfinite(value):
        return "n/a"
    number = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if not math.isfinite(se):
        return number
    return f"{number} ± {se:,.0f}" if abs(value) >= 100 else f"{number} ± {se:.2g}"


def _returns(values: pd.Series, ses: pd.Series) -> list[str]:
    """:func:`format_return` of each value with its standard error."""
    return list(map(format_return, values, ses))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def _pct(values: pd.Series, ses: pd.Series | None = None) -> pd.Series:
    """E.g. "-11.6%", or with ``ses`` "-11.6% (-0.79 s.e.)": the change and the difference in
    standard errors of the difference (left out where NaN: with one seed); "n/a" for NaN."""
    cells = values.map("{:+.1f}%".format).where(values.notna(), "n/a")
    if ses is not None:
        cells = cells.mask(values.notna() & ses.notna(), cells + ses.map(" ({:+.2f} s.e.)".format))
    return cells


def _millions(steps: pd.Series, digits: str = ".3g") -> pd.Series:
    """Env steps in millions; "not reached" where NaN."""
    return (steps / 1e6).map(f"{{:{digits}}}".format).where(steps.notna(), "not reached")


def _steps_and_time(steps: pd.Series, seconds: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Env steps (millions) and training time to a return; "not reached" where steps is NaN."""
    return _millions(steps), seconds.map(_duration).where(steps.notna(), "not reached")


def render_paper_markdown(paper: pd.DataFrame) -> list[str]:
    """The lines of the paper-comparison table (``--paper``): our rows beside Table 1's; *vs PPO*
    and *steps to PPO final* give ours, then the paper's in brackets."""
    has_ppo = paper.env.isin(paper.env[paper.variant == PAPER_BASELINE])

    def vs_ppo(ours: str, papers: str) -> pd.Series:
        cells = _pct(paper[ours]).where(has_ppo, "n/a") + paper[papers].map(
            " ({:+.0f}%)".format, na_action="ignore"
        )
        return cells.mask(paper.variant == PAPER_BASELINE, "—")

    steps = _millions(paper.steps_to_ppo_final, ".2f").where(has_ppo, "n/a")
    cells = {
        "env": paper.env,
        "budget (M steps)": (paper.budget / 1e6).map("{:.3g}".format),
        "variant": paper.variant,
        "seeds": paper.seeds.astype(str),
        "avg return": _returns(paper.avg, paper.avg_se),
        "paper avg": paper.paper_avg.map(format_return),
        "avg vs paper": _pct(paper.avg_vs_paper_pct),
        "avg vs PPO (paper)": vs_ppo("avg_vs_ppo_pct", "paper_avg_vs_ppo_pct"),
        "final return": _returns(paper.final, paper.final_se),
        "paper final": paper.paper_final.map(format_return),
        "final vs paper": _pct(paper.final_vs_paper_pct),
        "final vs PPO (paper)": vs_ppo("final_vs_ppo_pct", "paper_final_vs_ppo_pct"),
        "steps to PPO final, M (paper)": steps
        + (paper.paper_steps_to_ppo_final / 1e6).map(" ({:.2f})".format),
    }
    return [
        f"Paper: Queeney et al. (NeurIPS 2021), Table 1: MuJoCo {PAPER_ENV_VERSION} tasks "
        f"of OpenAI Gym, {PAPER_BUDGET / 1e6:.0f}M env steps, {PAPER_SEEDS} "
        "seeds. Ours: the env versions and budgets named in the rows, ± one standard error over our "
        "seeds. *vs paper* is (ours - paper) / |paper|; *vs PPO* is GePPO against PPO of the same "
        "source, ours then the paper's in brackets; so is *steps to PPO final*, where the mean curve "
        "first reaches PPO's final return (the paper gives PPO's own as the budget).",
        "",
        *markdown_table(pd.DataFrame(cells)),
    ]


def _rows_table(rows: pd.DataFrame, base: str) -> pd.DataFrame:
    """Table 1's cells; those relative to the baseline are "n/a" without a baseline run in the
    environment, the percentages "—" on its own row."""
    is_base = rows.variant == base

    def vs_base(cells: pd.Series) -> pd.Series:
        return cells.where(rows.env.isin(rows.env[is_base]), "n/a")

    steps, time = _steps_and_time(rows.steps_to_baseline_final, rows.time_to_baseline_final_s)
    return pd.DataFrame(
        {
            "env": rows.env,
            "budget (M steps)": (rows.budget / 1e6).map("{:.3g}".format),
            "variant": rows.variant,
            "seeds": rows.seeds.astype(str)
            + rows.excluded.map(" ({} excluded)".format).where(rows.excluded > 0, ""),
            "avg return": _returns(rows.avg, rows.avg_se),
            f"avg vs {base}": vs_base(
                _pct(rows.avg_vs_baseline_pct, rows.avg_vs_baseline_se).mask(is_base, "—")
            ),
            "final return": _returns(rows.final, rows.final_se),
            f"final vs {base}": vs_base(
                _pct(rows.final_vs_baseline_pct, rows.final_vs_baseline_se).mask(is_base, "—")
            ),
            f"steps to {base} final (M)": vs_base(steps),
            f"time to {base} final": vs_base(time),
            "env steps/s": rows.env_steps_per_s.map("{:,.0f}".format),
            "return at T": _returns(rows.return_at_time, rows.return_at_time_se),
            "T": rows.time_budget_s.map(_duration),
        }
    )


def _return_description(return_key: str) -> str:
    if return_key == RETURN_KEY:
        return " (mean undiscounted return of the training episodes completed in each iteration)"
    if return_key == EVALUATION_RETURN_KEY:
        return (
            " (mean undiscounted return of the evaluation episodes, run with the policy of "
            "the iteration every `evaluation_interval` iterations)"
        )
    return ""


def render_markdown(report: Report) -> str:
    """``table.md``: Table 1 per environment and variant, then the excluded trials; with paper
    rows, the comparison with the paper's Table 1 comes first."""
    base, rows = report.baseline, report.rows
    lines = ["# Results report", ""]
    if not report.paper.empty:
        lines += ["## Against the paper's Table 1", "", *render_paper_markdown(report.paper), ""]
        lines += ["## All rows", ""]
    lines += [
        f"Return: `{report.return_key}`{_return_description(report.return_key)}. "
        "Curves are aligned on env steps; *avg* is the mean of the "
        "curve over training, *final* its value at the budget; ± is the standard error over "
        "seeds. Trials that differ in a setting other than the seed are separate rows, labelled "
        "with the settings they differ in. "
        f"Improvements are relative to {base}, in % and in standard errors of the difference "
        f"(s.e.; within ±1, no winner); *steps to {base} final* is where the mean curve "
        f"first reaches {base}'s final return; times are training wall time; *return at T* is "
        "the mean return after T of training, T being the shortest time any trial of the "
        "environment took to the budget.",
        "",
        *markdown_table(_rows_table(rows, base)),
    ]
    if (targeted := rows[rows.target.notna()]).size:
        steps, time = _steps_and_time(targeted.steps_to_target, targeted.time_to_target_s)
        cells = {
            "env": targeted.env,
            "variant": targeted.variant,
            "target return": targeted.target.map("{:,.0f}".format),
            "steps to target (M)": steps,
            "time to target": time,
        }
        lines += ["", "## Steps and time to a target return", ""]
        lines += [
            "Where each variant's mean curve first reaches the target.",
            "",
            *markdown_table(pd.DataFrame(cells)),
        ]
    lines += _stability_lines(report.stability)
    lines += mean_gain_lines(report.mean_gains, rows.variant)
    if report.flags:
        lines += ["", "## Excluded trials", ""]
        lines += [
            f"- {f.trial.env} / {f.trial.variant} / seed {f.trial.seed}: {f.reason} (`{f.trial.path}`)"
            for f in report.flags
        ]
    return "\n".join(lines) + "\n"


def _stability_lines(rows: pd.DataFrame) -> list[str]:
    """The TV of the last updates against its target, and the return's late change."""
    cells = {
        "env": rows.env,
        "variant": rows.variant,
        "seeds": rows.seeds.astype(str),
        "TV, last tenth": _returns(rows.tv_last, rows.tv_last_se),
        "TV target": rows.tv_target.map(format_return),
        "vs target": _pct(stats.improvement_pct(rows.tv_last, rows.tv_target)),
        "peak tenth (M steps)": [
            f"{a / 1e6:.2g}–{b / 1e6:.2g}" for a, b in zip(rows.peak_start, rows.peak_end)
        ],
        "late change": _returns(rows.late_change, rows.late_change_se),
    }
    return [
        "",
        "## Update size and late change",
        "",
        "*TV, last tenth* is the total variation distance per policy update averaged over the "
        "last tenth of training, *vs target* its excess over the variant's target (eps / 2); "
        "*peak tenth* is the tenth of training where the mean return curve is highest, *late "
        "change* each seed's return over the last tenth minus over the tenth where the other "
        "seeds' mean peaks, averaged over seeds (below zero: the return declined from its "
        "peak; noise alone averages zero). Training runs from the first env step where every "
        "curve has a return to the budget. ± is one standard error over seeds.",
        "",
        *markdown_table(pd.DataFrame(cells)),
    ]


def mean_gain_lines(gains: pd.DataFrame, variants: Iterable[str]) -> list[str]:
    """Each of ``variants``' mean % gain in average return over each other, across
    environments (:func:`~rllib_geppo.report.stats.mean_gains`); nothing when no pair shares two
    environments."""
    if gains.empty:
        return []
    variants = sorted(set(variants), key=variant_key)
    most = gains.envs.max()
    envs = gains.envs.map(", {} envs".format).where(gains.envs != most, "")
    text = _pct(gains.mean_pct) + [f" ({a}↑ {b}↓{e})" for a, b, e in zip(gains.above, gains.below, envs)]
    cells = pd.Series(text.to_numpy(), pd.MultiIndex.from_frame(gains[["variant", "versus"]]))
    cells = cells.unstack().reindex(index=variants, columns=variants, fill_value="n/a").fillna("n/a")
    for variant in variants:
        cells.loc[variant, variant] = "—"
    return [
        "",
        "## Across environments",
        "",
        "Each cell is the mean over environments of the % by which the row's *avg return* "
        "exceeds the column's (the paper's \"on average, GePPO improves average performance "
        f'throughout training by 31%"), over the {most} environments both have rows in unless '
        "the cell says fewer; ↑ and ↓ count the environments where the row is above or below "
        "by more than one standard error of the difference (the rest: no winner). Cells need "
        "two environments (n/a: fewer).",
        "",
        *markdown_table(cells.add_prefix("vs ").rename_axis("variant").reset_index()),
    ]


def render_tables(rows: pd.DataFrame, gains: pd.DataFrame, sources: Sequence[Path]) -> str:
    """``table.md`` of tables joined: the rows used, then their mean gains across environments."""
    cells = pd.DataFrame(
        {
            "env": rows.env,
            "budget (M steps)": (rows.budget / 1e6).map("{:.3g}".format),
            "variant": rows.variant,
            "seeds": rows.seeds.astype(str),
            "avg return": _returns(rows.avg, rows.avg_se),
            "final return": _returns(rows.final, rows.final_se),
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
