"""``rllib-geppo report``: the paper's Table 1 and figures from Ray Tune result folders.

Reads every Tune trial folder (``params.json`` + ``result.json``) under the given paths, groups
trials by environment and variant, aligns their curves on env steps and writes into ``--out``:
``table.md``, ``table.csv``, ``trials.csv`` (each trial's figures), ``stability.csv`` (the TV of
the last updates against its target, the return's late change: the paper's Figure 2),
``returns.png`` and, when any trial logged it, ``tv.png``. With rows in two or more
environments, ``table.md`` ends with each variant's mean gain in average return over each other
across them (also in ``mean_gains.csv``: the paper's "on average, GePPO improves ... by 31%").
With ``--paper``, ``table.md`` opens with the paper's Table 1 beside ours (also in
``paper.csv``) and the return curves mark the paper's final returns
(:mod:`rllib_geppo.report.paper`).

Trials of one environment and variant that differ in any setting other than the seed are
never averaged as seeds of one: each set is a row of its own, labelled with the settings it
differs in ("GePPO lr=0.001"; :mod:`rllib_geppo.report.settings`). ``--group-by`` chooses the
settings instead, and ``--pool`` joins rows on purpose.

Variants: a GePPO trial with ``sample_reuse`` is "GePPO" ("GePPO overlapped" when its updates
ran with a sampling lag, ``overlap_sampling``'s default wherever there is an EnvRunner); without
it, "PPO" (fixed lr) or "PPO-Adapt" (``adaptive_lr``); RLlib's own PPO is "RLlib PPO",
Stable-Baselines3's (``run: SB3PPO``) "SB3 PPO"; any other trainable keeps its name.

The arithmetic lives in :mod:`rllib_geppo.report.stats`, the drawing in
:mod:`rllib_geppo.report.plots`; this module reads files, decides which trials count and writes.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import math
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rllib_geppo.core.networks import mlp_config
from rllib_geppo.report import paper as report_paper
from rllib_geppo.report import settings as report_settings
from rllib_geppo.report import stats
from rllib_geppo.records.result_keys import (
    EVALUATION_PREFIX,
    EVALUATION_RETURN_KEY,
    OLD_STACK_PREFIX,
    RETURN_KEY,
    STEPS_KEY,
    TIME_KEY,
    TV_KEY,
    TV_TARGET_KEY,
    lookup,
)
from rllib_geppo.report.plots import (
    ReturnsPanel,
    TimePanel,
    TVPanel,
    returns_figure,
    returns_vs_time_figure,
    tv_figure,
)
from rllib_geppo.report.paper import PaperRow
from rllib_geppo.report.settings import Settings
from rllib_geppo.report.stats import Array, MeanGain, Row, Run, Stability

logger = logging.getLogger(__name__)

#: Table and legend order; variants not listed follow in name order.
VARIANT_ORDER = ("GePPO", "GePPO overlapped", "PPO", "PPO-Adapt", "SB3 PPO", "RLlib PPO")
#: ``--group-by`` values that label trials by variant or experiment, then by every setting
#: their trials differ in; any other value names the settings to label by.
BASE_LABELS = ("variant", "experiment")
EXIT_BAD_INPUT = 2


class ReportError(Exception):
    """Input that leaves nothing to report; the message names the folder and what was expected."""


@dataclass(frozen=True)
class Trial:
    """One Tune trial as read from disk."""

    path: Path
    env: str
    variant: str
    seed: int | None
    run: Run | None  # None: no usable results
    tv: Array | None  # per iteration, aligned with run.steps; NaN where not logged
    tv_target: Array | None
    problem: str | None  # why it cannot be averaged in whatever the budget (crash, no results)
    settings: Settings = Settings({}, frozenset())  # its config, flattened (report.settings)


@dataclass(frozen=True)
class Flag:
    """A trial left out of the averages, and why."""

    trial: Trial
    reason: str


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


# ----------------------------------------------------------------------------- reading folders


def find_trial_dirs(paths: Sequence[Path]) -> list[Path]:
    """Tune trial folders (holding ``params.json``) at or below each path, without duplicates.

    Raises:
        ReportError: a path is missing or holds no trial folder.
    """
    found: dict[Path, None] = {}  # ordered set: a folder given twice counts once
    for root in paths:
        if not root.is_dir():
            raise ReportError(f"{root}: no such directory (expected a Tune results or experiment "
                              "directory)")
        trials = _walk_trials(root)
        if not trials:
            raise ReportError(f"{root}: no Tune trial folders found (expected folders holding "
                              "params.json and result.json, as ray.tune.Tuner writes them)")
        found.update((t.resolve(), None) for t in trials)
    return list(found)


def _walk_trials(root: Path) -> list[Path]:
    trials = []
    for folder, subfolders, files in os.walk(root):
        if "params.json" in files:
            trials.append(Path(folder))
            subfolders.clear()  # a trial's subfolders are checkpoints: don't walk them
    return sorted(trials)


@lru_cache(maxsize=None)
def _experiment_state(experiment_dir: Path) -> Mapping[str, Mapping[str, Any]]:
    """Trial folder name -> Tune's saved trial record (``trainable_name``, ``status``), read from
    the newest ``experiment_state-*.json``; empty when absent or unreadable (copied folders)."""
    files = sorted(experiment_dir.glob("experiment_state-*.json"))
    if not files:
        return {}
    try:
        # Each trial_data entry is [trial record JSON, run metadata JSON].
        trial_data = json.loads(files[-1].read_text())["trial_data"]
        records = [json.loads(entry[0]) for entry in trial_data]
        return {r["relative_logdir"]: r for r in records}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        logger.warning("%s: unreadable experiment state (%s); using folder names", files[-1], err)
        return {}


def variant_name(algorithm: str, params: Mapping[str, Any], *, overlapped: bool = False) -> str:
    """The paper's name for a trial's algorithm variant; ``overlapped``: whether its updates ran
    with a sampling lag (read from the results, since ``overlap_sampling="auto"`` depends on
    other settings)."""
    if algorithm == "GePPO":
        if params.get("sample_reuse", True):
            return "GePPO overlapped" if overlapped else "GePPO"
        return "PPO-Adapt" if params.get("adaptive_lr", False) else "PPO"
    return {"PPO": "RLlib PPO", "SB3PPO": "SB3 PPO"}.get(algorithm, algorithm)


def read_results(trial_dir: Path) -> list[dict[str, Any]]:
    """The iterations in ``result.json``, one dict each; a torn last line (a killed run) is
    skipped, and iterations repeated after a restore from checkpoint replace the earlier ones."""
    path = trial_dir / "result.json"
    if not path.is_file():
        return []
    results: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s:%d: unreadable line skipped", path, number)
            continue
        step = lookup(result, STEPS_KEY)
        while results and lookup(results[-1], STEPS_KEY) >= step:  # rewound by a restore
            results.pop()
        results.append(result)
    return results


def _series(results: Sequence[Mapping[str, Any]], key: str) -> Array:
    return np.array([lookup(r, key) for r in results], dtype=float)


def _fresh(values: Array) -> Array:
    """``values`` with every bit-for-bit repeat of the previous iteration's value set to NaN.

    RLlib reports an evaluation's results once more in the iteration after it; that copy is
    no new measurement, and two evaluations never return the same float.
    """
    fresh = values.copy()
    fresh[1:][values[1:] == values[:-1]] = np.nan
    return fresh


def _optional_series(results: Sequence[Mapping[str, Any]], *keys: str) -> Array | None:
    """The series of the first of ``keys`` that the trial reported, or None."""
    for key in keys:
        values = _series(results, key)
        if np.isfinite(values).any():
            return values
    return None


def _updates_lagged(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any trained module's update ran with a sampling lag (overlapped sampling): each
    module reports its own ``learners/<module id>/sample_lag``."""
    for result in results:
        for module in (result.get("learners") or {}).values():
            lag = module.get("sample_lag") if isinstance(module, Mapping) else None
            if isinstance(lag, (int, float)) and math.isfinite(lag) and lag > 0:
                return True
    return False


