"""Checkpoints on `--resume`: the newest intact one of each trial, damaged ones found before Ray
starts and skipped on request.

Tune resumes each unfinished trial from its newest checkpoint. If a file of that checkpoint is
truncated or corrupt, the restore fails inside the trial with an `UnpicklingError` or `EOFError`
that names no file. :func:`check_run_checkpoints` checks those checkpoints first, without
unpickling anything (:func:`damaged_file`), and names the damaged file, the checkpoint and the
previous intact checkpoint; with
`--skip-damaged-checkpoints`, :class:`ResumeFromCheckpoints` makes Tune restore those trials from
the previous intact checkpoint instead (with that checkpoint's own iteration and metrics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from rllib_geppo import private_ray
from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.resume import saved_trials
from rllib_geppo.records.checkpoint_manifest import damaged_files, read_manifest

#: Private Ray names this module reads (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = private_ray.TUNE_RUN

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Reading checkpoints


def damaged_file(checkpoint: Path) -> tuple[Path, str] | None:
    """The first file of `checkpoint` that is not as it was saved, with the reason, else None.

    Nothing is unpickled: a pickle runs code as it loads. A GePPO checkpoint is checked against
    the sizes and checksums of its manifest (:mod:`rllib_geppo.records.checkpoint_manifest`); files it
    does not list are never loaded by a restore and are ignored. A checkpoint without a
    manifest (another algorithm's, or GePPO's before 0.9) is checked as far as that goes: its
    JSON files parse and every file reads to its end.
    """
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    if not files:
        return checkpoint, "the checkpoint folder is empty"
    manifest = read_manifest(checkpoint)
    if manifest is not None:
        damaged = damaged_files(checkpoint, manifest)
        return damaged[0] if damaged else None
    for path in files:
        try:
            with path.open("rb") as f:
                if path.suffix == ".json":
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


def unfinished_trial_dirs(run_dir: Path, finished: Collection[str] = ()) -> list[Path]:
    """Folders of the trials that `--resume` restores, from Tune's saved state: not TERMINATED
    there, nor among the `finished` folders (those that finished after it was saved)."""
    return [
        run_dir / t.folder
        for t in saved_trials(run_dir)
        if t.status != "TERMINATED" and t.folder not in finished
    ]


# --------------------------------------------------------------------------------------------
# The check before Ray starts


def check_run_checkpoints(
    run_dir: str, resume_command: str, skip_damaged: bool, finished: Collection[str] = ()
) -> dict[str, Path]:
    """Checks the checkpoints of each trial that `--resume` will restore (not the `finished`
    folders of trials that finished after the run's state was saved).

    Returns trial folder name -> the checkpoint to resume from: the newest intact one on disk
    (Tune's experiment state lags the checkpoints, so after a crash it may name an older one, or
    none), or, where the newest is damaged and `skip_damaged` allows, the previous intact one.

    Raises:
        UserError: a newest checkpoint is damaged and `skip_damaged` is off (the message names
            the checkpoint, the file and the command that continues from the previous intact
            checkpoint), or no intact checkpoint is left.
    """
    resume_from: dict[str, Path] = {}
    if "://" in run_dir:
        return resume_from  # cloud storage: Tune reads it
    for trial_dir in unfinished_trial_dirs(Path(run_dir), finished):
        checkpoints = complete_checkpoints(checkpoints_of(trial_dir))
        if not checkpoints:
            continue
        damage = damaged_file(checkpoints[-1])
        if damage is None:
            resume_from[trial_dir.name] = checkpoints[-1]
            continue
        path, reason = damage
        intact = next((c for c in reversed(checkpoints[:-1]) if damaged_file(c) is None), None)
        what = f"checkpoint {checkpoints[-1]} is damaged: {path.name} ({path}): {reason}."
        if intact is None:
            raise UserError(
                f"{what} The trial has no earlier intact checkpoint: start a new run "
                "(leave out --resume, or pass another --name)."
            )
        if not skip_damaged:
            raise UserError(
                f"{what} The previous intact checkpoint is {intact.name}; continue "
                f"from it with: {resume_command} --skip-damaged-checkpoints"
            )
        log.warning("%s Restoring %s from %s.", what, trial_dir.name, intact.name)
        resume_from[trial_dir.name] = intact
    return resume_from


def complete_checkpoints(checkpoints: list[Path]) -> list[Path]:
    """``checkpoints`` (oldest first) without those whose copy a crash cut short: GePPO writes
    its manifest last, so a folder without one, newer than the trial's first with one, is
    incomplete. Older folders without one are from before 0.9 (or another algorithm's)."""
    has_manifest = [read_manifest(c) is not None for c in checkpoints]
    if not any(has_manifest):
        return checkpoints  # another algorithm's, or GePPO's before 0.9
    first = has_manifest.index(True)
    incomplete = [c for i, c in enumerate(checkpoints) if i > first and not has_manifest[i]]
    for checkpoint in incomplete:
        log.warning("checkpoint %s has no manifest: its copy was cut short; it is skipped.", checkpoint)
    return [c for c in checkpoints if c not in incomplete]


# --------------------------------------------------------------------------------------------
# Resuming from the chosen checkpoints


def newest_checkpoints(run_dir: str, folders: list[str]) -> dict[str, Path]:
    """Each listed trial folder's newest complete checkpoint, where it has one."""
    newest = {}
    for folder in folders:
        checkpoints = complete_checkpoints(checkpoints_of(Path(run_dir, folder)))
        if checkpoints:
            newest[folder] = checkpoints[-1]
    return newest


class ResumeFromCheckpoints(Callback):
    """Before Tune starts any trial, registers each listed trial's chosen checkpoint as its
    newest, with the metrics of the iteration it saved: an unfinished trial restores from it
    (its iteration, steps and state) and goes on; a finished one shows it in the summary.
    Whichever checkpoint a trial restores from, its later checkpoints are numbered after every
    checkpoint folder on disk, so none is overwritten (a damaged one stays for inspection)."""

    def __init__(self, checkpoints: Mapping[str, Path]):
        self.checkpoints = dict(checkpoints)  # trial folder name -> checkpoint folder

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        self._register(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._register(trials)  # a run whose trials had all finished takes no step

    def _register(self, trials: list) -> None:
        for trial in trials:
            checkpoint = self.checkpoints.pop(Path(trial.path).name, None)
            if checkpoint is not None:
                self._use(trial, checkpoint)
                # The index of the newest folder: the trainable adds one before each save.
                trial.storage.current_checkpoint_index = int(checkpoints_of(checkpoint.parent)[-1].name[11:])

    def _use(self, trial: Any, checkpoint: Path) -> None:
        manager = trial.run_metadata.checkpoint_manager
        latest = manager.latest_checkpoint_result
        if latest is not None and Path(latest.checkpoint.path).name == checkpoint.name:
            return  # Tune restores from it anyway
        recorded = {Path(r.checkpoint.path).name: r for r in manager.best_checkpoint_results}
        result = recorded.get(checkpoint.name) or unrecorded_result(checkpoint)
        if result is None:
            log.warning(
                "%s: Tune has no record of this checkpoint and its iteration's result is "
                "not in result.json; the trial resumes from the checkpoint Tune names "
                "instead (%s).",
                checkpoint,
                Path(latest.checkpoint.path).name if latest else "none: it starts over",
            )
            return
        if trial.status != "TERMINATED":
            log.warning(
                "%s: resuming from %s (iteration %s); Tune's experiment state named %s.",
                Path(trial.path).name,
                checkpoint.name,
                result.metrics.get("training_iteration"),
                Path(latest.checkpoint.path).name if latest else "no checkpoint",
            )
        trial.on_checkpoint(result)


def unrecorded_result(checkpoint: Path):
    """A checkpoint Tune's state does not know yet, as the result Tune would have registered:
    the metrics of the iteration its manifest names, from the trial's result.json; None
    without a manifest or that iteration's result."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    manifest = read_manifest(checkpoint)
    if manifest is None:
        return None
    try:
        lines = (checkpoint.parent / "result.json").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            metrics = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if metrics.get("training_iteration") == manifest["training_iteration"]:
            return _TrainingResult(checkpoint=Checkpoint.from_directory(str(checkpoint)), metrics=metrics)
    return None
