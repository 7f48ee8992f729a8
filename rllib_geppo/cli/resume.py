"""``--resume``: the saved run, the options that would change it, the checkpoint each trial
continues from; and the lock a run holds on its folder.

Tune resumes a run with the settings and stop criteria it started with, whatever the file or the
command line say now, and starts over where its saved state cannot be read (a full disk truncates
it): both are refused here, naming the fix. Tune saves that state every 10 s or more, so after a
SIGKILL it may hold as running a trial that has finished since (:class:`SavedRun` keeps it
finished) and name an older checkpoint than the newest on disk (:class:`ResumeFromCheckpoints`
restores the newest). A corrupt checkpoint would fail the restore inside the trial with an error
that names no file: :func:`check_run_checkpoints` names it first. The state is read and written
as JSON only, through :mod:`rllib_geppo.private_ray`. While a run writes into its folder,
:func:`run_lock` holds a lock there, so a second run with the same --storage-path and --name stops.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import operator
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.tune import Callback

from rllib_geppo import private_ray
from rllib_geppo.cli.experiment_file import UserError, named_by, parse_assignment
from rllib_geppo.records.checkpoint_manifest import damaged_files, read_manifest
from rllib_geppo.records.trial_record import experiment_of, last_row

log = logging.getLogger(__name__)

#: The lock file a running run keeps in its folder.
LOCK = ".rllib_geppo_run.lock"


@dataclass(frozen=True)
class SavedTrial:
    """One trial of a saved run: its experiment, config as resolved, stop criteria, status and
    folder (relative to the run's)."""

    experiment: str
    config: dict[str, Any]
    stop: dict[str, Any]
    status: str
    folder: str
    trial_id: str = ""


def saved_trials(run_dir: Path) -> list[SavedTrial]:
    """The trials of the run in `run_dir` as its newest saved state holds them (none without
    one). Raises UserError if that state cannot be read: Tune would start the run over."""
    if (state := private_ray.experiment_state(run_dir)) is None:
        return []
    try:
        return [
            SavedTrial(
                experiment_of(t["name"]) or t["name"],
                t["config"],
                t["stop"],
                t["status"],
                t["folder"],
                t["trial_id"],
            )
            for t in private_ray.saved_trials(state)
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"--resume: the run's saved state {state} cannot be read ({type(e).__name__}: {e}); "
            "it is damaged, e.g. cut short by a full disk, and Tune would start the run over. "
            "Free space, then start a new run (leave out --resume, or pass another --name); the "
            "trials' checkpoints and results in that folder stay as they are."
        ) from None


@dataclass
class SavedRun:
    """The run that `--resume` continues, read before Ray starts (nothing written).

    Attributes:
        folder: the run's folder.
        trials: its trials as Tune saved them, in the order the run created them.
        finished: the folders of the trials that finished after the state was saved -> the last
            row of each one's ``result.json``, which is never behind its checkpoints
            (:class:`~rllib_geppo.cli.tune_run.ResultFiles`) and holds Tune's ``done``.
    """

    folder: Path
    trials: list[SavedTrial]
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def read(cls, storage_path: str, run_name: str) -> SavedRun:
        """The run `run_name` under the local `storage_path`. Raises UserError if there is none
        (listing the runs there, newest first) or its state cannot be read."""
        folder = Path(storage_path, run_name)
        if private_ray.experiment_state(folder) is None:
            runs = [d for d in Path(storage_path).glob("*/") if private_ray.experiment_state(d) is not None]
            runs.sort(key=lambda d: -private_ray.experiment_state(d).stat().st_mtime)
            listed = (
                f"Runs there: {', '.join(d.name for d in runs)}; pass one with --name, or leave out "
                "--resume to start a new run."
                if runs
                else "There are no runs there; leave out --resume to start a new run."
            )
            raise UserError(f"--resume: no run '{run_name}' in {storage_path}. {listed}")
        trials = private_ray.in_creation_order(saved_trials(folder), lambda t: t.trial_id)
        finished = {
            t.folder: last
            for t in trials
            if t.status not in ("TERMINATED", "ERROR")
            and (last := last_row(folder / t.folder) or {}).get("done")
        }
        return cls(folder, trials, finished)

    def is_finished(self, trial: SavedTrial) -> bool:
        """Whether the trial finished: so saved, or since."""
        return trial.status == "TERMINATED" or trial.folder in self.finished

    def unfinished(self) -> list[Path]:
        """The folders of the trials that `--resume` restores."""
        return [self.folder / t.folder for t in self.trials if not self.is_finished(t)]

    def continues(self) -> str:
        """How many of the trials `--resume` continues, as one clause for the log."""
        done = sum(map(self.is_finished, self.trials))
        return f"{len(self.trials) - done} of its {len(self.trials)} trial(s) continue ({done} finished)"

    def save(self) -> None:
        """Writes into Tune's saved state what the resume needs: the trials that finished since it
        was saved marked finished (each one's last row its last result), so that Tune leaves them
        as they are instead of restoring them and training on; and the trials in the order the
        run created them, so that those that never ran start in the file's order (its
        experiments, then each one's samples) as in the first run, where Tune would start them
        in the arbitrary order it saved them in."""
        for folder, last in self.finished.items():
            log.info(
                "%s finished (iteration %s) after the run's state was saved; it stays finished.",
                folder,
                last.get("training_iteration"),
            )
        private_ray.save_trials(self.folder, self.finished)


def check_unchanged(
    trials: Sequence[SavedTrial],
    experiments: Sequence[str],
    config: Sequence[str],
    stop: Sequence[str],
    num_samples_by_experiment: Mapping[str, int] | None,
) -> None:
    """Raise UserError naming each option that would change the saved run: a -c value or a
    --stop criterion that differs from a selected trial's (a grid search: that holds none of its
    values), a --num-samples that changes the number of trials, an experiment (or a shell-style
    pattern) the run does not hold. Options equal to the run's pass."""

    def holds(saved: Mapping[str, Any], keys: Sequence[str], value: Any) -> bool:
        try:
            saved = functools.reduce(operator.getitem, keys, saved)
        except (KeyError, TypeError):
            return False
        return (
            saved in value["grid_search"]
            if isinstance(value, Mapping) and "grid_search" in value
            else saved == value
        )

    changed = [
        f"-e {name} (not in the run)"
        for name in experiments
        if not any(named_by(t.experiment, [name]) for t in trials)
    ]
    selected = [t for t in trials if named_by(t.experiment, experiments)]
    for option, items, saved in (("-c", config, lambda t: t.config), ("--stop", stop, lambda t: t.stop)):
        for text in items:
            keys, value = parse_assignment(text, option)
            if not all(holds(saved(t), keys, value) for t in selected):
                changed.append(f"{option} {text}")
    for name, count in (num_samples_by_experiment or {}).items():
        if count != (held := sum(t.experiment == name for t in trials)):
            changed.append(f"--num-samples (experiment '{name}' holds {held} trials)")
    if changed:
        raise UserError(
            "--resume continues the run with the settings and stop criteria it started with; "
            f"these would change them: {', '.join(changed)}. Leave them out to resume, or start "
            "a new run with them (another --name)."
        )


def saved_stops(trials: Sequence[SavedTrial]) -> dict[str, dict[str, Any]]:
    """Each experiment's stop criteria as the run uses them."""
    return {t.experiment: t.stop for t in reversed(trials)}


def damaged_file(checkpoint: Path) -> tuple[Path, str] | None:
    """The first file of `checkpoint` that is not as it was saved, with the reason, else None.

    Nothing is unpickled: a pickle runs code as it loads. A GePPO checkpoint is checked against
    the sizes and checksums of its manifest (:mod:`rllib_geppo.records.checkpoint_manifest`); files
    it does not list are never loaded by a restore. A checkpoint without a manifest (another
    algorithm's, or GePPO's before 0.9) has nothing to check against but its being empty.
    """
    if not any(p.is_file() for p in checkpoint.rglob("*")):
        return checkpoint, "the checkpoint folder is empty"
    manifest = read_manifest(checkpoint)
    return next(iter(damaged_files(checkpoint, manifest)), None) if manifest is not None else None


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
        return checkpoints
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


def check_run_lock(run_dir: Path) -> None:
    """Raise UserError if another process holds ``run_dir``'s lock (a run writing into it);
    creates nothing, so that a run refused later leaves no folder behind."""
    if (run_dir / LOCK).exists():  # a running run keeps its lock file
        with (run_dir / LOCK).open("a+") as lock:
            _lock_or_refuse(lock, run_dir)


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the run writes into it (a kernel lock on the lock file,
    which the system releases when the process ends, however it ends). Raises UserError if
    another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = (run_dir / LOCK).open("a+")
    _lock_or_refuse(lock, run_dir)
    lock.seek(0)
    lock.truncate()
    lock.write(
        f"process {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    lock.flush()
    try:
        yield
    finally:
        (run_dir / LOCK).unlink(missing_ok=True)
        lock.close()


def _lock_or_refuse(lock, run_dir: Path) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise UserError(
            f"run folder {run_dir} is in use by another run ({holder}): both would "
            "write into it. Pass another --name, or wait for that run (or stop it "
            "and --resume)."
        ) from None