def _problem(trial_dir: Path, status: str | None, params: Mapping[str, Any],
             results: Sequence[Mapping[str, Any]], returns: Array, return_key: str) -> str | None:
    """Why the trial cannot be averaged in whatever the budget, or None.

    Tune's saved status wins over a leftover ``error.txt``, which stays behind when a retry
    (``max_failures``) succeeds.
    """
    if status == "ERROR":
        return "crashed (Tune status ERROR)"
    if status is None and (trial_dir / "error.txt").is_file():
        return "crashed (error.txt)"
    if not params:
        return "params.json unreadable"
    if not results:
        return "no results (result.json missing or empty)"
    if not np.isfinite(returns).any():
        return f"no finite {return_key} reported"
    return None


def _read_params(trial_dir: Path) -> dict[str, Any]:
    """The trial's config dict; empty when unreadable."""
    try:
        params = json.loads((trial_dir / "params.json").read_text())
    except (OSError, ValueError):
        return {}
    return params if isinstance(params, dict) else {}


def _algorithm(config: Mapping[str, Any]) -> str | None:
    """"GePPO" for a config holding GePPO's own settings: a copied folder has no Tune record,
    and ``rllib train file`` names trial folders after their experiment, not the algorithm."""
    return "GePPO" if "sample_reuse" in config else None


