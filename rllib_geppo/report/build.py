"""The :class:`Report` built from the trials: everything the output files show.

Per environment, :func:`build_report` leaves out the flagged trials, compares the variants' return
curves on one grid of env steps (:mod:`rllib_geppo.report.stats`) and collects the rows of Table 1,
each trial's figures, the figures' panels, the TV of the last updates against its target and the
return's late change; across environments, each variant's mean gain over each other; with
``--paper``, the paper's Table 1 beside our rows (:mod:`rllib_geppo.report.paper`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rllib_geppo.records.result_keys import RETURN_KEY
from rllib_geppo.report import paper as report_paper
from rllib_geppo.report import stats
from rllib_geppo.report.grouping import Flag, group_trials, split_by_budget, variant_key
from rllib_geppo.report.paper import PaperRow
from rllib_geppo.report.plots import ReturnsPanel, TimePanel, TVPanel
from rllib_geppo.report.stats import Array, MeanGain, Row, Stability
from rllib_geppo.report.trials import ReportError, Trial

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialRow:
    """One trial's figures behind its variant's row (``trials.csv``): with them, studies that ran
    apart can be pooled trial by trial."""

    env: str
    variant: str
    seed: int | None
    budget: float  # env steps
    avg: float  # average return over training, on the environment's grid of env steps
    final: float  # return at the budget
    trial: str  # the trial's folder name


@dataclass(frozen=True)
class Report:
    """Everything the output files show."""

    rows: list[Row]
    trial_rows: list[TrialRow]
    returns_panels: list[ReturnsPanel]
    time_panels: list[TimePanel]
    tv_panels: list[TVPanel]  # environments where some variant logged TV
    flags: list[Flag]
    baseline: str
    return_key: str
    paper_rows: list[PaperRow] = dataclasses.field(default_factory=list)  # empty: no --paper
    stability: list[Stability] = dataclasses.field(default_factory=list)  # one per row
    mean_gains: list[MeanGain] = dataclasses.field(default_factory=list)  # pairs over >= 2 envs


@dataclass(frozen=True)
class TVCurves:
    """One environment's TV per policy update, for the variants whose kept trials all logged it."""

    grid: Array  # env steps, up to the budget
    aligned: dict[str, Array]  # variant -> its trials' TV on the grid, one row per trial
    targets: dict[str, float]  # variant -> its target (median over iterations and trials)


def _tv_curves(by_variant: Mapping[str, list[Trial]], budget: float) -> TVCurves | None:
    """The TV curves up to the budget; None when no variant logged TV there."""
    logged = {v: ts for v, ts in by_variant.items() if all(t.tv is not None for t in ts)}
    if not logged:
        return None
    curves = {v: [(t.run.steps, t.tv) for t in ts] for v, ts in logged.items()}
    all_curves = [c for cs in curves.values() for c in cs]
    start = stats.grid_start(all_curves)
    if start > budget:
        return None
    grid = stats.step_grid([steps for steps, _ in all_curves], start, budget)
    targets = {
        v: float(np.nanmedian(np.concatenate([t.tv_target for t in ts])))
        for v, ts in logged.items()
        if all(t.tv_target is not None for t in ts)
    }
    return TVCurves(grid, {v: stats.align_all(cs, grid) for v, cs in curves.items()}, targets)


def _stability(env: str, comparison: stats.Comparison, tv: TVCurves | None) -> list[Stability]:
    """Per variant, the TV over the last tenth of training against its target, and the late
    change of the return (:func:`stats.late_change`); the tenths are the returns' for both."""
    last_start, end = stats.tenth_edges(comparison.grid)[-2:]
    rows = []
    for variant, aligned in comparison.aligned.items():
        change, change_se, (peak_start, peak_end) = stats.late_change(comparison.grid, aligned)
        tv_last, tv_last_se = math.nan, math.nan
        if tv and variant in tv.aligned:
            tv_last, tv_last_se = stats.mean_and_se(
                [stats.window_average(tv.grid, curve, last_start, end) for curve in tv.aligned[variant]]
            )
        rows.append(
            Stability(
                env=env,
                variant=variant,
                seeds=aligned.shape[0],
                tv_last=tv_last,
                tv_last_se=tv_last_se,
                tv_target=tv.targets.get(variant, math.nan) if tv else math.nan,
                peak_start=peak_start,
                peak_end=peak_end,
                late_change=change,
                late_change_se=change_se,
            )
        )
    return rows


def _paper_finals(rows: Sequence[Row]) -> dict[str, float]:
    """Variant -> the paper's final return, for the rows it covers at its 1M-step budget."""
    papers = report_paper.compare_with_paper(rows)
    off = set(report_paper.off_budget(papers))
    return {p.variant: p.paper_final for p in papers if p.env not in off}


