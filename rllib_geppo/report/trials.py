"""One Tune trial folder read into a :class:`Trial`: environment, variant, seed, curves, settings.

Finds the trial folders (``params.json`` beside ``result.json``, or a trial record's
``result.json.gz``: :mod:`rllib_geppo.records.trial_record`) under the report's paths and
reads each: its iterations (a torn last line skipped, iterations repeated after a restore
replaced), its config, the paper's name for its algorithm variant, and why it cannot be averaged
(a crash, no results), recorded on the trial rather than raised. Which trials form each row is
:mod:`rllib_geppo.report.grouping`'s to decide.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rllib_geppo.core.networks import mlp_config
from rllib_geppo.records.result_keys import (
    EVALUATION_PREFIX,
    OLD_STACK_PREFIX,
    RETURN_KEY,
    STEPS_KEY,
    TIME_KEY,
    TV_KEY,
    TV_TARGET_KEY,
    lookup,
)
from rllib_geppo.records.trial_record import (
    experiment_of,
    is_record,
    read_rows,
    read_tune_record,
    trial_folders,
)
from rllib_geppo.report import settings as report_settings
from rllib_geppo.report.settings import Settings
from rllib_geppo.report.stats import Array, Run

logger = logging.getLogger(__name__)


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
    algorithm: str = "?"  # the trainable's name (GePPO, PPO, SB3PPO, ...)
    status: str | None = None  # Tune's saved status (TERMINATED: it finished); None: not saved


def find_trial_dirs(paths: Sequence[Path]) -> list[Path]:
    """Tune trial folders and trial records (holding ``params.json``) at or below each path, each
    trial once.

    Raises:
        ReportError: a path is missing or holds no trial folder.
    """
    # An ordered set: a folder given twice counts once, and so does a trial and its record (a
    # folder of the same name; records hold finished trials alone): the first found is kept.
    found: dict[Path, None] = {}
    names: dict[bool, set[str]] = {True: set(), False: set()}  # by is-a-record
    for root in paths:
        if not root.is_dir():
            raise ReportError(
                f"{root}: no such directory (expected a Tune results or experiment directory, or "
                "reports' table.csv files)"
            )
        trials = trial_folders(root)
        if not trials:
            raise ReportError(
                f"{root}: no Tune trial folders found (expected folders holding "
                "params.json and result.json, as ray.tune.Tuner writes them, or trial records)"
            )
        for trial in trials:
            record = is_record(trial)
            if trial.name not in names[not record]:
                found[trial.resolve()] = None
                names[record].add(trial.name)
    return list(found)


@cache
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


def _problem(
    trial_dir: Path,
    status: str | None,
    params: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    returns: Array,
    return_key: str,
) -> str | None:
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
        return "no results (result.json or a record's result.json.gz missing or empty)"
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
    """ "GePPO" for a config holding GePPO's own settings: a copied folder has no Tune record,
    and ``rllib train file`` names trial folders after their experiment, not the algorithm."""
    return "GePPO" if "sample_reuse" in config else None


def load_trial(trial_dir: Path, return_key: str = RETURN_KEY, group_by: str = "variant") -> Trial:
    """Read one trial folder; problems are recorded on the trial rather than raised.

    ``group_by="experiment"`` labels the trial with its experiment's name (the first part of
    the folder name that ``rllib train file`` gives), for ablations of one algorithm.
    """
    record = _experiment_state(trial_dir.parent).get(trial_dir.name) or read_tune_record(trial_dir)
    # Folder names are "<trainable or experiment>_<id>_...": the fallback for copied folders.
    name_parts = trial_dir.name.split("_") + ["?"]
    params = _read_params(trial_dir)
    results = read_rows(trial_dir)
    returns = _series(results, return_key)
    if return_key.startswith(EVALUATION_PREFIX):
        returns = _fresh(returns)
    run = Run(_series(results, STEPS_KEY), returns, _series(results, TIME_KEY))
    # params.json holds only the settings a run file set; the results carry the whole config.
    logged = results[0].get("config") if results else None
    config = {**logged, **params} if isinstance(logged, dict) else params
    algorithm = record.get("trainable_name") or _algorithm(config) or name_parts[0]
    variant = (
        experiment_of(trial_dir.name) or name_parts[0]
        if group_by == "experiment"
        else variant_name(algorithm, config, overlapped=_updates_lagged(results))
    )
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
        algorithm=algorithm,
        status=record.get("status"),
    )
