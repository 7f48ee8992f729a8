"""``progress.csv`` whose columns follow the results: Tune's CSV logger, except that a key that
first appears in a later result gets its column.

Tune writes a trial's header from its first result and drops any key that appears later: with
``evaluation_interval=2``, every evaluation column; a callback's metric logged from iteration 3
on. :class:`ProgressCSV` adds such a column by rewriting the file once, under the new header
(earlier rows empty there), through a temporary file and a rename, so that a crash or a full
disk never leaves half a file; a resumed trial goes on under the file's own header.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback
from ray.tune.result import EXPR_PROGRESS_FILE
from ray.tune.utils import flatten_dict

from rllib_geppo.checkpoint_manifest import write_atomically


class ProgressCSV(CSVLoggerCallback):
    """Tune's ``CSVLoggerCallback`` with growing columns (see the module docstring); passed
    to Tune, it stands in for Tune's own, which Tune then does not add."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
        row = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        writer = self._trial_csv[trial]
        if writer is None:
            header = _header(self._path(trial)) if self._trial_continue[trial] else []
            writer = self._writer(trial, header or list(row))
            if not header:
                writer.writeheader()
        new = [key for key in row if key not in writer.fieldnames]
        if new:
            writer = self._rewrite(trial, [*writer.fieldnames, *new])
        writer.writerow({key: row.get(key, "") for key in writer.fieldnames})
        self._trial_files[trial].flush()

    def _path(self, trial: Any) -> Path:
        return Path(trial.local_path, EXPR_PROGRESS_FILE)

    def _writer(self, trial: Any, fieldnames: list[str]) -> csv.DictWriter:
        self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], fieldnames)
        return self._trial_csv[trial]

    def _rewrite(self, trial: Any, fieldnames: list[str]) -> csv.DictWriter:
        """The file again under ``fieldnames``, atomically; returns the writer that appends."""
        path = self._path(trial)
        self._trial_files[trial].close()
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))

        def write(f) -> None:
            writer = csv.DictWriter(f, fieldnames)
            writer.writeheader()
            writer.writerows(rows)

        write_atomically(path, write)
        self._trial_files[trial] = path.open("a", newline="")
        return self._writer(trial, fieldnames)


def _header(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return next(csv.reader(f), [])