def _report_env(
    report: Report,
    env: str,
    trials: Sequence[Trial],
    budget: float | None,
    paper: bool = False,
    target: float | None = None,
) -> None:
    """Add one environment's rows and panels to ``report``, and its trials stopped early to its
    flags. ``paper``: mark the paper's final returns on the returns panel; ``target``: a return
    whose first crossing the rows give."""
    env_budget, kept, early = split_by_budget(trials, budget)
    report.flags.extend(early)
    if not kept or stats.grid_start([(t.run.steps, t.run.returns) for t in kept]) > env_budget:
        logger.warning("%s: no trial has returns up to the budget of %s env steps", env, f"{env_budget:,.0f}")
        return
    by_variant = group_trials(kept, lambda t: t.variant, variant_key)
    excluded = {v: sum(f.trial.env == env and f.trial.variant == v for f in report.flags) for v in by_variant}
    runs = {v: [t.run for t in ts] for v, ts in by_variant.items()}
    comparison = stats.compare_variants(env, runs, env_budget, report.baseline, excluded, target)
    rows = comparison.rows
    report.rows.extend(rows)
    report.trial_rows.extend(
        TrialRow(env, variant, t.seed, env_budget, float(avg), float(final), t.path.name)
        for variant, ts in by_variant.items()
        for t, avg, final in zip(ts, comparison.trial_avgs[variant], comparison.trial_finals[variant])
    )
    base_final = next((r.final for r in rows if r.variant == report.baseline), math.nan)
    report.returns_panels.append(
        ReturnsPanel(
            env=env,
            grid=comparison.grid,
            bands=comparison.bands,
            baseline=report.baseline,
            baseline_final=base_final,
            crossings={r.variant: r.steps_to_baseline_final for r in rows},
            paper_finals=_paper_finals(rows) if paper else {},
        )
    )
    if comparison.time_bands:
        report.time_panels.append(TimePanel(env, comparison.time_grid, comparison.time_bands))
    tv = _tv_curves(by_variant, env_budget)
    if tv:
        report.tv_panels.append(
            TVPanel(
                env=env,
                grid=tv.grid,
                targets=tv.targets,
                bands={v: stats.band(aligned) for v, aligned in tv.aligned.items()},
            )
        )
    report.stability.extend(_stability(env, comparison, tv))


def build_report(
    trials: Sequence[Trial],
    budget: float | None = None,
    baseline: str = "PPO",
    return_key: str = RETURN_KEY,
    paper: bool = False,
    targets: Mapping[str, float] | None = None,
) -> Report:
    """Group, flag, align and compare; ``paper``: add the paper's Table 1 beside our rows;
    ``targets``: environment -> a return, where each variant's mean curve first reaches it.

    Raises ReportError when no environment has a trial left, or when ``paper`` is asked with a
    baseline other than the paper's PPO.
    """
    if paper and baseline != report_paper.PAPER_BASELINE:
        raise ReportError(
            f"--paper compares with the paper's {report_paper.PAPER_BASELINE}: "
            f"leave out --baseline {baseline!r}"
        )
    flags = [Flag(t, t.problem) for t in trials if t.problem]
    report = Report(
        rows=[],
        trial_rows=[],
        returns_panels=[],
        time_panels=[],
        tv_panels=[],
        flags=flags,
        baseline=baseline,
        return_key=return_key,
    )
    for env, env_trials in group_trials((t for t in trials if not t.problem), lambda t: t.env).items():
        _report_env(report, env, env_trials, budget, paper, (targets or {}).get(env))
    for flag in flags:
        logger.warning(
            "excluded %s (%s, %s, seed %s): %s",
            flag.trial.path,
            flag.trial.env,
            flag.trial.variant,
            flag.trial.seed,
            flag.reason,
        )
    if not report.rows:
        raise ReportError(
            "no trial reaches the budget in any environment: "
            + "; ".join(f"{f.trial.path}: {f.reason}" for f in flags)
        )
    _warn_split_baseline(report.rows, baseline)
    report.mean_gains.extend(stats.mean_gains(report.rows))
    if paper:
        report.paper_rows.extend(_paper_rows(report.rows))
    return report


def _warn_split_baseline(rows: Sequence[Row], baseline: str) -> None:
    """Warn where the baseline's trials differ in settings, so that no row is the baseline."""
    labels = {r.variant for r in rows}
    split = sorted(label for label in labels if label.startswith(baseline + " "))
    if baseline not in labels and split:
        logger.warning(
            "--baseline %s: its trials differ in settings and form the rows %s; "
            "name one with --baseline, or join them with --pool",
            baseline,
            ", ".join(map(repr, split)),
        )


def _paper_rows(rows: Sequence[Row]) -> list[PaperRow]:
    """The rows the paper covers beside its numbers; warns about what cannot be compared."""
    papers = report_paper.compare_with_paper(rows)
    if not papers:
        logger.warning(
            "--paper: no row is one of the paper's tasks (%s) and variants (%s)",
            ", ".join(report_paper.PAPER_TABLE1),
            ", ".join(report_paper.PAPER_VARIANTS),
        )
    for env in report_paper.off_budget(papers):
        logger.warning(
            "--paper: %s is read at %s env steps, the paper at %s: its averages and "
            "finals are not the paper's quantities (use --budget 1e6)",
            env,
            f"{next(p.budget for p in papers if p.env == env):,.0f}",
            f"{report_paper.PAPER_BUDGET:,}",
        )
    return papers
