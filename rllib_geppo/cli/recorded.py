"""``--skip-recorded DIR``: run only the trials of a file that no finished trial under DIR ran.

A study longer than one machine's life goes on from what it kept: the trial records that
``rllib-geppo report --keep-trials DIR`` writes (:mod:`rllib_geppo.records.trial_record`), or
trial folders of earlier runs. A recorded trial counts as run when it is of the same experiment
(the name Tune gave it), has the same config (its ``params.json``) and its last row meets one of
the experiment's stop criteria. Each experiment keeps its grid over the trials left, so a new
run names, seeds and resumes them as the file would (``--resume`` continues the new run).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import ExperimentSpec, experiment_of, resolve_trials
from rllib_geppo.cli.trainables import to_algorithm_config
from rllib_geppo.records.result_keys import lookup
from rllib_geppo.records.trial_record import PARAMS_FILE, read_rows

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecordedTrial:
    """A trial found under a --skip-recorded folder: its experiment, config and last row."""

    experiment: str
    params: dict[str, Any]
    last: dict[str, Any]


def recorded_trials(folders: Sequence[Path]) -> list[RecordedTrial]:
    """The trials of ``rllib train file`` runs (folders or records) under ``folders``.

    Raises UserError for a folder that is missing.
    """
    found: dict[str, RecordedTrial] = {}  # by folder name: a trial and its record count once
    for folder in folders:
        if not folder.is_dir():
            raise UserError(
                f"--skip-recorded {folder}: no such folder (expected trial records or a run's folder)."
            )
        for params in sorted(folder.rglob(PARAMS_FILE)):
            trial_dir = params.parent
            experiment = experiment_of(trial_dir.name)
            if experiment is None or trial_dir.name in found:
                continue
            rows = read_rows(trial_dir)
            try:
                config = json.loads(params.read_text())
            except (OSError, ValueError):
                continue
            if rows and isinstance(config, dict):
                found[trial_dir.name] = RecordedTrial(experiment, config, rows[-1])
    return list(found.values())


def without_recorded(
    specs: Sequence[ExperimentSpec], recorded: Sequence[RecordedTrial]
) -> list[ExperimentSpec]:
    """``specs`` less every trial that a recorded trial ran (module docstring); an experiment
    with none left is dropped. Raises UserError where the trials left of an experiment are no
    grid, so that no run of the file's form holds exactly them."""
    left_specs = []
    for spec in specs:
        trials, unused = resolve_trials(spec), list(recorded)
        left = []
        for trial in trials:  # each record stands for one trial: num_samples repeats configs
            record = next((r for r in unused if _ran(spec, trial, r)), None)
            if record is None:
                left.append(trial)
            else:
                unused.remove(record)
        if len(left) < len(trials):
            log.info(
                "%s: %d of %d trial(s) recorded, skipped", spec.name, len(trials) - len(left), len(trials)
            )
        if left:
            left_specs.append(spec if len(left) == len(trials) else _spec_for(spec, left))
    return left_specs


def _ran(spec: ExperimentSpec, trial: Mapping[str, Any], record: RecordedTrial) -> bool:
    return (
        record.experiment == spec.name
        and _same_config(record.params, to_algorithm_config(trial))
        and any(lookup(record.last, key) >= value for key, value in spec.stop.items())
    )


def _same_config(params: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether Tune's ``params.json`` holds ``config``: the same keys, and the same values where
    JSON can hold them (Tune writes a function, such as a connector factory, as its repr)."""
    if params.keys() != config.keys():
        return False
    for key, value in config.items():
        try:
            native = json.loads(json.dumps(value))
        except (TypeError, ValueError):
            continue
        if native != params[key]:
            return False
    return True


def _spec_for(spec: ExperimentSpec, trials: Sequence[dict[str, Any]]) -> ExperimentSpec:
    """``spec`` with each grid search cut to the values of ``trials`` and ``num_samples`` to
    their repeats, when those give exactly ``trials``."""
    grids = list(_grid_paths(spec.config))
    combos = Counter(tuple(json.dumps(_get(t, p), sort_keys=True) for p in grids) for t in trials)
    values = [list(dict.fromkeys(c[i] for c in combos)) for i in range(len(grids))]
    repeats = set(combos.values())
    if len(repeats) != 1 or len(combos) != math.prod(map(len, values)):
        listing = "; ".join(
            ", ".join(f"{'.'.join(p)}={v}" for p, v in zip(grids, combo)) or "(no grid)" for combo in combos
        )
        raise UserError(
            f"{spec.where()}: the trials left after --skip-recorded ({listing}) are no grid of "
            "one experiment. Run them with -e and -c (e.g. -c seed=2), one group at a time."
        )
    cut = copy.deepcopy(spec)
    for path, kept in zip(grids, values):
        _get(cut.config, path[:-1])[path[-1]] = {"grid_search": [json.loads(v) for v in kept]}
    cut.num_samples = repeats.pop()
    return cut


def _grid_paths(config: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The key paths of the grid searches in ``config``, in Tune's order of expansion."""
    for key, value in config.items():
        if isinstance(value, Mapping):
            if "grid_search" in value:
                yield (*prefix, key)
            else:
                yield from _grid_paths(value, (*prefix, key))


def _get(config: Mapping[str, Any], path: Sequence[str]) -> Any:
    return config if not path else _get(config[path[0]], path[1:])
