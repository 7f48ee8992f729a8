"""``table.md``: the report's tables in markdown, and how they write numbers.

Table 1 per environment and variant (with ``--paper``, the paper's Table 1 beside ours first),
the steps and time to ``--target`` returns, the update sizes and late changes, the mean gains
across environments, and the trials left out. :func:`format_return` is how every table writes a
return and its standard error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rllib_geppo.records.result_keys import EVALUATION_RETURN_KEY, RETURN_KEY
from rllib_geppo.report import paper as report_paper
from rllib_geppo.report import stats
from rllib_geppo.report.build import Report
from rllib_geppo.report.grouping import variant_key
from rllib_geppo.report.paper import PaperRow
from rllib_geppo.report.stats import MeanGain, Row, Stability


def format_return(value: float, se: float) -> str:
    """``value ± se`` as the report's tables write returns ("n/a" where value is not finite)."""
    if not math.isfinite(value):
        return "n/a"
    number = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if not math.isfinite(se):
        return number
    return f"{number} ± {se:,.0f}" if abs(value) >= 100 else f"{number} ± {se:.2g}"


def _fmt_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def _comparison_cells(row: Row, has_baseline: bool, baseline: str) -> list[str]:
    """The columns relative to the baseline: "n/a" without a baseline run, "—" on its own row."""
    if not has_baseline:
        return ["n/a"] * 4
    pct = [
        "—" if row.variant == baseline else _fmt_vs_baseline(pct, se)
        for pct, se in (
            (row.avg_vs_baseline_pct, row.avg_vs_baseline_se),
            (row.final_vs_baseline_pct, row.final_vs_baseline_se),
        )
    ]
    return pct + _steps_and_time_cells(row.steps_to_baseline_final, row.time_to_baseline_final_s)


def _steps_and_time_cells(steps: float, seconds: float) -> list[str]:
    """Env steps (millions) and training time to a return; "not reached" where steps is NaN."""
    if not math.isfinite(steps):
        return ["not reached"] * 2
    return [f"{steps / 1e6:.3g}", _fmt_duration(seconds)]


def _fmt_vs_baseline(pct: float, diff_se: float) -> str:
    """E.g. "-11.6% (-0.79 s.e.)": the change and the difference in standard errors of the
    difference (left out with one seed)."""
    if not (math.isfinite(pct) and math.isfinite(diff_se)):
        return _fmt_pct(pct)
    return f"{_fmt_pct(pct)} ({diff_se:+.2f} s.e.)"


def _fmt_pct(value: float) -> str:
    return f"{value:+.1f}%" if math.isfinite(value) else "n/a"


def _paper_cells(row: PaperRow, has_ppo: bool) -> list[str]:
    """ "vs PPO" and "steps to PPO final" cells: ours, then the paper's in brackets."""
    ours = (_fmt_pct(row.avg_vs_ppo_pct), _fmt_pct(row.final_vs_ppo_pct)) if has_ppo else ("n/a", "n/a")
    vs_ppo = (
        ["—", "—"]
        if row.variant == report_paper.PAPER_BASELINE
        else [
            f"{o} ({p:+.0f}%)" for o, p in zip(ours, (row.paper_avg_vs_ppo_pct, row.paper_final_vs_ppo_pct))
        ]
    )
    steps = (
        "n/a"
        if not has_ppo
        else "not reached"
        if not math.isfinite(row.steps_to_ppo_final)
        else f"{row.steps_to_ppo_final / 1e6:.2f}"
    )
    return vs_ppo + [f"{steps} ({row.paper_steps_to_ppo_final / 1e6:.2f})"]