def load_trial(trial_dir: Path, return_key: str = RETURN_KEY, group_by: str = "variant") -> Trial:
    """Read one trial folder; problems are recorded on the trial rather than raised.

    ``group_by="experiment"`` labels the trial with its experiment's name (the first part of
    the folder name that ``rllib train file`` gives), for ablations of one algorithm.
    """
    record = _experiment_state(trial_dir.parent).get(trial_dir.name, {})
    # Folder names are "<trainable or experiment>_<id>_...": the fallback for copied folders.
    name_parts = trial_dir.name.split("_") + ["?"]
    params = _read_params(trial_dir)
    results = read_results(trial_dir)
    returns = _series(results, return_key)
    if return_key.startswith(EVALUATION_PREFIX):
        returns = _fresh(returns)
    run = Run(_series(results, STEPS_KEY), returns, _series(results, TIME_KEY))
    # params.json holds only the settings a run file set; the results carry the whole config.
    logged = results[0].get("config") if results else None
    config = {**logged, **params} if isinstance(logged, dict) else params
    algorithm = record.get("trainable_name") or _algorithm(config) or name_parts[0]
    variant = (name_parts[0] if group_by == "experiment"
               else variant_name(algorithm, config, overlapped=_updates_lagged(results)))
    settings = report_settings.settings_of(logged if isinstance(logged, dict) else {}, params)
    model_config = params.get("_model_config", params.get("model_config", config.get("_model_config")))
    if algorithm == "GePPO" and isinstance(model_config or {}, Mapping):
        # One label per network built, whether a run spelled a default out or left it unset.
        settings = report_settings.replaced(settings, "model_config", mlp_config(model_config))
    return Trial(
        path=trial_dir,
        env=str(params.get("env") or name_parts[1]),
        variant=variant,
        seed=params.get("seed"),
        run=run if results else None,
        tv=_optional_series(results, TV_KEY, OLD_STACK_PREFIX + "tv"),
        tv_target=_optional_series(results, TV_TARGET_KEY, OLD_STACK_PREFIX + "tv_target"),
        problem=_problem(trial_dir, record.get("status"), params, results, run.returns, return_key),
        settings=settings,
    )


def load_trials(paths: Sequence[Path], return_key: str = RETURN_KEY,
                group_by: str = "variant") -> list[Trial]:
    """All trials under the paths, labelled by ``group_by`` (:func:`label_by_settings`).

    Raises ReportError when no trial has usable results, or ``group_by`` names a setting no
    trial records.
    """
    base = group_by if group_by in BASE_LABELS else "variant"
    trials = [load_trial(d, return_key, base) for d in find_trial_dirs(paths)]
    if all(t.problem for t in trials):
        listing = "; ".join(f"{t.path}: {t.problem}" for t in trials)
        raise ReportError(f"no trial with results under {', '.join(map(str, paths))} ({listing})")
    return label_by_settings(trials, None if group_by in BASE_LABELS else _setting_names(group_by))


def _setting_names(group_by: str) -> list[str]:
    return [name.strip() for name in group_by.split(",") if name.strip()]


def label_by_settings(trials: Sequence[Trial], keys: Sequence[str] | None = None) -> list[Trial]:
    """Split each environment's trials of one label by the settings they differ in, the seed
    aside, and name those settings in the label ("GePPO lr=0.001"): different settings are
    never seeds of one row. A setting that splits a label in any environment is named in that
    label in every environment, so the same settings carry the same label across environments
    (and pair up in *Across environments*) even where an environment ran only one of them;
    a setting that differs only between environments (a per-task lr) labels nothing.

    ``keys``: label by these settings alone (each where its trials differ in it); trials that
    differ in other settings are then pooled on purpose, with a warning naming them.

    Raises ReportError for a key no trial records.
    """
    if keys is not None:
        recorded = set().union(*(t.settings.values.keys() | t.settings.recorded for t in trials))
        if missing := [k for k in keys if not any(_under(r, [k]) for r in recorded)]:
            varied = report_settings.varied([t.settings for t in trials])
            raise ReportError(f"--group-by {','.join(keys)}: no trial records the setting "
                              f"{', '.join(map(repr, missing))} (settings that differ between "
                              f"trials: {', '.join(varied) or 'none'}; or use "
                              f"{' / '.join(BASE_LABELS)})")
    groups = _group(trials, lambda t: (t.env, t.variant))
    chosen: dict[str, set[str]] = defaultdict(set)  # base label -> the settings that split it
    for (env, base), group in groups.items():
        varied = report_settings.varied([t.settings for t in group])
        named = [v for v in varied if keys is None or _under(v, keys)]
        chosen[base].update(named)
        if pooled := [v for v in varied if v not in named]:
            logger.warning("%s / %s: --group-by %s pools trials that differ in %s", env, base,
                           ",".join(keys or ()), ", ".join(pooled))
    return [dataclasses.replace(t, variant=report_settings.label(base, t.settings,
                                                                 sorted(chosen[base])))
            for (_, base), group in groups.items() for t in group]


