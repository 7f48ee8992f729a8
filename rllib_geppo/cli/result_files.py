"""Each trial's ``result.json`` and ``progress.csv`` under a local storage path: one row per
iteration, written into the trial's folder as each result comes.

Tune's own loggers write both into a staging folder in Ray's session directory, which Tune copies
to the storage path from time to time (every 10 s at the least, longer for large runs). A run
killed in between (SIGKILL, a lost head node) would leave fewer rows under the storage path than
checkpoints, and a resume would lose or repeat iterations. So for a local storage path (a shared
file system included) the run leaves Tune's JSON and CSV loggers out
(``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS``) and :class:`ResultFiles` writes straight into the
trial's folder, flushing each row: the rows are always at least as far as the checkpoints. (Cloud
storage keeps Tune's loggers and their copies.)

A trial that restores from a checkpoint (``--resume``, or a retry with ``max_failures``) runs
the iterations after it again. When the first row after the restore comes, the rows of those
iterations from before are dropped, so each iteration has one row: the one of the run that
went on. A line that a crash cut short is dropped when the trial starts. ``progress.csv`` also
takes keys that first appear in a later result (Tune's CSV logger would drop them for the whole
run: an evaluation every 2 iterations, a callback's metric from iteration 3 on): the file is
rewritten once under the new header, earlier rows empty there. Every rewrite goes through a
temporary file and a rename, so a crash or a full disk never leaves half a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import ray.cloudpickle as cloudpickle
from ray.air.constants import EXPR_PARAM_FILE, EXPR_PARAM_PICKLE_FILE, EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
from ray.tune.logger import LoggerCallback
from ray.tune.result import TRAINING_ITERATION
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder

from rllib_geppo.records.checkpoint_manifest import write_atomically
from rllib_geppo.records.trial_record import last_row


class ResultFiles(LoggerCallback):
    """Tune's logger of ``params.json``, ``params.pkl``, ``result.json`` and ``progress.csv``,
    writing into each trial's folder under a local storage path (module docstring)."""

    def __init__(self) -> None:
        self._last: dict[Any, int] = {}  # trial -> the last iteration in its files
        self._header: dict[Any, list[str]] = {}  # trial -> the columns of its progress.csv

    def log_trial_start(self, trial: Any) -> None:
        """At each (re)start: the config, and the files as far as their last whole line."""
        folder = Path(trial.path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / EXPR_PARAM_FILE).write_text(
            json.dumps(trial.config, indent=2, sort_keys=True, cls=SafeFallbackEncoder)
        )
        (folder / EXPR_PARAM_PICKLE_FILE).write_bytes(cloudpickle.dumps(trial.config))
        for name in (EXPR_RESULT_FILE, EXPR_PROGRESS_FILE):
            _cut_to_last_line(folder / name)
        self._last[trial] = (last_row(folder) or {}).get(TRAINING_ITERATION, 0)
        self._header[trial] = list(_table(folder / EXPR_PROGRESS_FILE, nrows=0).columns)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._last:
            self.log_trial_start(trial)
        folder, step = Path(trial.path), result[TRAINING_ITERATION]
        if step <= self._last[trial]:  # restored from an earlier checkpoint: these run again
            _drop_from(folder, step)
        with (folder / EXPR_RESULT_FILE).open("a") as f:
            f.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        row = pd.DataFrame([flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")])
        csv, header = folder / EXPR_PROGRESS_FILE, self._header[trial]
        if new := [key for key in row.columns if key not in header]:  # the file under a new header
            self._header[trial] = header = header + new
            table = _table(csv).reindex(columns=header)
            write_atomically(csv, lambda f: table.to_csv(f, index=False))
        with csv.open("a", newline="") as f:
            row.reindex(columns=header).to_csv(f, header=False, index=False)
        self._last[trial] = step


def _cut_to_last_line(path: Path) -> None:
    """Drops a last line that a crash cut short (one without its line break)."""
    if path.exists():
        with path.open("rb+") as f:
            f.truncate(f.read().rfind(b"\n") + 1)


def _rows(path: Path) -> list[tuple[str, dict]]:
    """Each line of a ``result.json`` with its row; a line that does not parse is left out."""
    rows = []
    for line in path.read_text().splitlines(keepends=True) if path.exists() else []:
        try:
            rows.append((line, json.loads(line)))
        except ValueError:
            continue
    return rows


def _table(path: Path, nrows: int | None = None) -> pd.DataFrame:
    """A ``progress.csv`` as written, every cell its text (empty where there is none yet)."""
    if not path.exists() or not path.stat().st_size:
        return pd.DataFrame()
    return pd.read_csv(path, dtype=str, keep_default_na=False, nrows=nrows)


def _drop_from(folder: Path, step: int) -> None:
    """The trial's rows without those of iteration `step` and later, each file rewritten."""
    kept = [line for line, row in _rows(folder / EXPR_RESULT_FILE) if row.get(TRAINING_ITERATION, 0) < step]
    write_atomically(folder / EXPR_RESULT_FILE, lambda f: f.writelines(kept))
    table = _table(folder / EXPR_PROGRESS_FILE)
    if TRAINING_ITERATION in table:
        table = table[pd.to_numeric(table[TRAINING_ITERATION], errors="coerce") < step]
        write_atomically(folder / EXPR_PROGRESS_FILE, lambda f: table.to_csv(f, index=False))
