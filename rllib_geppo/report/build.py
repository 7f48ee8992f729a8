"""The :class:`Report` built from the trials: everything the output files show.

Per environment, :func:`build_report` leaves out the flagged trials and puts the others' return
curves on one grid of env steps (:mod:`rllib_geppo.report.stats`): each trial's average and final
return are ``trials.csv``, and Table 1's rows (``table.csv``) are their means and standard errors
per environment and variant, with where each mean curve reaches the baseline's final return (or a
``--target``) and the return at equal training time. Then the TV of the last updates against its
target and the return's late change (``stability.csv``); across environments, each variant's mean
gain over each other (``mean_gains.csv``); with ``--paper``, the paper's Table 1 beside our rows
(:func:`compare_with_paper`). Reports' ``table.csv`` files are read back and joined by
:func:`joined_rows`, for mean gains across studies that ran apart.

The paper: Queeney, Paschalidis & Cassandras, "Generalized Proximal Policy Optimization with
Sample Reuse", NeurIPS 2021, Table 1: average return over training and final return of PPO and
GePPO, and the env steps GePPO needs to reach PPO's final return, on six MuJoCo v3 tasks of
OpenAI Gym, 1M env steps, 5 seeds. This package runs gymnasium's v5 tasks, so rows are matched on
the task name (``Hopper-v5`` to the paper's ``Hopper-v3``) and the version stays in the env column.
"""

from __future__ import annotations

import io
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rllib_geppo.records.result_keys import RETURN_KEY
from rllib_geppo.report import stats
from rllib_geppo.report.grouping import Flag, group_trials, pool_owners, split_by_budget, variant_key
from rllib_geppo.report.trials import ReportError, Trial

logger = logging.getLogger(__name__)

#: ``table.csv``'s columns and their types: one row per environment and variant. Returns are
#: means over seeds, ``_se`` their standard errors; NaN (an empty cell): not available.
ROW_COLUMNS = {
    "env": str,
    "variant": str,
    "seeds": int,
    "excluded": int,  # trials flagged (stopped early, crashed) and left out of the means
    "budget": float,  # env steps
    "avg": float,  # mean return over training (its average over env steps)
    "avg_se": float,
    "final": float,  # return at the budget
    "final_se": float,
    "avg_vs_baseline_pct": float,  # NaN: no baseline, or this is the baseline
    "final_vs_baseline_pct": float,
    "avg_vs_baseline_se": float,  # the difference in standard errors of the difference
    "final_vs_baseline_se": float,
    "steps_to_baseline_final": float,  # env steps where the mean curve first reaches it; NaN: never
    "env_steps_per_s": float,  # budget / mean training wall time to reach it
    "time_to_baseline_final_s": float,  # training wall time; NaN as for steps
    "return_at_time": float,  # mean return after time_budget_s of training wall time
    "return_at_time_se": float,
    "time_budget_s": float,  # the environment's shortest training time to the budget
    "target": float,  # a return to reach (``--target``); NaN: none asked
    "steps_to_target": float,  # env steps where the mean curve first reaches it
    "time_to_target_s": float,  # training wall time there
}
#: Columns that reports from before ``--target`` lack.
OPTIONAL_COLUMNS = ("target", "steps_to_target", "time_to_target_s")


#: Env steps at which the paper reads "final"; its averages run over [0, PAPER_BUDGET].
PAPER_BUDGET = 1_000_000
PAPER_SEEDS = 5
PAPER_ENV_VERSION = "v3"
#: The variant the paper compares with; the report's baseline must be this one.
PAPER_BASELINE = "PPO"

#: Table 1 of the paper as printed, per task and variant: returns averaged over seeds, GePPO's
#: improvement over PPO in % (from unrounded returns), and the env steps to reach PPO's final
#: return (PPO's own is the budget, by definition).
PAPER_TABLE1 = pd.read_csv(
    io.StringIO(
        """task,paper_variant,paper_avg,paper_final,paper_avg_vs_ppo_pct,paper_final_vs_ppo_pct,paper_steps_to_ppo_final
Swimmer,PPO,98,136,,,1e6
Swimmer,GePPO,161,195,65,44,0.23e6
Hopper,PPO,2362,3126,,,1e6
Hopper,GePPO,2544,3450,8,10,0.41e6
HalfCheetah,PPO,1764,3223,,,1e6
HalfCheetah,GePPO,2439,3903,38,21,0.54e6
Walker2d,PPO,1817,3041,,,1e6
Walker2d,GePPO,2199,3502,21,15,0.63e6
Ant,PPO,545,1227,,,1e6
Ant,GePPO,762,1576,40,28,0.79e6
Humanoid,PPO,584,972,,,1e6
Humanoid,GePPO,665,1345,14,38,0.85e6"""
    ),
    dtype={"paper_avg_vs_ppo_pct": "Int64", "paper_final_vs_ppo_pct": "Int64"},
)