def _under(setting: str, keys: Sequence[str]) -> bool:
    """Whether ``setting`` is one of ``keys`` or inside one ("model_config/fcnet_hiddens" is
    inside "model_config")."""
    return any(setting == k or setting.startswith(k + "/") for k in keys)


# ----------------------------------------------------------------------------- selecting trials


def pool_variants(trials: Sequence[Trial], pools: Sequence[tuple[str, Sequence[str]]]) -> list[Trial]:
    """Relabel the trials of each pool's member variants with the pool's label.

    A pool is reported as one variant whose seeds are all its members' trials: e.g. the layouts
    that split sampling against the one that does not, when each is a variant of its own. Each
    baseline then counts once, where comparing every member with it separately reuses its noise.

    Raises ReportError for a member no trial has, a variant in two pools, or a label that is
    already another variant's (the trials would merge silently).
    """
    labels = {t.variant for t in trials}
    owner: dict[str, str] = {}
    for label, members in pools:
        for member in members:
            if member not in labels:
                raise ReportError(f"--pool {label}: no trial is labelled {member!r} "
                                  f"(labels: {', '.join(sorted(labels))})")
            if member in owner:
                raise ReportError(f"--pool: {member!r} is in both {owner[member]!r} and "
                                  f"{label!r}; a variant can be in one pool only")
            owner[member] = label
        if label in labels and label not in members:
            raise ReportError(f"--pool {label}: {label!r} is already a variant of its own; "
                              "choose another label")
    return [dataclasses.replace(t, variant=owner.get(t.variant, t.variant)) for t in trials]


def _curve_end(run: Run) -> tuple[float, float]:
    """(env steps at the last reported return, env steps of the last iteration)."""
    steps, _ = stats.valid_points(run.steps, run.returns)
    return float(steps[-1]), float(steps[-1] - (steps[-2] if len(steps) > 1 else 0.0))


def split_by_budget(trials: Sequence[Trial],
                    budget: float | None) -> tuple[float, list[Trial], list[Flag]]:
    """One environment's trials that reach the budget, and the others flagged.

    Args:
        trials: trials of one environment without a ``problem``.
        budget: env steps, or None for the largest budget all complete trials reach.
    """
    ends = {t.path: _curve_end(t.run) for t in trials}
    if budget is None:
        budget = stats.common_budget(list(ends.values()))
    kept = [t for t in trials if ends[t.path][0] >= budget]
    flags = [Flag(t, _short_of_budget(t.run, ends[t.path][0], budget))
             for t in trials if ends[t.path][0] < budget]
    return budget, kept, flags


def _short_of_budget(run: Run, curve_end: float, budget: float) -> str:
    """Why a trial's return curve ends before the budget: the trial stopped, or it ran on
    with no return recorded (an env without a time limit finishes no episode once its policy
    balances; an evaluation return comes only every ``evaluation_interval`` iterations)."""
    if run.steps[-1] >= budget:
        return (f"no return after {curve_end:,.0f} env steps (budget {budget:,.0f}): the trial ran "
                f"to {run.steps[-1]:,.0f} but finished no episode (give the env a time limit) or, "
                "for an evaluation return, was not evaluated (a budget at its last evaluation)")
    return f"stopped early at {curve_end:,.0f} env steps (budget {budget:,.0f})"


def _variant_key(variant: str) -> tuple[int, str]:
    rank = VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)
    return rank, variant


def _group(trials: Iterable[Trial], key: Callable[[Trial], str],
           order: Callable[[str], Any] | None = None) -> dict[str, list[Trial]]:
    """Trials by ``key``, the groups sorted by ``order`` of their key."""
    groups: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        groups[key(t)].append(t)
    return {k: groups[k] for k in sorted(groups, key=order)}


# ----------------------------------------------------------------------------- building the report


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
    targets = {v: float(np.nanmedian(np.concatenate([t.tv_target for t in ts])))
               for v, ts in logged.items() if all(t.tv_target is not None for t in ts)}
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
                [stats.window_average(tv.grid, curve, last_start, end) for curve in tv.aligned[variant]])
        rows.append(Stability(
            env=env, variant=variant, seeds=aligned.shape[0], tv_last=tv_last, tv_last_se=tv_last_se,
            tv_target=tv.targets.get(variant, math.nan) if tv else math.nan,
            peak_start=peak_start, peak_end=peak_end, late_change=change, late_change_se=change_se))
    return rows


