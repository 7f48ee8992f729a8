"""One Tune trial folder read into a :class:`Trial`: environment, variant, seed, curves, settings.

Finds the trial folders (``params.json`` beside ``result.json``, or a trial record's
``result.json.gz``: :mod:`rllib_geppo.records.trial_record`) under the report's paths and
reads each: its iterations as curves on env steps (a torn last line skipped, iterations repeated
after a restore replaced), its config, the paper's name for its algorithm variant, and why it
cannot be averaged (a crash, no results), recorded on the trial rather than raised.

A trial's :class:`Settings` are its config flattened to ``"key/subkey" -> value text``. Trials of
one environment and variant that differ in any setting other than the seed are different
experiments, never seeds of one: :mod:`rllib_geppo.report.grouping` labels them by the settings
they differ in ("GePPO lr=0.001").
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from rllib_geppo import private_ray
from rllib_geppo.core.networks import mlp_config
from rllib_geppo.records.result_keys import (
    EVALUATION_PREFIX,
    OLD_STACK_PREFIX,
    RETURN_KEY,
    STEPS_KEY,
    TIME_KEY,
    TV_KEY,
    TV_TARGET_KEY,
)
from rllib_geppo.records.trial_record import (
    experiment_of,
    is_record,
    read_params,
    read_rows,
    read_tune_record,
    trial_folders,
)

logger = logging.getLogger(__name__)

#: Keys that do not change what a trial learns: the seed (trials that differ only in it are the
#: seeds of one row), the environment (the report's rows are per environment already) and
#: logging. Keys starting with "__" are Tune's own (``__trial_index__``, ``__stdout_file__``).
IGNORED = frozenset({"seed", "env", "log_level", "logger_config", "log_sys_usage"})
#: The value of a setting whose parent mapping the trial recorded without it (its default).
DEFAULT = "default"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function's repr differs per process


class ReportError(Exception):
    """Input that leaves nothing to report; the message names the folder and what was expected."""


@dataclass(frozen=True)
class Settings:
    """One trial's settings: ``values`` maps ``"key/subkey"`` to the value's text; ``recorded``
    holds the top-level keys its config has (results written before a setting existed lack it,
    which is no difference)."""

    values: Mapping[str, str]
    recorded: frozenset[str]

    def get(self, key: str) -> str | None:
        """The setting's text, :data:`DEFAULT` where its mapping lacks it, None: not recorded."""
        if key.split("/", 1)[0] not in self.recorded:
            return None
        return self.values.get(key, DEFAULT)


@dataclass(frozen=True, eq=False)
class Trial:
    """One Tune trial as read from disk."""

    path: Path
    env: str
    variant: str
    seed: int | None
    #: One row per iteration, indexed by env steps sampled (lifetime): ``return``, ``time_s``
    #: (training wall time, lifetime, Tune's time_total_s), ``tv`` and ``tv_target`` (per
    #: policy update); NaN where not reported. Empty: no results.
    curves: pd.DataFrame
    problem: str | None  # why it cannot be averaged in whatever the budget (crash, no results)
    settings: Settings = Settings({}, frozenset())  # its config, flattened
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
def tune_trial_records(experiment_dir: Path) -> Mapping[str, Mapping[str, Any]]:
    """Trial folder name -> Tune's saved record of the trial (``trainable_name``, ``status``), from
    the newest ``experiment_state-*.json``: the only place that names the trainable of a trial of
    ``rllib train file`` (whose folder is named after its experiment). Empty when absent or
    unreadable (copied folders)."""
    state = private_ray.experiment_state(experiment_dir)
    if state is None:
        return {}
    try:
        return {trial["relative_logdir"]: trial for trial in private_ray.trial_records(state)}
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
        logger.warning("%s: unreadable experiment state (%s); using folder names", state, err)
        return {}


#: This package's algorithms, and what each is without sample reuse.
ON_POLICY = {"GePPO": "PPO", "GeTRPO": "TRPO", "GeVMPO": "V-MPO"}


def variant_name(algorithm: str, params: Mapping[str, Any], *, overlapped: bool = False) -> str:
    """The paper's name for a trial's algorithm variant; ``overlapped``: whether its updates ran
    with a sampling lag (read from the results, since ``overlap_sampling="auto"`` depends on
    other settings)."""
    if algorithm in ON_POLICY:
        if params.get("sample_reuse", True):
            return f"{algorithm} overlapped" if overlapped else algorithm
        if algorithm == "GePPO" and params.get("adaptive_lr", False):
            return "PPO-Adapt"
        return ON_POLICY[algorithm]
    return {"PPO": "RLlib PPO", "SB3PPO": "SB3 PPO"}.get(algorithm, algorithm)


def read_curves(rows: Sequence[Mapping[str, Any]], return_key: str = RETURN_KEY) -> tuple[pd.DataFrame, bool]:
    """A trial's :attr:`Trial.curves` from its result rows (nested keys joined by "/"), and
    whether any trained module's update ran with a sampling lag (overlapped sampling: each module
    reports its own ``learners/<module id>/sample_lag``)."""
    flat = pd.json_normalize([{k: v for k, v in row.items() if k != "config"} for row in rows], sep="/")

    def column(*keys: str) -> pd.Series:
        """The first of ``keys`` that the trial reported a number for, or NaN."""
        for key in keys:
            if key in flat and (values := pd.to_numeric(flat[key], errors="coerce")).notna().any():
                return values.astype(float)
        return pd.Series(float("nan"), index=flat.index)

    returns = column(return_key)
    if return_key.startswith(EVALUATION_PREFIX):
        # RLlib reports an evaluation's results once more in the iteration after it: no new
        # measurement (two evaluations never return the same float).
        returns = returns.mask(returns.eq(returns.shift()))
    curves = pd.DataFrame(
        {
            "return": returns,
            "time_s": column(TIME_KEY),
            "tv": column(TV_KEY, OLD_STACK_PREFIX + "tv"),
            "tv_target": column(TV_TARGET_KEY, OLD_STACK_PREFIX + "tv_target"),
        }
    ).set_index(column(STEPS_KEY).rename("env steps"))
    lags = flat.filter(regex=r"^learners/[^/]+/sample_lag$").apply(pd.to_numeric, errors="coerce")
    return curves[curves.index.notna()], bool((lags > 0).any(axis=None))


