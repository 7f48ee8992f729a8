"""A run's folder on `--resume` and while the run writes into it.

What `--resume` continues: the run as Tune saved it, read before Ray starts.

Tune resumes a run with the settings and stop criteria it started with, whatever the file or the
command line say now. So `--resume` refuses options that would change them, naming each, instead
of ignoring them in silence; shows the stop criteria the run really uses; and refuses a run
whose saved state cannot be read (a full disk truncates it), where Tune would start over.

The state is Tune's ``experiment_state-*.json``, read as JSON only: nothing is unpickled.

While a run writes into its folder, :func:`run_lock` holds a lock there, so a second run started
with the same --storage-path and --name stops instead of writing into the same folder.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import named_by, parse_assignment
from rllib_geppo.records.checkpoint_manifest import write_json_atomically
from rllib_geppo.records.trial_record import experiment_of, last_row

log = logging.getLogger(__name__)

_T = TypeVar("_T")

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

    def finished(self, since_saved: Collection[str]) -> bool:
        """Whether the trial finished: so saved, or among the folders that finished since."""
        return self.status == "TERMINATED" or self.folder in since_saved


def newest_state(run_dir: Path) -> Path | None:
    """The run's newest ``experiment_state-*.json`` (the name holds the time), or None."""
    return max(run_dir.glob("experiment_state-*.json"), default=None)


def saved_trials(run_dir: Path) -> list[SavedTrial]:
    """The trials of the run in `run_dir` as its newest experiment state holds them.

    Raises UserError if that state cannot be read: Tune would start the run over.
    """
    if (state := newest_state(run_dir)) is None:
        return []
    try:
        data = json.loads(state.read_text())
        trials = [json.loads(entry[0]) for entry in data["trial_data"]]
        return [
            SavedTrial(
                experiment=experiment_of(t["custom_trial_name"]) or t["custom_trial_name"],
                config=dict(t["config"]),
                stop=dict(t["stopping_criterion"] or {}),
                status=t["status"],
                folder=t["relative_logdir"],
                trial_id=t.get("trial_id", ""),
            )
            for t in trials
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"--resume: the run's saved state {state} cannot be read ({type(e).__name__}: {e}); "
            "it is damaged, e.g. cut short by a full disk, and Tune would start the run over. "
            "Free space, then start a new run (leave out --resume, or pass another --name); the "
            "trials' checkpoints and results in that folder stay as they are."
        ) from None


def finished_since_saved(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Trials that finished after the run's state was last saved (it lags: after a SIGKILL it
    may still hold them running): folder -> the last row of its ``result.json``, which is never
    behind its checkpoints (:mod:`rllib_geppo.cli.result_files`) and has Tune's ``done``. Reads
    only.
    """
    return {
        t.folder: last
        for t in saved_trials(run_dir)  # raises UserError where the state cannot be read
        if t.status not in ("TERMINATED", "ERROR")
        and (last := last_row(run_dir / t.folder) or {}).get("done")
    }


def mark_finished_trials(run_dir: Path) -> list[str]:
    """Marks the trials of :func:`finished_since_saved` finished in the run's saved state, so
    that ``--resume`` leaves them as they are instead of restoring them and training on; each
    one's last row becomes its last result. Only JSON is read and written, nothing unpickled;
    the state file is replaced atomically. Returns the finished trials' folders.
    """
    if not (finished := finished_since_saved(run_dir)):
        return []
    path = newest_state(run_dir)
    state = json.loads(path.read_text())
    for entry in state["trial_data"]:
        trial, metadata = json.loads(entry[0]), json.loads(entry[1])
        if (last := finished.get(trial["relative_logdir"])) is None:
            continue
        trial["status"] = "TERMINATED"
        metadata["last_result"] = last
        entry[0], entry[1] = json.dumps(trial, indent=2), json.dumps(metadata)
        log.info(
            "%s finished (iteration %s) after the run's state was saved; it stays finished.",
            trial["custom_trial_name"],
            last.get("training_iteration"),
        )
    write_json_atomically(path, state)
    return list(finished)


def what_continues(trials: Sequence[SavedTrial], finished: Collection[str]) -> str:
    """How many of a saved run's trials ``--resume`` continues, as one clause for the log;
    `finished` holds the folders of those that finished after the run's state was saved."""
    done = sum(t.finished(finished) for t in trials)
    return f"{len(trials) - done} of its {len(trials)} trial(s) continue ({done} finished)"


def order_as_created(run_dir: Path) -> bool:
    """Put the trials of the run's saved state in the order the run created them (the file's
    experiments, then each one's samples), so that ``--resume`` starts the trials that never ran
    in that order, as the first run would have: Tune saves them in an arbitrary order, restores
    them in the saved one (after the trials that have results, newest first) and starts them in
    it. So a study run in parts still finishes one experiment after another. Only JSON is read
    and written, the state file replaced atomically. Returns whether the order changed (False
    also where a trial ID lacks Tune's counter, left as it is).
    """
    if (path := newest_state(run_dir)) is None:
        return False
    state = json.loads(path.read_text())
    if not isinstance(entries := state.get("trial_data"), list):
        return False  # no list of trials to order: the state is left as it is
    created = in_creation_order(entries, lambda entry: json.loads(entry[0])["trial_id"])
    if created == entries:
        return False
    write_json_atomically(path, {**state, "trial_data": created})
    return True


def in_creation_order(items: Sequence[_T], trial_id: Callable[[_T], str]) -> list[_T]:
    """`items` (saved trials or Tune's state entries) in the order the run created them, by the
    counter of each one's `trial_id`; as given where an ID lacks it or cannot be read."""
    try:
        return sorted(items, key=lambda item: creation_index(trial_id(item)))
    except (ValueError, KeyError, TypeError):
        return list(items)


def creation_index(trial_id: str) -> int:
    """The counter Tune's variant generator ends each trial ID with ("3bab4_00012": 12).

    Raises ValueError for an ID without one.
    """
    if not (counter := re.search(r"_(\d+)$", trial_id)):
        raise ValueError(f"trial ID {trial_id!r} does not end with a counter")
    return int(counter[1])


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
        if count != sum(t.experiment == name for t in trials):
            changed.append(
                f"--num-samples (experiment '{name}' holds "
                f"{sum(t.experiment == name for t in trials)} trials)"
            )
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