def _paper_finals(rows: Sequence[Row]) -> dict[str, float]:
    """Variant -> the paper's final return, for the rows it covers at its 1M-step budget."""
    papers = report_paper.compare_with_paper(rows)
    off = set(report_paper.off_budget(papers))
    return {p.variant: p.paper_final for p in papers if p.env not in off}


def _report_env(report: Report, env: str, trials: Sequence[Trial], budget: float | None,
                paper: bool = False, target: float | None = None) -> None:
    """Add one environment's rows and panels to ``report``, and its trials stopped early to its
    flags. ``paper``: mark the paper's final returns on the returns panel; ``target``: a return
    whose first crossing the rows give."""
    env_budget, kept, early = split_by_budget(trials, budget)
    report.flags.extend(early)
    if not kept or stats.grid_start([(t.run.steps, t.run.returns) for t in kept]) > env_budget:
        logger.warning("%s: no trial has returns up to the budget of %s env steps", env,
                       f"{env_budget:,.0f}")
        return
    by_variant = _group(kept, lambda t: t.variant, _variant_key)
    excluded = {v: sum(f.trial.env == env and f.trial.variant == v for f in report.flags)
                for v in by_variant}
    runs = {v: [t.run for t in ts] for v, ts in by_variant.items()}
    comparison = stats.compare_variants(env, runs, env_budget, report.baseline, excluded, target)
    rows = comparison.rows
    report.rows.extend(rows)
    report.trial_rows.extend(
        TrialRow(env, variant, t.seed, env_budget, float(avg), float(final), t.path.name)
        for variant, ts in by_variant.items()
        for t, avg, final in zip(ts, comparison.trial_avgs[variant], comparison.trial_finals[variant]))
    base_final = next((r.final for r in rows if r.variant == report.baseline), math.nan)
    report.returns_panels.append(ReturnsPanel(
        env=env, grid=comparison.grid, bands=comparison.bands, baseline=report.baseline,
        baseline_final=base_final, crossings={r.variant: r.steps_to_baseline_final for r in rows},
        paper_finals=_paper_finals(rows) if paper else {}))
    if comparison.time_bands:
        report.time_panels.append(TimePanel(env, comparison.time_grid, comparison.time_bands))
    tv = _tv_curves(by_variant, env_budget)
    if tv:
        report.tv_panels.append(TVPanel(env=env, grid=tv.grid, targets=tv.targets, bands={
            v: stats.band(aligned) for v, aligned in tv.aligned.items()}))
    report.stability.extend(_stability(env, comparison, tv))


def build_report(trials: Sequence[Trial], budget: float | None = None, baseline: str = "PPO",
                 return_key: str = RETURN_KEY, paper: bool = False,
                 targets: Mapping[str, float] | None = None) -> Report:
    """Group, flag, align and compare; ``paper``: add the paper's Table 1 beside our rows;
    ``targets``: environment -> a return, where each variant's mean curve first reaches it.

    Raises ReportError when no environment has a trial left, or when ``paper`` is asked with a
    baseline other than the paper's PPO.
    """
    if paper and baseline != report_paper.PAPER_BASELINE:
        raise ReportError(f"--paper compares with the paper's {report_paper.PAPER_BASELINE}: "
                          f"leave out --baseline {baseline!r}")
    flags = [Flag(t, t.problem) for t in trials if t.problem]
    report = Report(rows=[], trial_rows=[], returns_panels=[], time_panels=[], tv_panels=[],
                    flags=flags, baseline=baseline, return_key=return_key)
    for env, env_trials in _group((t for t in trials if not t.problem), lambda t: t.env).items():
        _report_env(report, env, env_trials, budget, paper, (targets or {}).get(env))
    for flag in flags:
        logger.warning("excluded %s (%s, %s, seed %s): %s", flag.trial.path, flag.trial.env,
                       flag.trial.variant, flag.trial.seed, flag.reason)
    if not report.rows:
        raise ReportError("no trial reaches the budget in any environment: "
                          + "; ".join(f"{f.trial.path}: {f.reason}" for f in flags))
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
        logger.warning("--baseline %s: its trials differ in settings and form the rows %s; "
                       "name one with --baseline, or join them with --pool", baseline,
                       ", ".join(map(repr, split)))


