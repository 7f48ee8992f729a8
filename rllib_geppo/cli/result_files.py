"""Each trial's ``result.json`` and ``progress.csv``: one row per iteration, written where the
run's results are as each result comes.

Tune writes both into a staging folder in Ray's session directory and copies that folder to the
storage path from time to time (every 10 s at the least, longer for large runs). A run killed
in between (SIGKILL, a lost head node) would leave fewer rows under the storage path than
checkpoints, and a resume would lose or repeat iterations. For a local storage path (a shared
file system included), :class:`ResultJSON` and :class:`ProgressCSV` write straight into the
trial's folder there, flushing each row, so the rows are always at least as far as the
checkpoints; for cloud storage they keep Tune's staging folder and its copies.

A trial that restores from a checkpoint (``--resume``, or a retry with ``max_failures``) runs
the iterations after it again. When the first row after the restore comes, the rows of those
iterations from before are dropped, so each iteration has one row: the one of the run that
went on. A line that a crash cut short is dropped too. ``progress.csv`` also takes keys that
first appear in a later result (Tune's CSV logger would drop them for the whole run: an
evaluation every 2 iterations, a callback's metric from iteration 3 on): the file is rewritten
once under the new header, earlier rows empty there. Every rewrite goes through a temporary file
and a rename, so a crash or a full disk never leaves half a file.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, TextIO

import ray.cloudpickle as cloudpickle
from ray.air.constants import EXPR_PARAM_FILE, EXPR_PARAM_PICKLE_FILE, EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.result import TRAINING_ITERATION
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder

from rllib_geppo import private_ray
from rllib_geppo.records.checkpoint_manifest import write_atomically

#: Private Ray names this module reads (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = private_ray.TUNE_RUN


def results_dir(trial: Any) -> Path:
    """Where the trial's result files go: its folder under a local storage path, else Tune's
    staging folder (which Tune copies to cloud storage)."""
    trial.init_local_path()  # names the trial's folder if it has none yet
    local = trial.storage.storage_filesystem.type_name == "local"
    folder = Path(trial.path if local else trial.local_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class _RowFile:
    """One trial's file of rows, one per iteration (module docstring), open for appending."""

    def __init__(self, path: Path):
        self.path, self.file = path, None
        text = path.read_text(errors="replace") if path.exists() else ""
        rows = self.read(text)
        self.last = next((i for i in map(self.iteration, reversed(rows)) if i is not None), None)
        if text.endswith("\n") or not text:
            self.file = path.open("a", newline="")
        else:
            self.rewrite(rows)  # without the line a crash cut short

    def read(self, text: str | None = None) -> list[dict]:
        """The rows on disk (or in ``text``), less a last line without its line break (a crash
        cut it short)."""
        if text is None:
            text = self.path.read_text(errors="replace") if self.path.exists() else ""
        return self.parse(text.split("\n")[:-1])

    def append(self, row: dict) -> None:
        """Writes ``row`` after dropping the rows of its iteration and later ones (written
        before the trial restored from an earlier checkpoint)."""
        iteration = self.iteration(row)
        if iteration is not None and self.last is not None and iteration <= self.last:
            self.rewrite([r for r in self.read() if (self.iteration(r) or 0) < iteration])
        self.write(self.file, [row], whole=False)
        self.file.flush()
        self.last = iteration if iteration is not None else self.last

    def rewrite(self, rows: list[dict]) -> None:
        """The file again with ``rows`` only, atomically; appends go on after them."""
        if self.file is not None:
            self.file.close()
        write_atomically(self.path, lambda f: self.write(f, rows, whole=True))
        self.file = self.path.open("a", newline="")

    def close(self) -> None:
        self.file.close()

    def parse(self, lines: list[str]) -> list[dict]:
        raise NotImplementedError

    def iteration(self, row: dict) -> int | None:
        raise NotImplementedError

    def write(self, f: TextIO, rows: list[dict], whole: bool) -> None:
        raise NotImplementedError


