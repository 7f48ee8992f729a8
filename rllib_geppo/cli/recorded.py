"""``--skip-recorded DIR``: run only the trials of a file that no finished trial under DIR ran.

A study longer than one machine's life goes on from what it kept: the trial records that
``rllib-geppo report --keep-trials DIR`` writes (:mod:`rllib_geppo.records.trial_record`), or
trial folders of earlier runs. A recorded trial counts as run when it is of the same experiment
(the name Tune gave it), has the config Tune would be given (its ``params.json``), and its last
row meets one of the experiment's stop criteria. Each experiment keeps its grid over the trials
left, so a new run names, seeds and resumes them as the file would (``--resume`` continues the
new run).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import reduce
from operator import getitem
from pathlib import Path
from typing import Any

from ray.tune.search.variant_generator import assign_value, parse_spec_vars

from rllib_geppo.cli.experiment_file import ExperimentSpec, UserError, resolve_trials, trainable, tune_config
from rllib_geppo.records.result_keys import lookup
from rllib_geppo.records.trial_record import experiment_of, last_row, read_params, trial_folders

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecordedTrial:
    """A trial found under a --skip-recorded folder: its folder, experiment, config, last row."""

    folder: Path
    experiment: str
    params: dict[str, Any]
    last: dict[str, Any]


def recorded_trials(folders: Sequence[Path]) -> list[RecordedTrial]:
    """The trials of ``rllib train file`` runs (folders or records) under ``folders``, each
    once (a trial and its record share a name).

    Raises UserError for a folder that is missing; warns for one that holds no such trial.
    """
    found: dict[str, RecordedTrial] = {}
    for folder in folders:
        if not folder.is_dir():
            raise UserError(
                f"--skip-recorded {folder}: no such folder (expected trial records or a run's folder)."
            )
        before = len(found)
        for trial_dir in trial_folders(folder):
            experiment = experiment_of(trial_dir.name)
            if experiment is None or trial_dir.name in found:
                continue
            params = read_params(trial_dir)
            if params is not None and (last := last_row(trial_dir)):
                found[trial_dir.name] = RecordedTrial(trial_dir, experiment, params, last)
        if len(found) == before:
            log.warning(
                "--skip-recorded %s: no trial records or trial folders of rllib train file there; "
                "it skips nothing.",
                folder,
            )
    return list(found.values())


def without_recorded(
    specs: Sequence[ExperimentSpec], recorded: Sequence[RecordedTrial]
) -> list[ExperimentSpec]:
    """``specs`` less every trial that a recorded trial ran (module docstring); an experiment
    with none left is dropped. Raises UserError where the trials left of an experiment are no
    grid, so that no run of the file's form holds exactly them."""
    left_specs = []
    for spec in specs:
        run = trainable(spec.run, spec.where("run"))
        trials, unused = resolve_trials(spec), [r for r in recorded if r.experiment == spec.name]
        left = []
        for trial in trials:  # each record stands for one trial: num_samples repeats configs
            given = tune_config(run, trial)
            record = next((r for r in unused if _same_config(r.params, given) and _finished(spec, r)), None)
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


def _finished(spec: ExperimentSpec, record: RecordedTrial) -> bool:
    """Whether the record's last row meets one of the experiment's stop criteria; where the row
    holds none of their keys (a record keeps the usual ones), whether Tune marked it done."""
    values = {key: lookup(record.last, key) for key in spec.stop}
    if any(math.isfinite(v) for v in values.values()):
        return any(values[key] >= stop for key, stop in spec.stop.items() if math.isfinite(values[key]))
    log.warning(
        "%s: its last row holds none of the stop criteria %s; it counts as run because Tune marked it done",
        record.folder,
        ", ".join(spec.stop),
    )
    return bool(record.last.get("done"))


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
    grids = [path for path, _ in parse_spec_vars(spec.config)[2]]  # Tune's grid searches, by path
    combos = Counter(tuple(json.dumps(reduce(getitem, p, t), sort_keys=True) for p in grids) for t in trials)
    values = [list(dict.fromkeys(c[i] for c in combos)) for i in range(len(grids))]
    repeats = set(combos.values())
    if len(repeats) != 1 or len(combos) != math.prod(map(len, values)):
        listing = "; ".join(
            (", ".join(f"{'.'.join(map(str, p))}={v}" for p, v in zip(grids, combo)) or "(no grid)")
            + f" x{count}"
            for combo, count in combos.items()
        )
        raise UserError(
            f"{spec.where()}: the trials left after --skip-recorded ({listing}) are no grid of "
            f"one experiment. Run each group as its own run, e.g. -e {spec.name} -c env=<value> "
            "--skip-recorded <dir> --name <its own name>."
        )
    cut = copy.deepcopy(spec)
    for path, kept in zip(grids, values):
        assign_value(cut.config, path, {"grid_search": [json.loads(v) for v in kept]})
    cut.num_samples = repeats.pop()
    return cut