def _problem(
    trial_dir: Path, status: str | None, params: Mapping[str, Any], curves: pd.DataFrame, return_key: str
) -> str | None:
    """Why the trial cannot be averaged in whatever the budget, or None. Tune's saved status wins
    over a leftover ``error.txt``, which stays behind when a retry (``max_failures``) succeeds."""
    if status == "ERROR":
        return "crashed (Tune status ERROR)"
    if status is None and (trial_dir / "error.txt").is_file():
        return "crashed (error.txt)"
    if not params:
        return "params.json unreadable"
    if curves.empty:
        return "no results (result.json or a record's result.json.gz missing or empty)"
    if curves["return"].isna().all():
        return f"no finite {return_key} reported"
    return None


def load_trial(trial_dir: Path, return_key: str = RETURN_KEY, group_by: str = "variant") -> Trial:
    """Read one trial folder; problems are recorded on the trial rather than raised.

    ``group_by="experiment"`` labels the trial with its experiment's name (the first part of
    the folder name that ``rllib train file`` gives), for ablations of one algorithm.
    """
    record = tune_trial_records(trial_dir.parent).get(trial_dir.name) or read_tune_record(trial_dir)
    # Folder names are "<trainable or experiment>_<id>_...": the fallback for copied folders.
    name_parts = trial_dir.name.split("_") + ["?"]
    params = read_params(trial_dir) or {}
    rows = read_rows(trial_dir)
    curves, overlapped = read_curves(rows, return_key)
    # params.json holds only the settings a run file set; the results carry the whole config.
    logged = rows[0].get("config") if rows else None
    logged = logged if isinstance(logged, dict) else {}
    config = {**logged, **params}
    # A config holding GePPO's own settings is GePPO's: a copied folder has no Tune record, and
    # `rllib train file` names trial folders after their experiment, not the algorithm.
    algorithm = record.get("trainable_name") or ("GePPO" if "sample_reuse" in config else name_parts[0])
    variant = (
        experiment_of(trial_dir.name) or name_parts[0]
        if group_by == "experiment"
        else variant_name(algorithm, config, overlapped=overlapped)
    )
    settings = settings_of(logged, params)
    model_config = params.get("_model_config", params.get("model_config", config.get("_model_config")))
    if algorithm == "GePPO" and isinstance(model_config or {}, Mapping):
        # One label per network built, whether a run spelled a default out or left it unset.
        settings = replaced(settings, "model_config", mlp_config(model_config))
    return Trial(
        path=trial_dir,
        env=str(params.get("env") or name_parts[1]),
        variant=variant,
        seed=params.get("seed"),
        curves=curves,
        problem=_problem(trial_dir, record.get("status"), params, curves, return_key),
        settings=settings,
        algorithm=algorithm,
        status=record.get("status"),
    )


def settings_of(*configs: Mapping[str, Any]) -> Settings:
    """The settings of a trial whose config is ``configs`` merged, later ones winning (the config
    logged with the results, then ``params.json``). RLlib's private spelling of a public setting
    (``_model_config``) counts as the setting."""
    values: dict[str, str] = {}
    recorded: set[str] = set()
    for config in configs:
        for key, value in config.items():
            name = key[1:] if key.startswith("_") and not key.startswith("__") else key
            if key.startswith("__") or name in IGNORED:
                continue
            recorded.add(name)
            values.update(_flatten(name, value))
    return Settings(values, frozenset(recorded))


def replaced(settings: Settings, key: str, entries: Mapping[str, Any]) -> Settings:
    """``settings`` with the mapping ``key``'s ``entries`` set (its other entries kept): for a
    mapping whose unset entries have defaults that tell trials apart just as set ones do."""
    return Settings({**settings.values, **dict(_flatten(key, dict(entries)))}, settings.recorded | {key})


def _flatten(key: str, value: Any) -> Iterable[tuple[str, str]]:
    """``("key/subkey", text)`` for each leaf; a value as labels show it: strings bare, numbers
    and lists as JSON (1.0 as 1)."""
    if isinstance(value, Mapping):
        for sub, item in value.items():
            yield from _flatten(f"{key}/{sub}", item)
        return
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    yield key, _ADDRESS.sub("", value)


def varied(settings: Sequence[Settings]) -> list[str]:
    """The settings that take more than one value among the trials that record them, sorted."""
    keys = set().union(*(s.values for s in settings))
    return sorted(key for key in keys if len({s.get(key) for s in settings} - {None}) > 1)


def label(base: str, settings: Settings, keys: Sequence[str]) -> str:
    """``base`` followed by ``key=value`` for each of ``keys`` ("?" where not recorded)."""
    parts = [f"{key}={value if (value := settings.get(key)) is not None else '?'}" for key in keys]
    return " ".join([base, *parts])