def _paper_rows(rows: Sequence[Row]) -> list[PaperRow]:
    """The rows the paper covers beside its numbers; warns about what cannot be compared."""
    papers = report_paper.compare_with_paper(rows)
    if not papers:
        logger.warning("--paper: no row is one of the paper's tasks (%s) and variants (%s)",
                       ", ".join(report_paper.PAPER_TABLE1), ", ".join(report_paper.PAPER_VARIANTS))
    for env in report_paper.off_budget(papers):
        logger.warning("--paper: %s is read at %s env steps, the paper at %s: its averages and "
                       "finals are not the paper's quantities (use --budget 1e6)", env,
                       f"{next(p.budget for p in papers if p.env == env):,.0f}",
                       f"{report_paper.PAPER_BUDGET:,}")
    return papers


# ----------------------------------------------------------------------------- writing


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
    pct = ["—" if row.variant == baseline else _fmt_vs_baseline(pct, se)
           for pct, se in ((row.avg_vs_baseline_pct, row.avg_vs_baseline_se),
                           (row.final_vs_baseline_pct, row.final_vs_baseline_se))]
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
    """"vs PPO" and "steps to PPO final" cells: ours, then the paper's in brackets."""
    ours = ((_fmt_pct(row.avg_vs_ppo_pct), _fmt_pct(row.final_vs_ppo_pct)) if has_ppo
            else ("n/a", "n/a"))
    vs_ppo = (["—", "—"] if row.variant == report_paper.PAPER_BASELINE else
              [f"{o} ({p:+.0f}%)" for o, p in zip(ours, (row.paper_avg_vs_ppo_pct,
                                                         row.paper_final_vs_ppo_pct))])
    steps = ("n/a" if not has_ppo else "not reached" if not math.isfinite(row.steps_to_ppo_final)
             else f"{row.steps_to_ppo_final / 1e6:.2f}")
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
        "return (the paper gives PPO's own as the budget).", "",
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
            f"| {_fmt_pct(row.final_vs_paper_pct)} | {final_ppo} | {steps} |")
    return lines


def _return_description(return_key: str) -> str:
    if return_key == RETURN_KEY:
        return " (mean undiscounted return of the training episodes completed in each iteration)"
    if return_key == EVALUATION_RETURN_KEY:
        return (" (mean undiscounted return of the evaluation episodes, run with the policy of "
                "the iteration every `evaluation_interval` iterations)")
    return ""


def render_markdown(report: Report) -> str:
    """``table.md``: Table 1 per environment and variant, then the excluded trials; with paper
    rows, the comparison with the paper's Table 1 comes first."""
    base = report.baseline
    lines = ["# Results report", ""]
    if report.paper_rows:
        lines += ["## Against the paper's Table 1", "", *render_paper_markdown(report.paper_rows),
                  "", "## All rows", ""]
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
        "environment took to the budget.", "",
        f"| env | budget (M steps) | variant | seeds | avg return | avg vs {base} | final return "
        f"| final vs {base} | steps to {base} final (M) | time to {base} final | env steps/s "
        "| return at T | T |",
        "|" + " --- |" * 13,
    ]
    envs_with_base = {r.env for r in report.rows if r.variant == base}
    for row in report.rows:
        seeds = f"{row.seeds}" + (f" ({row.excluded} excluded)" if row.excluded else "")
        avg_pct, final_pct, steps, time = _comparison_cells(row, row.env in envs_with_base, base)
        lines.append(f"| {row.env} | {row.budget / 1e6:.3g} | {row.variant} | {seeds} "
                     f"| {format_return(row.avg, row.avg_se)} | {avg_pct} "
                     f"| {format_return(row.final, row.final_se)} | {final_pct} | {steps} | {time} "
                     f"| {row.env_steps_per_s:,.0f} | {format_return(row.return_at_time, row.return_at_time_se)} "
                     f"| {_fmt_duration(row.time_budget_s)} |")
    lines += _target_lines([row for row in report.rows if math.isfinite(row.target)])
    lines += _stability_lines(report.stability)
    lines += _mean_gain_lines(report.mean_gains, {r.variant for r in report.rows})
    if report.flags:
        lines += ["", "## Excluded trials", ""]
        lines += [f"- {f.trial.env} / {f.trial.variant} / seed {f.trial.seed}: {f.reason} "
                  f"(`{f.trial.path}`)" for f in report.flags]
    return "\n".join(lines) + "\n"


