"""A trial's results kept small enough for git, so that a study outlives the machine it ran on.

Tune's ``result.json`` repeats the whole config in every row. A trial record is a folder with
the trial's name that holds Tune's ``params.json``; ``result.json.gz``, the same rows cut to the
keys the report reads (:data:`KEPT_KEYS`, each module's ``sample_lag``, and the config in the
first row only); and ``record.json``, what Tune's saved state said of the trial (:data:`TUNE_RECORD_KEYS`).
``rllib-geppo report --keep-trials DIR`` writes one for each finished trial it averaged; the
report reads a record as it reads a trial folder, and ``rllib train file --skip-recorded DIR``
runs only the trials that no record holds.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rllib_geppo.records.result_keys import (
    EVALUATION_RETURN_KEY,
    ITERATION_KEY,
    OLD_STACK_PREFIX,
    RETURN_KEY,
    STEPS_KEY,
    TIME_KEY,
    TV_KEY,
    TV_TARGET_KEY,
    lookup,
)

logger = logging.getLogger(__name__)

RESULT_FILE = "result.json"  # Tune's rows, one JSON object per line
RECORD_FILE = "result.json.gz"  # a trial record's rows
PARAMS_FILE = "params.json"
TUNE_RECORD_FILE = "record.json"
#: What a record keeps of Tune's saved trial record: the trainable's name labels the trial's
#: variant, and only a trial that ended TERMINATED is recorded.
TUNE_RECORD_KEYS = ("trainable_name", "status")
#: The "/"-separated keys a record keeps of each row: the report's curves and labels, Tune's
#: ``done``, and the stop criteria of most runs.
KEPT_KEYS = (
    "done",
    STEPS_KEY,
    ITERATION_KEY,
    TIME_KEY,
    RETURN_KEY,
    EVALUATION_RETURN_KEY,
    TV_KEY,
    TV_TARGET_KEY,
    OLD_STACK_PREFIX + "tv",
    OLD_STACK_PREFIX + "tv_target",
)


#: A trial's name is "<experiment>_<Tune's trial ID>" (rllib_geppo.cli.tune_run), its folder's name that and
#: "_<index>_<grid values>_<date>"; Tune's trial IDs are "<5 hex digits>_<5-digit counter>".
_TRIAL_NAME = re.compile(r"(?P<experiment>.+?)_[0-9a-f]{5}_\d{5}(?:_|$)")


def experiment_of(trial_name: str) -> str | None:
    """The experiment of a trial of ``rllib train file``, from its name or its folder's name;
    None for a name of another form."""
    match = _TRIAL_NAME.match(trial_name)
    return match["experiment"] if match else None


def trial_folders(root: Path) -> list[Path]:
    """The Tune trial folders and trial records (folders holding ``params.json``) at or below
    ``root``, sorted; checkpoints inside a trial and records being written are not walked."""
    trials = []
    for folder, subfolders, files in os.walk(root):
        if PARAMS_FILE in files:
            trials.append(Path(folder))
            subfolders.clear()  # a trial's subfolders are checkpoints
        subfolders[:] = [s for s in subfolders if not s.endswith(".partial")]
    return sorted(trials)


def is_record(trial_dir: Path) -> bool:
    """Whether ``trial_dir`` is a trial record rather than Tune's trial folder."""
    return not (trial_dir / RESULT_FILE).is_file() and (trial_dir / RECORD_FILE).is_file()