#: The report's variants that the paper's two columns describe. Overlapped sampling changes when
#: GePPO samples, not what it optimises, so both GePPO variants are compared with the paper's.
PAPER_VARIANTS = {"GePPO": "GePPO", "GePPO overlapped": "GePPO", "PPO": "PPO"}

_ENV_NAME = re.compile(r"^(?:[\w.]+/)?(?P<task>[A-Za-z0-9]+)-v\d+$")


def paper_task(env: str) -> str | None:
    """The paper's task name for a gymnasium env id (``Hopper-v5`` -> ``Hopper``), or None when
    the paper does not report that task."""
    match = _ENV_NAME.match(env)
    return match["task"] if match and match["task"] in set(PAPER_TABLE1.task) else None


def compare_with_paper(rows: pd.DataFrame) -> pd.DataFrame:
    """The report's rows (``table.csv``'s columns) that the paper's Table 1 covers, in their
    order, beside the paper's numbers (``paper.csv``).

    Percentages against the paper are ``(ours - paper) / |paper|``; "vs PPO" compares GePPO with
    PPO from the same source (ours with ours, the paper's with the paper's), so ``rows`` must come
    from a report whose baseline is :data:`PAPER_BASELINE`. NaN: not available (no PPO row for
    the environment, or the PPO row itself).
    """
    ours = rows.assign(task=rows.env.map(paper_task), paper_variant=rows.variant.map(PAPER_VARIANTS))
    both = ours.merge(PAPER_TABLE1, on=["task", "paper_variant"])
    columns = ["env", "variant", "seeds", "budget"]
    for what in ("avg", "final"):
        both[f"{what}_vs_paper_pct"] = stats.improvement_pct(both[what], both[f"paper_{what}"])
        both[f"{what}_vs_ppo_pct"] = both[f"{what}_vs_baseline_pct"]
        columns += [what, f"{what}_se", f"paper_{what}", f"{what}_vs_paper_pct", f"{what}_vs_ppo_pct"]
        columns.append(f"paper_{what}_vs_ppo_pct")
    both["steps_to_ppo_final"] = both.steps_to_baseline_final
    return both[[*columns, "steps_to_ppo_final", "paper_steps_to_ppo_final"]]


def off_budget(paper: pd.DataFrame, tolerance: float = 0.01) -> list[str]:
    """Environments of :func:`compare_with_paper`'s rows whose budget differs from the paper's 1M
    env steps by more than ``tolerance`` (a fraction): their averages and finals are not the
    paper's quantities."""
    return sorted(set(paper.env[(paper.budget - PAPER_BUDGET).abs() > tolerance * PAPER_BUDGET]))


@dataclass(frozen=True)
class Report:
    """Everything the output files show: each table as its CSV file's columns, and per environment
    the curves that the figures draw, one column per kept trial, named ``(variant, trial)``."""

    rows: pd.DataFrame  # table.csv (ROW_COLUMNS)
    #: trials.csv: env, variant, seed, budget, avg, final (on the environment's grid) and trial
    #: (its folder's name): the figures behind the rows, so that studies can be pooled trial by trial
    trials: pd.DataFrame
    #: stability.csv: env, variant, seeds; tv_last (the TV per policy update over the last tenth
    #: of training; NaN: not logged), tv_last_se, tv_target (eps / 2); peak_start and peak_end
    #: (env steps: the tenth where the mean return is highest), late_change (the return over the
    #: last tenth less that over the peak tenth: stats.changes_from_peak), late_change_se
    stability: pd.DataFrame
    mean_gains: pd.DataFrame  # mean_gains.csv (stats.mean_gains)
    paper: pd.DataFrame  # paper.csv (paper.compare_with_paper); empty without --paper
    returns: dict[str, pd.DataFrame]  # env -> return on a grid of env steps up to the budget
    #: env -> return on a grid of seconds of training up to the environment's time_budget_s,
    #: where its runs share a window of time
    returns_by_time: dict[str, pd.DataFrame]
    tv: dict[str, pd.DataFrame]  # env -> TV per update on env steps, variants whose trials logged it
    flags: list[Flag]
    baseline: str
    return_key: str


@dataclass(frozen=True)
class _Environment:
    """One environment's kept trials compared: its part of each table and its curves."""

    trials: pd.DataFrame  # its trials.csv rows
    rows: list[dict]  # per variant, its table.csv columns beyond the seeds' means
    stability: list[dict]  # per variant, its stability.csv row
    returns: pd.DataFrame
    returns_by_time: pd.DataFrame  # empty: its runs share no window of time
    tv: pd.DataFrame  # empty: no variant logged TV up to the budget