class _JsonLines(_RowFile):
    """``result.json``: a result per line."""

    def parse(self, lines: list[str]) -> list[dict]:
        rows = []
        for line in lines:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut short in the middle of the file
        return rows

    def iteration(self, row: dict) -> int | None:
        return row.get(TRAINING_ITERATION)

    def write(self, f: TextIO, rows: list[dict], whole: bool) -> None:
        for row in rows:
            json.dump(row, f, cls=SafeFallbackEncoder)
            f.write("\n")


class _CSV(_RowFile):
    """``progress.csv``: a header, then a flattened result per row; a row with new keys first
    rewrites the file under a header with them (earlier rows empty there)."""

    def __init__(self, path: Path):
        self.header: list[str] = []
        super().__init__(path)

    def parse(self, lines: list[str]) -> list[dict]:
        header, *rows = list(csv.reader(lines)) or [[]]
        self.header = self.header or header
        return [dict(zip(header, r)) for r in rows if len(r) == len(header)]

    def iteration(self, row: dict) -> int | None:
        try:
            value = float(row.get(TRAINING_ITERATION, ""))
        except ValueError:
            return None
        return int(value) if math.isfinite(value) else None

    def append(self, row: dict) -> None:
        new = [key for key in row if key not in self.header]
        if new:
            rows = self.read()
            self.header += new
            self.rewrite(rows)
        super().append(row)

    def write(self, f: TextIO, rows: list[dict], whole: bool) -> None:
        writer = csv.DictWriter(f, self.header)
        if whole:
            writer.writeheader()
        writer.writerows({key: row.get(key, "") for key in self.header} for row in rows)


class ResultJSON(JsonLoggerCallback):
    """Tune's JSON logger (``result.json``, ``params.json``, ``params.pkl``), writing where
    :func:`results_dir` says, one row per iteration (module docstring). Passed to Tune, it
    stands in for Tune's own, which Tune then does not add."""

    def __init__(self) -> None:
        super().__init__()
        self._files: dict[Any, _RowFile] = {}

    def log_trial_start(self, trial: Any) -> None:
        self.update_config(trial, trial.config)
        self._files[trial] = _open(self._files.pop(trial, None), trial, EXPR_RESULT_FILE, _JsonLines, self)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._files:
            self.log_trial_start(trial)
        self._files[trial].append(result)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        if trial in self._files:
            self._files.pop(trial).close()

    def update_config(self, trial: Any, config: dict) -> None:
        folder = results_dir(trial)
        self._trial_configs[trial] = config
        with (folder / EXPR_PARAM_FILE).open("w") as f:
            json.dump(config, f, indent=2, sort_keys=True, cls=SafeFallbackEncoder)
        with (folder / EXPR_PARAM_PICKLE_FILE).open("wb") as f:
            cloudpickle.dump(config, f)


class ProgressCSV(CSVLoggerCallback):
    """Tune's CSV logger (``progress.csv``), writing where :func:`results_dir` says, one row per
    iteration, with a column for every key of every result (module docstring). Passed to Tune,
    it stands in for Tune's own, which Tune then does not add."""

    def __init__(self) -> None:
        super().__init__()
        self._files: dict[Any, _RowFile] = {}

    def log_trial_start(self, trial: Any) -> None:
        self._files[trial] = _open(self._files.pop(trial, None), trial, EXPR_PROGRESS_FILE, _CSV, self)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._files:
            self.log_trial_start(trial)
        self._files[trial].append(
            flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        )

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        if trial in self._files:
            self._files.pop(trial).close()


def _open(previous: _RowFile | None, trial: Any, name: str, kind: type[_RowFile], logger: Any) -> _RowFile:
    """The trial's file ``name``, opened anew (a restarted trial's rows may have changed); from
    cloud storage, Tune's copy of it first."""
    if previous is not None:
        previous.close()
    folder = results_dir(trial)
    if folder != Path(trial.path):
        logger._restore_from_remote(name, trial)
    return kind(folder / name)