def read_rows(trial_dir: Path) -> list[dict[str, Any]]:
    """The iterations of a trial folder (``result.json``) or record (``result.json.gz``), one
    dict each. A line that cannot be read (a torn last line of a killed run) is skipped, and the
    iterations that a restore from checkpoint repeated replace the earlier ones; a record that
    cannot be unpacked has none, with a warning."""
    if (trial_dir / RESULT_FILE).is_file():
        path, text = trial_dir / RESULT_FILE, (trial_dir / RESULT_FILE).read_text(errors="replace")
    elif (trial_dir / RECORD_FILE).is_file():
        path = trial_dir / RECORD_FILE
        try:
            text = gzip.decompress(path.read_bytes()).decode(errors="replace")
        except (OSError, EOFError, zlib.error) as err:
            logger.warning("%s: not a readable trial record (%s); fetch it again or delete it", path, err)
            return []
    else:
        return []
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s:%d: unreadable line skipped", path, number)
            continue
        step = lookup(row, STEPS_KEY)
        while rows and lookup(rows[-1], STEPS_KEY) >= step:  # rewound by a restore
            rows.pop()
        rows.append(row)
    return rows


def slim_row(row: Mapping[str, Any], *, with_config: bool) -> dict[str, Any]:
    """``row`` cut to :data:`KEPT_KEYS`, every module's ``learners/<id>/sample_lag`` and, with
    ``with_config``, the config; the nesting stays as it was."""
    slim: dict[str, Any] = {"config": row["config"]} if with_config and "config" in row else {}
    keys = [*KEPT_KEYS]
    keys += [f"learners/{module}/sample_lag" for module in (row.get("learners") or {})]
    for key in keys:
        *parents, leaf = key.split("/")
        node: Any = row
        for part in [*parents, leaf]:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            continue
        target = slim
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = node
    return slim


def last_row(trial_dir: Path) -> dict[str, Any] | None:
    """The last whole row of a trial folder's ``result.json`` or a record's rows, or None: the
    end of a 15 MB ``result.json`` without reading every row."""
    if not (trial_dir / RESULT_FILE).is_file():
        rows = read_rows(trial_dir)
        return rows[-1] if rows else None
    try:
        lines = (trial_dir / RESULT_FILE).read_text(errors="replace").split("\n")[:-1]  # less a torn line
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def read_params(trial_dir: Path) -> dict[str, Any] | None:
    """The trial's config as Tune saved it (``params.json``), or None when missing or unreadable."""
    try:
        params = json.loads((trial_dir / PARAMS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return params if isinstance(params, dict) else None


def read_tune_record(trial_dir: Path) -> dict[str, Any]:
    """What a record kept of Tune's saved trial record (``record.json``); empty for a Tune
    folder or an unreadable file."""
    try:
        kept = json.loads((trial_dir / TUNE_RECORD_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: kept[k] for k in TUNE_RECORD_KEYS if k in kept} if isinstance(kept, dict) else {}


def write_record(trial_dir: Path, out: Path, tune_record: Mapping[str, Any]) -> Path:
    """Write the record of the trial in ``trial_dir`` as ``out/<its folder name>``, replacing an
    older one, with ``tune_record``'s :data:`TUNE_RECORD_KEYS`; returns the record's folder.
    Writes through a staging folder and a rename, so an interrupted write never leaves half a
    record."""
    rows = read_rows(trial_dir)
    if not rows or not (trial_dir / PARAMS_FILE).is_file():
        raise ValueError(f"{trial_dir}: no {PARAMS_FILE} or no results to record")
    record = out / trial_dir.name
    staging = out / f".{trial_dir.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(trial_dir / PARAMS_FILE, staging / PARAMS_FILE)
    kept = {k: tune_record[k] for k in TUNE_RECORD_KEYS if tune_record.get(k) is not None}
    (staging / TUNE_RECORD_FILE).write_text(json.dumps(kept, sort_keys=True) + "\n")
    lines = "".join(json.dumps(slim_row(r, with_config=i == 0)) + "\n" for i, r in enumerate(rows))
    # mtime=0: the same rows give the same bytes, so git sees a rewritten record as unchanged.
    (staging / RECORD_FILE).write_bytes(gzip.compress(lines.encode(), mtime=0))
    shutil.rmtree(record, ignore_errors=True)
    staging.rename(record)
    return record