def _compare(
    env: str, kept: Sequence[Trial], budget: float, baseline: str, target: float | None
) -> _Environment:
    """One environment's trials that reach the budget compared (see :class:`_Environment`)."""
    kept = sorted(kept, key=lambda t: variant_key(t.variant))

    def curves(column: str, x: str | None = None) -> dict[tuple[str, Path], pd.Series]:
        """Each trial's curve of ``column``, against env steps or against the column ``x``."""
        return {
            (t.variant, t.path): t.curves[column].set_axis(t.curves[x]) if x else t.curves[column]
            for t in kept
        }

    returns = stats.aligned(curves("return"), budget)
    grid = returns.index
    # Training time is reported every iteration (finite), so no point needs skipping.
    times = stats.with_points(pd.concat(curves("time_s"), axis=1), grid).loc[grid]
    seconds = float(times.iloc[-1].min())
    by_time = stats.aligned(curves("return", "time_s"), seconds)
    # TV per update, of the variants whose every trial logged it, over the last tenth of training.
    unlogged = {t.variant for t in kept if t.curves["tv"].isna().all()}
    tv_curves = {name: curve for name, curve in curves("tv").items() if name[0] not in unlogged}
    tv = stats.aligned(tv_curves, budget) if tv_curves else pd.DataFrame()
    tv_last = stats.window_mean(tv, *stats.tenth_edges(returns)[-2:]) if not tv.empty else pd.Series()
    variants = returns.columns.unique(0)
    base_final = returns[baseline].mean(axis=1).iloc[-1] if baseline in variants else math.nan
    rows, stability = [], []
    for variant in variants:
        mean, time = returns[variant].mean(axis=1), times[variant].mean(axis=1)
        cross = stats.first_crossing(mean, base_final)
        to_target = stats.first_crossing(mean, target) if target is not None else math.nan
        at_time = by_time[variant].iloc[-1] if not by_time.empty else pd.Series(dtype=float)
        rows.append(
            {
                "env": env,
                "variant": variant,
                "steps_to_baseline_final": cross,
                "env_steps_per_s": budget / time.iloc[-1],
                "time_to_baseline_final_s": float(np.interp(cross, grid, time)),
                "return_at_time": at_time.mean(),
                "return_at_time_se": at_time.sem(),
                "time_budget_s": seconds,
                "target": target if target is not None else math.nan,
                "steps_to_target": to_target,
                "time_to_target_s": float(np.interp(to_target, grid, time)),
            }
        )
        targets = [t.curves["tv_target"] for t in kept if t.variant == variant]
        last = tv_last[variant] if variant in tv_last else pd.Series(dtype=float)
        change, change_se, (peak_start, peak_end) = stats.late_change(returns[variant])
        stability.append(
            {
                "env": env,
                "variant": variant,
                "seeds": len(targets),
                "tv_last": last.mean(),
                "tv_last_se": last.sem(),
                "tv_target": pd.concat(targets).median()
                if last.size and all(t.notna().any() for t in targets)
                else math.nan,
                "peak_start": peak_start,
                "peak_end": peak_end,
                "late_change": change,
                "late_change_se": change_se,
            }
        )
    trials = pd.DataFrame(
        {
            "env": env,
            "variant": [t.variant for t in kept],
            "seed": pd.array([t.seed for t in kept], dtype="Int64"),
            "budget": budget,
            "avg": stats.mean_over(returns).to_numpy(),
            "final": returns.iloc[-1].to_numpy(),
            "trial": [t.path.name for t in kept],
        }
    )
    return _Environment(trials, rows, stability, returns, by_time, tv)


