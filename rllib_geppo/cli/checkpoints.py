"""Damaged checkpoints on `--resume`: found before Ray starts, skipped on request.

Tune resumes each unfinished trial from its newest checkpoint. If a file of that checkpoint is
truncated or corrupt, the restore fails inside the trial with an `UnpicklingError` or `EOFError`
that names no file. :func:`check_run_checkpoints` reads every file of those checkpoints first
and names the damaged one, the checkpoint and the previous intact checkpoint; with
`--skip-damaged-checkpoints`, :class:`ResumeFromIntact` makes Tune restore those trials from
the previous intact checkpoint instead (with that checkpoint's own iteration and metrics).
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from rllib_geppo.cli.experiment_file import UserError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Reading checkpoints


def damaged_file(checkpoint: Path) -> tuple[Path, str] | None:
    """The first file of `checkpoint` that cannot be read whole, with the reason, else None.

    Pickle files are unpickled (what RLlib's restore does with them), JSON files parsed, and
    every other file read to its end.
    """
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    if not files:
        return checkpoint, "the checkpoint folder is empty"
    for path in files:
        try:
            with path.open("rb") as f:
                if path.suffix == ".pkl":
                    pickle.load(f)
                elif path.suffix == ".json":
                    json.load(f)
                else:
                    f.read()
        except Exception as e:  # whatever a damaged file makes the reader raise
            return path, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return None


def checkpoints_of(trial_dir: Path) -> list[Path]:
    """The trial's `checkpoint_NNNNNN` folders, oldest first."""
    found = [p for p in trial_dir.glob("checkpoint_*") if p.is_dir() and p.name[11:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[11:]))


def unfinished_trial_dirs(run_dir: Path) -> list[Path]:
    """Folders of the trials that `--resume` restores (not TERMINATED), from Tune's newest
    experiment state; all trial folders if that state cannot be read."""
    states = sorted(run_dir.glob("experiment_state-*.json"))
    try:
        trials = [json.loads(t[0]) for t in json.loads(states[-1].read_text())["trial_data"]]
        return [run_dir / t["relative_logdir"] for t in trials if t["status"] != "TERMINATED"]
    except (IndexError, KeyError, TypeError, ValueError, OSError):
        return sorted(p.parent for p in run_dir.glob("*/checkpoint_*"))


# --------------------------------------------------------------------------------------------
# The check before Ray starts


def check_run_checkpoints(run_dir: str, resume_command: str, skip_damaged: bool) -> dict[str, Path]:
    """Checks the newest checkpoint of each trial that `--resume` will restore.

    Returns trial folder name -> previous intact checkpoint, for the damaged ones that
    `skip_damaged` allows to skip (empty if none is damaged).

    Raises:
        UserError: a newest checkpoint is damaged and `skip_damaged` is off (the message names
            the checkpoint, the file and the command that continues from the previous intact
            checkpoint), or no intact checkpoint is left.
    """
    skips: dict[str, Path] = {}
    if "://" in run_dir:
        return skips  # cloud storage: Tune reads it
    for trial_dir in unfinished_trial_dirs(Path(run_dir)):
        checkpoints = checkpoints_of(trial_dir)
        if not checkpoints:
            continue
        damage = damaged_file(checkpoints[-1])
        if damage is None:
            continue
        path, reason = damage
        intact = next((c for c in reversed(checkpoints[:-1]) if damaged_file(c) is None), None)
        what = (f"checkpoint {checkpoints[-1]} is damaged: {path.name} ({path}) cannot be read "
                f"({reason}).")
        if intact is None:
            raise UserError(f"{what} The trial has no earlier intact checkpoint: start a new run "
                            "(leave out --resume, or pass another --name).")
        if not skip_damaged:
            raise UserError(f"{what} The previous intact checkpoint is {intact.name}; continue "
                            f"from it with: {resume_command} --skip-damaged-checkpoints")
        log.warning("%s Restoring %s from %s.", what, trial_dir.name, intact.name)
        skips[trial_dir.name] = intact
    return skips


# --------------------------------------------------------------------------------------------
# Resuming from the intact checkpoints


class ResumeFromIntact(Callback):
    """Before Tune starts any trial, registers each listed trial's previous intact checkpoint
    as its newest, with the metrics Tune recorded for it: the trial restores from it (its
    iteration, steps and state) and goes on; the damaged checkpoint stays on disk."""

    def __init__(self, intact: Mapping[str, Path]):
        self.intact = dict(intact)  # trial folder name -> checkpoint folder

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        for trial in trials:
            checkpoint = self.intact.pop(Path(trial.path).name, None)
            if checkpoint is None:
                continue
            results = trial.run_metadata.checkpoint_manager.best_checkpoint_results
            by_name = {Path(r.checkpoint.path).name: r for r in results}
            if checkpoint.name not in by_name:
                raise UserError(f"{checkpoint}: Tune has no record of this checkpoint (deleted "
                                "by num_to_keep?); start a new run instead.")
            trial.on_checkpoint(by_name[checkpoint.name])