def _target_lines(rows: Sequence[Row]) -> list[str]:
    """The rows' steps and training time to their environment's target return (``--target``)."""
    if not rows:
        return []
    lines = ["", "## Steps and time to a target return", "",
             "Where each variant's mean curve first reaches the target.", "",
             "| env | variant | target return | steps to target (M) | time to target |",
             "|" + " --- |" * 5]
    for row in rows:
        cells = [row.env, row.variant, f"{row.target:,.0f}",
                 *_steps_and_time_cells(row.steps_to_target, row.time_to_target_s)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _stability_lines(rows: Sequence[Stability]) -> list[str]:
    """The TV of the last updates against its target, and the return's late change."""
    if not rows:
        return []
    lines = ["", "## Update size and late change", "",
             "*TV, last tenth* is the total variation distance per policy update averaged over the "
             "last tenth of training, *vs target* its excess over the variant's target (eps / 2); "
             "*peak tenth* is the tenth of training where the mean return curve is highest, *late "
             "change* each seed's return over the last tenth minus over the tenth where the other "
             "seeds' mean peaks, averaged over seeds (below zero: the return declined from its "
             "peak; noise alone averages zero). Training runs from the first env step where every "
             "curve has a return to the budget. ± is one standard error over seeds.",
             "", "| env | variant | seeds | TV, last tenth | TV target | vs target | peak tenth (M steps) "
             "| late change |", "|" + " --- |" * 8]
    for row in rows:
        cells = [row.env, row.variant, str(row.seeds), format_return(row.tv_last, row.tv_last_se),
                 format_return(row.tv_target, math.nan),
                 _fmt_pct(stats.improvement_pct(row.tv_last, row.tv_target)),
                 f"{row.peak_start / 1e6:.2g}–{row.peak_end / 1e6:.2g}",
                 format_return(row.late_change, row.late_change_se)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _mean_gain_lines(gains: Sequence[MeanGain], variants: Iterable[str]) -> list[str]:
    """Each of ``variants``' mean % gain in average return over each other, across
    environments; nothing when no pair shares two environments."""
    if not gains:
        return []
    variants = sorted(variants, key=_variant_key)
    by_pair = {(g.variant, g.versus): g for g in gains}
    most = max(g.envs for g in gains)

    def cell(variant: str, versus: str) -> str:
        if variant == versus:
            return "—"
        if (gain := by_pair.get((variant, versus))) is None:
            return "n/a"
        envs = "" if gain.envs == most else f", {gain.envs} envs"
        return f"{_fmt_pct(gain.mean_pct)} ({gain.above}↑ {gain.below}↓{envs})"

    return ["", "## Across environments", "",
            "Each cell is the mean over environments of the % by which the row's *avg return* "
            "exceeds the column's (the paper's \"on average, GePPO improves average performance "
            f"throughout training by 31%\"), over the {most} environments both have rows in unless "
            "the cell says fewer; ↑ and ↓ count the environments where the row is above or below "
            "by more than one standard error of the difference (the rest: no winner). Cells need "
            "two environments (n/a: fewer).", "",
            "| variant | " + " | ".join(f"vs {v}" for v in variants) + " |",
            "|" + " --- |" * (len(variants) + 1),
            *("| " + " | ".join([v, *(cell(v, w) for w in variants)]) + " |" for v in variants)]


def write_csv(rows: Sequence[Row | PaperRow | TrialRow | Stability | MeanGain], row_type: type,
              path: Path) -> None:
    """One line per row of ``row_type`` (``table.csv``: Row, ``paper.csv``: PaperRow,
    ``trials.csv``: TrialRow, ``stability.csv``: Stability, ``mean_gains.csv``: MeanGain): raw
    numbers, empty cells for NaN."""
    fields = [f.name for f in dataclasses.fields(row_type)]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v
                             for k, v in dataclasses.asdict(row).items()})


def write_report(report: Report, out: Path) -> list[Path]:
    """Write the table and figures into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(render_markdown(report))
    write_csv(report.rows, Row, out / "table.csv")
    write_csv(report.trial_rows, TrialRow, out / "trials.csv")
    write_csv(report.stability, Stability, out / "stability.csv")
    written = [out / "table.md", out / "table.csv", out / "trials.csv", out / "stability.csv",
               out / "returns.png"]
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
        logger.info("no environment's runs share a window of training time: "
                    "returns_vs_time.png not written")
    if report.tv_panels:
        tv_figure(report.tv_panels).savefig(out / "tv.png", dpi=120)
        written.append(out / "tv.png")
    else:
        logger.info("no trial logged %s: tv.png not written", TV_KEY)
    return written


# ----------------------------------------------------------------------------- command line


def _group_by(text: str) -> str:
    """Parse ``variant``, ``experiment`` or ``SETTING,SETTING,...``."""
    if not _setting_names(text) or (text not in BASE_LABELS
                                    and set(_setting_names(text)) & set(BASE_LABELS)):
        raise argparse.ArgumentTypeError(f"expected {' or '.join(BASE_LABELS)} alone, or "
                                         f"setting names such as lr,num_epochs; got {text!r}")
    return text.strip()


def _pool(text: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``LABEL=VARIANT,VARIANT,...`` (commas inside brackets, as in a label's
    ``fcnet_hiddens=[64,64]``, do not split)."""
    def members(value: str) -> tuple[str, ...]:
        names = tuple(m.strip() for m in re.split(r",(?![^\[]*\])", value) if m.strip())
        if not names:
            raise ValueError(value)
        return names

    return _name_and_value(text, "LABEL=VARIANT,VARIANT,...", members)