def _table_rows(
    trials: pd.DataFrame, extras: pd.DataFrame, flags: Sequence[Flag], baseline: str
) -> pd.DataFrame:
    """``table.csv``: the seeds' means and standard errors per environment and variant, how they
    compare with the baseline's of the environment, and ``extras``, the other columns."""
    # Series.mean and Series.sem sum each group as numpy does (groupby's own "mean" and "sem"
    # use compensated and one-pass sums: the same numbers but for their last digits).
    mean, sem = pd.Series.mean, pd.Series.sem
    rows = (
        trials.groupby(["env", "variant"], sort=False)
        .agg(
            seeds=("avg", "size"),
            budget=("budget", "first"),
            avg=("avg", mean),
            avg_se=("avg", sem),
            final=("final", mean),
            final_se=("final", sem),
        )
        .reset_index()
    )
    excluded = Counter((f.trial.env, f.trial.variant) for f in flags)
    rows["excluded"] = [excluded[env, variant] for env, variant in zip(rows.env, rows.variant)]
    is_base = rows.variant == baseline
    base = rows[is_base].set_index("env")
    for what in ("avg", "final"):
        base_mean, base_se = rows.env.map(base[what]), rows.env.map(base[f"{what}_se"])
        pct = stats.improvement_pct(rows[what], base_mean)
        in_se = stats.difference_in_se(rows[what], rows[f"{what}_se"], base_mean, base_se)
        rows[f"{what}_vs_baseline_pct"] = pct.mask(is_base)  # NaN on the baseline's own row
        rows[f"{what}_vs_baseline_se"] = in_se.mask(is_base)
    return rows.merge(extras, on=["env", "variant"])[list(ROW_COLUMNS)]


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
    if paper and baseline != PAPER_BASELINE:
        raise ReportError(
            f"--paper compares with the paper's {PAPER_BASELINE}: leave out --baseline {baseline!r}"
        )
    flags = [Flag(t, t.problem) for t in trials if t.problem]
    compared: dict[str, _Environment] = {}
    for env, env_trials in group_trials((t for t in trials if not t.problem), lambda t: t.env).items():
        env_budget, kept, early = split_by_budget(env_trials, budget)
        flags.extend(early)
        if not kept or max(t.curves["return"].first_valid_index() for t in kept) > env_budget:
            logger.warning(
                "%s: no trial has returns up to the budget of %s env steps", env, f"{env_budget:,.0f}"
            )
            continue
        compared[env] = _compare(env, kept, env_budget, baseline, (targets or {}).get(env))
    for flag in flags:
        logger.warning(
            "excluded %s (%s, %s, seed %s): %s",
            flag.trial.path,
            flag.trial.env,
            flag.trial.variant,
            flag.trial.seed,
            flag.reason,
        )
    if not compared:
        raise ReportError(
            "no trial reaches the budget in any environment: "
            + "; ".join(f"{f.trial.path}: {f.reason}" for f in flags)
        )
    envs = compared.values()
    trial_rows = pd.concat([e.trials for e in envs], ignore_index=True)
    rows = _table_rows(trial_rows, pd.DataFrame([r for e in envs for r in e.rows]), flags, baseline)
    _warn_split_baseline(rows, baseline)
    return Report(
        rows=rows,
        trials=trial_rows,
        stability=pd.DataFrame([s for e in envs for s in e.stability]),
        mean_gains=stats.mean_gains(rows),
        paper=_paper_rows(rows) if paper else compare_with_paper(rows.iloc[:0]),
        returns={env: e.returns for env, e in compared.items()},
        returns_by_time={
            env: e.returns_by_time for env, e in compared.items() if not e.returns_by_time.empty
        },
        tv={env: e.tv for env, e in compared.items() if not e.tv.empty},
        flags=flags,
        baseline=baseline,
        return_key=return_key,
    )


def _warn_split_baseline(rows: pd.DataFrame, baseline: str) -> None:
    """Warn where the baseline's trials differ in settings, so that no row is the baseline."""
    labels = set(rows.variant)
    split = sorted(label for label in labels if label.startswith(baseline + " "))
    if baseline not in labels and split:
        logger.warning(
            "--baseline %s: its trials differ in settings and form the rows %s; "
            "name one with --baseline, or join them with --pool",
            baseline,
            ", ".join(map(repr, split)),
        )


def _paper_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows the paper covers beside its numbers; warns about what cannot be compared."""
    papers = compare_with_paper(rows)
    if papers.empty:
        logger.warning(
            "--paper: no row is one of the paper's tasks (%s) and variants (%s)",
            ", ".join(PAPER_TABLE1.task.unique()),
            ", ".join(PAPER_VARIANTS),
        )
    for env in off_budget(papers):
        logger.warning(
            "--paper: %s is read at %s env steps, the paper at %s: its averages and "
            "finals are not the paper's quantities (use --budget 1e6)",
            env,
            f"{papers.budget[papers.env == env].iloc[0]:,.0f}",
            f"{PAPER_BUDGET:,}",
        )
    return papers


def read_table(path: Path) -> pd.DataFrame:
    """The rows of a report's ``table.csv`` (:data:`ROW_COLUMNS`; empty cells: NaN). Raises
    ReportError for a file that is missing or not a report's table."""
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
    """The rows of the ``tables``, each pool's members relabelled as the pool (:func:`pool_owners`).
    Raises ReportError for a member no row has, a variant in two pools, two rows of one variant in
    one environment (rows are means over seeds: pooling seeds needs the trials), or rows of one
    environment read at different budgets."""
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