def render_paper_markdown(rows: Sequence[PaperRow]) -> list[str]:
    """The lines of the paper-comparison table (``--paper``): our rows beside Table 1's."""
    paper = report_paper
    lines = [
        f"Paper: Queeney et al. (NeurIPS 2021), Table 1: MuJoCo {paper.PAPER_ENV_VERSION} tasks "
        f"of OpenAI Gym, {paper.PAPER_BUDGET / 1e6:.0f}M env steps, {paper.PAPER_SEEDS} seeds. "
        "Ours: the env versions and budgets named in the rows, ± one standard error over our "
        "seeds. *vs paper* is (ours - paper) / "
        "|paper|; *vs PPO* is GePPO against PPO of the same source, ours then the paper's in "
        "brackets; so is *steps to PPO final*, where the mean curve first reaches PPO's final "
        "return (the paper gives PPO's own as the budget).",
        "",
        "| env | budget (M steps) | variant | seeds | avg return | paper avg | avg vs paper "
        "| avg vs PPO (paper) | final return | paper final | final vs paper | final vs PPO (paper) "
        "| steps to PPO final, M (paper) |",
        "|" + " --- |" * 13,
    ]
    with_ppo = {r.env for r in rows if r.variant == paper.PAPER_BASELINE}
    for row in rows:
        avg_ppo, final_ppo, steps = _paper_cells(row, row.env in with_ppo)
        lines.append(
            f"| {row.env} | {row.budget / 1e6:.3g} | {row.variant} | {row.seeds} "
            f"| {format_return(row.avg, row.avg_se)} | {format_return(row.paper_avg, math.nan)} "
            f"| {_fmt_pct(row.avg_vs_paper_pct)} | {avg_ppo} "
            f"| {format_return(row.final, row.final_se)} | {format_return(row.paper_final, math.nan)} "
            f"| {_fmt_pct(row.final_vs_paper_pct)} | {final_ppo} | {steps} |"
        )
    return lines


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
    base = report.baseline
    lines = ["# Results report", ""]
    if report.paper_rows:
        lines += [
            "## Against the paper's Table 1",
            "",
            *render_paper_markdown(report.paper_rows),
            "",
            "## All rows",
            "",
        ]
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
        f"| env | budget (M steps) | variant | seeds | avg return | avg vs {base} | final return "
        f"| final vs {base} | steps to {base} final (M) | time to {base} final | env steps/s "
        "| return at T | T |",
        "|" + " --- |" * 13,
    ]
    envs_with_base = {r.env for r in report.rows if r.variant == base}
    for row in report.rows:
        seeds = f"{row.seeds}" + (f" ({row.excluded} excluded)" if row.excluded else "")
        avg_pct, final_pct, steps, time = _comparison_cells(row, row.env in envs_with_base, base)
        lines.append(
            f"| {row.env} | {row.budget / 1e6:.3g} | {row.variant} | {seeds} "
            f"| {format_return(row.avg, row.avg_se)} | {avg_pct} "
            f"| {format_return(row.final, row.final_se)} | {final_pct} | {steps} | {time} "
            f"| {row.env_steps_per_s:,.0f} | {format_return(row.return_at_time, row.return_at_time_se)} "
            f"| {_fmt_duration(row.time_budget_s)} |"
        )
    lines += _target_lines([row for row in report.rows if math.isfinite(row.target)])
    lines += _stability_lines(report.stability)
    lines += mean_gain_lines(report.mean_gains, {r.variant for r in report.rows})
    if report.flags:
        lines += ["", "## Excluded trials", ""]
        lines += [
            f"- {f.trial.env} / {f.trial.variant} / seed {f.trial.seed}: {f.reason} (`{f.trial.path}`)"
            for f in report.flags
        ]
    return "\n".join(lines) + "\n"


def _target_lines(rows: Sequence[Row]) -> list[str]:
    """The rows' steps and training time to their environment's target return (``--target``)."""
    if not rows:
        return []
    lines = [
        "",
        "## Steps and time to a target return",
        "",
        "Where each variant's mean curve first reaches the target.",
        "",
        "| env | variant | target return | steps to target (M) | time to target |",
        "|" + " --- |" * 5,
    ]
    for row in rows:
        cells = [
            row.env,
            row.variant,
            f"{row.target:,.0f}",
            *_steps_and_time_cells(row.steps_to_target, row.time_to_target_s),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _stability_lines(rows: Sequence[Stability]) -> list[str]:
    """The TV of the last updates against its target, and the return's late change."""
    if not rows:
        return []
    lines = [
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
        "| env | variant | seeds | TV, last tenth | TV target | vs target | peak tenth (M steps) "
        "| late change |",
        "|" + " --- |" * 8,
    ]
    for row in rows:
        cells = [
            row.env,
            row.variant,
            str(row.seeds),
            format_return(row.tv_last, row.tv_last_se),
            format_return(row.tv_target, math.nan),
            _fmt_pct(stats.improvement_pct(row.tv_last, row.tv_target)),
            f"{row.peak_start / 1e6:.2g}–{row.peak_end / 1e6:.2g}",
            format_return(row.late_change, row.late_change_se),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def mean_gain_lines(gains: Sequence[MeanGain], variants: Iterable[str]) -> list[str]:
    """Each of ``variants``' mean % gain in average return over each other, across
    environments; nothing when no pair shares two environments."""
    if not gains:
        return []
    variants = sorted(variants, key=variant_key)
    by_pair = {(g.variant, g.versus): g for g in gains}
    most = max(g.envs for g in gains)

    def cell(variant: str, versus: str) -> str:
        if variant == versus:
            return "—"
        if (gain := by_pair.get((variant, versus))) is None:
            return "n/a"
        envs = "" if gain.envs == most else f", {gain.envs} envs"
        return f"{_fmt_pct(gain.mean_pct)} ({gain.above}↑ {gain.below}↓{envs})"

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
        "| variant | " + " | ".join(f"vs {v}" for v in variants) + " |",
        "|" + " --- |" * (len(variants) + 1),
        *("| " + " | ".join([v, *(cell(v, w) for w in variants)]) + " |" for v in variants),
    ]