def _target(text: str) -> tuple[str, float]:
    """Parse ``ENV=RETURN``."""
    def finite(value: str) -> float:
        if not math.isfinite(number := float(value)):
            raise ValueError(value)
        return number

    return _name_and_value(text, "ENV=RETURN (e.g. Hopper-v5=2500)", finite)


def _name_and_value(text: str, form: str, parse: Callable[[str], Any]) -> tuple[str, Any]:
    """``NAME=VALUE`` as ``(NAME, parse(VALUE))``, split at the first "=", or an argparse error
    that shows ``form``."""
    name, _, value = text.partition("=")
    try:
        if not name.strip():
            raise ValueError(name)
        return name.strip(), parse(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}") from None


def _env_steps(text: str) -> int:
    """Parse an env-step count such as ``300000`` or ``3e5``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of env steps: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the budget must be positive: {text!r}")
    return int(value)


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``report`` command's arguments."""
    parser.add_argument("paths", nargs="+", type=Path, metavar="RESULTS_DIR",
                        help="Tune results, experiment or trial directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("report"),
                        help="output folder for table.md, table.csv, trials.csv, stability.csv, "
                             "mean_gains.csv, returns.png, tv.png (default: ./report)")
    parser.add_argument("--budget", type=_env_steps, default=None,
                        help="env steps at which 'final' is read, for every environment; trials "
                             "that end before it are flagged and excluded (default: per "
                             "environment, the largest budget every complete trial reaches)")
    parser.add_argument("--baseline", default="PPO",
                        help="variant the others are compared with (default: PPO, i.e. GePPO "
                             "with sample_reuse=False; 'RLlib PPO' compares with RLlib's PPO)")
    parser.add_argument("--group-by", type=_group_by, default="variant",
                        metavar="variant|experiment|SETTING,...",
                        help="label trials by algorithm variant (default) or by the YAML "
                             "experiment they ran in, each followed by every setting their "
                             "trials differ in besides the seed (e.g. 'GePPO lr=0.001'); or by "
                             "variant and the named settings alone (e.g. lr,num_epochs; "
                             "model_config covers its entries), pooling trials that differ in "
                             "others")
    parser.add_argument("--pool", type=_pool, action="append", default=[],
                        metavar="LABEL=VARIANT,...",
                        help="report these variants as one, labelled LABEL, their trials "
                             "counted together (repeatable); --baseline may name a LABEL")
    parser.add_argument("--target", type=_target, action="append", default=[],
                        metavar="ENV=RETURN",
                        help="a return to reach in ENV (repeatable): table.md adds where each "
                             "variant's mean curve first reaches it, in env steps and training time")
    parser.add_argument("--paper", action="store_true",
                        help="put the paper's Table 1 (MuJoCo v3, 1M env steps, 5 seeds) beside "
                             "our GePPO and PPO rows of its six tasks, with the differences in %%; "
                             "needs the default baseline PPO (use with --budget 1e6)")
    parser.add_argument("--return-key", default=RETURN_KEY,
                        help="'/'-separated result key of the return curve "
                             f"(default: {RETURN_KEY}; {EVALUATION_RETURN_KEY} "
                             "reads the evaluation EnvRunners' returns)")


def run_report(args: argparse.Namespace) -> int:
    """Build and write the report; returns the process exit code (2: unusable input)."""
    try:
        trials = pool_variants(load_trials(args.paths, args.return_key, args.group_by),
                               args.pool)
        report = build_report(trials, args.budget, args.baseline, args.return_key, args.paper,
                              dict(args.target))
    except ReportError as err:
        logger.error("%s", err)
        return EXIT_BAD_INPUT
    written = write_report(report, args.out)
    print(render_markdown(report))
    print("Wrote " + ", ".join(str(p) for p in written))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rllib_geppo.report.main``."""
    parser = argparse.ArgumentParser(prog="rllib-geppo report",
                                     description=__doc__.split("\n\n")[0])
    add_report_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    return run_report(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
