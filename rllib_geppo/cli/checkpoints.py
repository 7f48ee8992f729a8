"""Checkpoints on `--resume`: the newest intact one of each trial, damaged ones found before Ray
starts and skipped on request.

Tune resumes each unfinished trial from the newest checkpoint its saved state names, which lags
the checkpoints on disk. And if a file of that checkpoint is truncated or corrupt, the restore
fails inside the trial with an `UnpicklingError` or `EOFError` that names no file.
:func:`check_run_checkpoints` checks the newest checkpoint of each trial on disk first, without
unpickling anything (:func:`damaged_file`), and names the damaged file, the checkpoint and the
previous intact checkpoint; :class:`ResumeFromCheckpoints` then makes Tune restore each trial
from the checkpoint chosen (with that checkpoint's own iteration and metrics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from rllib_geppo import private_ray
from rllib_geppo.cli.errors import UserError
from rllib_geppo.records.checkpoint_manifest import damaged_files, read_manifest

log = logging.getLogger(__name__)


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


def newest_checkpoints(trial_dirs: Iterable[Path]) -> dict[str, Path]:
    """Each trial folder's newest complete checkpoint, where it has one: folder name -> it."""
    return {d.name: found[-1] for d in trial_dirs if (found := complete_checkpoints(checkpoints_of(d)))}


def check_run_checkpoints(
    trial_dirs: Iterable[Path], resume_command: str, skip_damaged: bool
) -> dict[str, Path]:
    """The checkpoint each of the trials in `trial_dirs` continues from: folder name -> its newest
    intact checkpoint on disk, or, where the newest is damaged and `skip_damaged` allows, the
    previous intact one.

    Raises:
        UserError: a newest checkpoint is damaged and `skip_damaged` is off (the message names
            the checkpoint, the file and the command that continues from the previous intact
            checkpoint), or no intact checkpoint is left.
    """
    resume_from = {}
    for trial_dir in trial_dirs:
        if not (checkpoints := complete_checkpoints(checkpoints_of(trial_dir))):
            continue
        resume_from[trial_dir.name] = checkpoints[-1]
        if (damage := damaged_file(checkpoints[-1])) is None:
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


class ResumeFromCheckpoints(Callback):
    """Before Tune starts any trial, makes each listed trial's chosen checkpoint its latest, with
    the metrics of the iteration it saved: an unfinished trial restores from it (its iteration,
    steps and state) and goes on; a finished one shows it in the summary. Whichever checkpoint a
    trial restores from, its later checkpoints are numbered after every checkpoint folder on
    disk, so none is overwritten (a damaged one stays for inspection)."""

    def __init__(self, checkpoints: Mapping[str, Path]):
        self.checkpoints = dict(checkpoints)  # trial folder name -> checkpoint folder

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        self._register(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._register(trials)  # a run whose trials had all finished takes no step

    def _register(self, trials: list) -> None:
        for trial in trials:
            if (checkpoint := self.checkpoints.pop(Path(trial.path).name, None)) is None:
                continue
            recorded, latest = private_ray.recorded_checkpoints(trial)
            metrics = None  # where Tune's latest is the one chosen, it restores from it anyway
            if latest != checkpoint.name and not (
                metrics := recorded.get(checkpoint.name) or unrecorded_metrics(checkpoint)
            ):
                log.warning(
                    "%s: Tune has no record of this checkpoint and its iteration's result is "
                    "not in result.json; the trial resumes from the checkpoint Tune names "
                    "instead (%s).",
                    checkpoint,
                    latest or "none: it starts over",
                )
            newest = int(checkpoints_of(checkpoint.parent)[-1].name[11:])
            registered = private_ray.continue_from(trial, newest, checkpoint if metrics else None, metrics)
            if metrics and registered and trial.status != "TERMINATED":
                log.warning(
                    "%s: resuming from %s (iteration %s); Tune's experiment state named %s.",
                    Path(trial.path).name,
                    checkpoint.name,
                    metrics.get("training_iteration"),
                    latest or "no checkpoint",
                )


def unrecorded_metrics(checkpoint: Path) -> dict[str, Any] | None:
    """The metrics of the iteration that saved `checkpoint` (its manifest names it), from the
    trial's result.json; None without a manifest or that iteration's row."""
    manifest = read_manifest(checkpoint)
    try:
        lines = (checkpoint.parent / "result.json").read_text().splitlines() if manifest else []
    except OSError:
        return None
    for line in lines:
        try:
            metrics = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if metrics.get("training_iteration") == manifest["training_iteration"]:
            return metrics
    return None
