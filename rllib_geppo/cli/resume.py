"""A run's folder on `--resume`, and while a run writes into it.

Tune resumes a run with the settings and stop criteria it started with, whatever the file or the
command line say now. So `--resume` refuses options that would change them, naming each, instead
of ignoring them in silence; shows the stop criteria the run really uses; and refuses a run
whose saved state cannot be read (a full disk truncates it), where Tune would start over. Tune
saves that state every 10 s or more: after a SIGKILL it may hold as running a trial that has
finished since, which :class:`SavedRun` finds from the trial's own ``result.json`` and keeps
finished. The state is read and written as JSON only, nothing unpickled, through
:mod:`rllib_geppo.private_ray` (its layout is Tune's own).

While a run writes into its folder, :func:`run_lock` holds a lock there, so a second run started
with the same --storage-path and --name stops instead of writing into the same folder.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllib_geppo import private_ray
from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import named_by, parse_assignment
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
            (:mod:`rllib_geppo.cli.result_files`) and holds Tune's ``done``.
    """

    folder: Path
    trials: list[SavedTrial]
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def read(cls, storage_path: str, run_name: str) -> SavedRun:
        """The run `run_name` under the local `storage_path`.

        Raises UserError if there is none (listing the runs there) or its state cannot be read.
        """
        folder = Path(storage_path, run_name)
        if private_ray.experiment_state(folder) is None:
            runs = existing_runs(Path(storage_path))
            listed = (
                f"Runs there: {', '.join(runs)}; pass one with --name, or leave out --resume to "
                "start a new run."
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


def existing_runs(storage_path: Path) -> list[str]:
    """Names of the folders under `storage_path` that hold a Tune run, newest state first."""
    runs = [d for d in storage_path.iterdir() if d.is_dir()] if storage_path.is_dir() else []
    states = {d.name: state for d in runs if (state := private_ray.experiment_state(d)) is not None}
    return sorted(states, key=lambda name: -states[name].stat().st_mtime)


def check_unchanged(
    trials: Sequence[SavedTrial],
    experiments: Sequence[str],
    config: Sequence[str],
    stop: Sequence[str],
    num_samples_by_experiment: Mapping[str, int] | None,
) -> None:
    """Raise UserError naming each option that would change the saved run: a -c value or a
    --stop criterion that differs from every trial's, a --num-samples that changes the number
    of trials, an experiment (or a shell-style pattern) the run does not hold. Options equal to
    the run's pass."""
    changed = [
        f"-e {name} (not in the run)"
        for name in experiments
        if not any(named_by(t.experiment, [name]) for t in trials)
    ]
    selected = [t for t in trials if named_by(t.experiment, experiments)]
    for option, items, saved in (("-c", config, lambda t: t.config), ("--stop", stop, lambda t: t.stop)):
        for text in items:
            keys, value = parse_assignment(text, option)
            if any(not _matches(_lookup(saved(t), keys), value) for t in selected):
                changed.append(f"{option} {text}")
    for name, count in (num_samples_by_experiment or {}).items():
        held = sum(t.experiment == name for t in trials)
        if count != held:
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


_MISSING = object()


def _lookup(config: Mapping[str, Any], keys: Sequence[str]) -> Any:
    node: Any = config
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _matches(saved: Any, value: Any) -> bool:
    """Whether a saved value is what the option asks for (a grid search: one of its values)."""
    if isinstance(value, Mapping) and "grid_search" in value:
        return saved in value["grid_search"]
    return saved == value


def check_run_lock(run_dir: Path) -> None:
    """Raise UserError if another process holds ``run_dir``'s lock (a run writing into it);
    creates nothing, so that a run refused later leaves no folder behind."""
    path = run_dir / LOCK
    if not path.exists():
        return  # a running run keeps its lock file
    with path.open("a+") as lock:
        _lock_or_refuse(lock, run_dir)
        fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the run writes into it (a kernel lock on the lock file,
    which the system releases when the process ends, however it ends).

    Raises UserError if another process holds it.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    lock = path.open("a+")
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
        path.unlink(missing_ok=True)
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
