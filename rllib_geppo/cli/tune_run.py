"""The Ray session and the Tune run of ``rllib train file``: the cluster's address checked before
Ray starts, every experiment of a file in one ``tune.run_experiments`` call (one run folder,
``storage_path/run_name``, one progress table), and each trial's result files.

``ray.init`` retries an unreachable cluster for minutes and names no cause when the cluster
refuses this process's token: :func:`check_reachable` and :func:`connection_failure` turn both
into a :class:`UserError` with the fix.

Tune's own loggers write ``result.json`` and ``progress.csv`` into a staging folder that Tune
copies to the storage path every 10 s or more: a run killed in between (SIGKILL, a lost head
node) would leave fewer rows there than checkpoints, and a resume would lose or repeat
iterations. Under a local storage path (a shared file system included) :class:`ResultFiles`
writes them straight into the trial's folder instead, flushing each row. Each iteration has one
row: a trial restored from a checkpoint (``--resume``, ``max_failures``) runs the iterations after
it again, and their new rows replace the old; a line that a crash cut short is dropped; and
``progress.csv`` takes keys that first appear in a later result (Tune's CSV logger drops them),
its earlier rows empty there. Every rewrite goes through a temporary file and a rename, so a
crash or a full disk never leaves half a file. (Cloud storage keeps Tune's loggers.)
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pandas as pd
import ray.cloudpickle as cloudpickle
from ray.air.constants import EXPR_PARAM_FILE, EXPR_PARAM_PICKLE_FILE, EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
from ray.tune.logger import LoggerCallback
from ray.tune.result import TRAINING_ITERATION
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder

from rllib_geppo.cli.console import BudgetReporter
from rllib_geppo.cli.experiment_file import ExperimentSpec, UserError, trainable, tune_config
from rllib_geppo.records.checkpoint_manifest import write_atomically
from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TIME_KEY
from rllib_geppo.records.trial_record import last_row, read_rows

log = logging.getLogger(__name__)

# A probe of the cluster's port that gets no answer within this many seconds fails.
CONNECT_TIMEOUT_S = 5.0
# Ray's default ports: the GCS of `ray start --head`, and the Ray Client server (ray://).
GCS_PORT = 6379
CLIENT_PORT = 10001
# Ray's switch for token authentication ("token" or "disabled").
AUTH_MODE = "RAY_AUTH_MODE"
PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    STEPS_KEY: "env steps",
    RETURN_KEY: "return",
    TIME_KEY: "time (s)",
}


def resolve_address(address: str) -> str | None:
    """`--address` as Ray reads it, where that is known before ``ray.init``: `auto` is the
    address in ``RAY_ADDRESS`` (without it, ``ray.init`` finds the cluster that `ray start`
    started on this machine, or says that none runs). None: `local`, or such an `auto`."""
    if address == "auto":
        return os.environ.get("RAY_ADDRESS") or None
    return None if address == "local" else address


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raises UserError unless something accepts a TCP connection at the cluster's address
    (`host:port`, `ray://host:port` or `[::1]:port`, with Ray's default ports)."""
    if (resolved := resolve_address(address)) is None:
        return
    parts = urlsplit("//" + resolved.removeprefix("ray://"))
    try:
        port = parts.port or (CLIENT_PORT if resolved.startswith("ray://") else GCS_PORT)
    except ValueError:
        raise UserError(f"--address {address}: the port is not a number 0-65535.") from None
    if not (host := parts.hostname):
        raise UserError(f"--address {address}: expected host:port, e.g. 10.0.0.5:{GCS_PORT}.")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = f"no answer within {timeout_s:g}s" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        shown = address if resolved == address else f"{address} ({resolved})"
        raise UserError(
            f"--address {shown}: nothing answers at {host}:{port} ({reason.lower()}). Check the "
            "address and that the cluster is up (`ray status` on its head node), or leave out "
            "--address to start a local Ray."
        ) from None


def connection_failure(address: str, error: BaseException) -> str:
    """ray.init's ConnectionError, with the reason Ray chained to it (its own message is only
    "Failed to connect to Ray cluster at ..."): a cluster that refused this process's token (with
    what to set), `auto` without a cluster, or the last line of the reason."""
    reasons = []
    cause = error.__cause__ or error.__context__
    while cause is not None:
        reasons.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    text = "\n".join(reasons)
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
        why = (
            "its token is not the cluster's"
            if os.environ.get(AUTH_MODE, "").lower() == "token"
            else f"{AUTH_MODE} is not 'token' here, so it sent none"
        )
        return (
            f"--address {address}: the cluster uses Ray's token authentication and refused this "
            f"process: {why}. Set {AUTH_MODE}=token and the cluster's token (RAY_AUTH_TOKEN=<token>, "
            "or the file ~/.ray/auth_token) where you run this command, as on the cluster's nodes."
        )
    if address == "auto" and resolve_address(address) is None:
        return (
            "--address auto: no running Ray cluster found (RAY_ADDRESS is not set and no cluster "
            "was started on this machine). Start one with `ray start --head`, pass its address, "
            "or leave out --address to start a local Ray."
        )
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), None)
    return (
        f"--address {address}: {error}{f' ({last})' if last else ''}. Check that the cluster is up "
        "(`ray status` on its head node)."
    )


@contextmanager
def ray_session(
    address: str | None, quiet: bool = False, runtime_env: dict[str, Any] | None = None
) -> Iterator[None]:
    """Joins the Ray cluster at `address`, or starts a local Ray, with the job's `runtime_env`
    (:func:`~rllib_geppo.cli.env_modules.prepare_env_modules`); shuts down on exit. ``quiet``
    keeps Ray's own notices ("Started a local Ray instance") out."""
    import ray

    # "local", not None: ray.init() would silently join a cluster started on this machine.
    try:
        ray.init(
            address=address or "local",
            runtime_env=runtime_env,
            logging_level=logging.WARNING if quiet else logging.INFO,
        )
    except ConnectionError as e:  # e.g. a refused token, or the cluster went away after check_reachable()
        if address is None:
            raise
        raise UserError(connection_failure(address, e)) from None
    log.info("Ray resources: %s", ray.cluster_resources())
    try:
        yield
    finally:
        ray.shutdown()


def tune_experiments(specs: Sequence[ExperimentSpec], run_name: str, storage_path: str) -> list:
    """One tune.Experiment per spec, all sharing the directory `storage_path/run_name`.

    Tune uploads the files the driver writes (TensorBoard's, the error files; under cloud
    storage the results too) from the staging directory of the *first* experiment only:
    experiments with their own names would keep only their checkpoints. So all share one name,
    and trial names carry the experiment's. The staging path embeds the second each Experiment
    was created in; in the rare case that creating them spans a second boundary, build them
    again. Needs Ray to be initialised.
    """
    from ray import tune

    for _ in range(3):
        experiments = []
        for spec in specs:
            # The class, not its name: Tune would otherwise import every RLlib algorithm to find it.
            run = trainable(spec.run, spec.name)
            checkpoints = {"checkpoint_at_end": isinstance(run, type), **spec.checkpoint_config}
            experiments.append(
                tune.Experiment(
                    name=run_name,
                    run=run,
                    stop=spec.stop,
                    config=tune_config(run, spec.config),
                    num_samples=spec.num_samples,
                    max_failures=spec.max_failures,
                    storage_path=storage_path,
                    # Function trainables (SB3PPO) save no checkpoints.
                    checkpoint_config=tune.CheckpointConfig(**checkpoints),
                    trial_name_creator=functools.partial(_trial_name, spec.name),
                )
            )
        if len({e.local_path for e in experiments}) == 1:
            return experiments
    raise RuntimeError("could not give the experiments one Tune staging directory")


def _trial_name(experiment: str, trial: Any) -> str:
    return f"{experiment}_{trial.trial_id}"


def run_experiments(
    specs: Sequence[ExperimentSpec], run_name: str, storage_path: str, resume: bool, callbacks: Sequence[Any]
) -> list:
    """Runs all experiments as one Tune run (Ray must be initialised) and returns its trials.

    One `tune.run_experiments` call, not one Tuner per experiment: a Tuner takes a single
    trainable and param space, while run_experiments schedules the trials of every experiment
    (each with its own algorithm, stop criteria and checkpointing) in one TuneController that
    shares the cluster, shows one progress table and resumes as a whole. The ``callbacks`` go
    after the loggers: a stop asks for a checkpoint once they have written the result.
    """
    from ray import tune
    from ray.tune.logger import TBXLoggerCallback

    local = "://" not in storage_path
    loggers = [ResultFiles(), TBXLoggerCallback()] if local else []  # else Tune's own
    # Tune's new output engine cannot be told which metrics to show when given several
    # experiments; the classic reporter can. Users can still opt in with RAY_AIR_NEW_OUTPUT=1.
    environment = {
        "RAY_AIR_NEW_OUTPUT": os.environ.get("RAY_AIR_NEW_OUTPUT", "0"),
        "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": str(int(local)),
    }
    with mock.patch.dict(os.environ, environment):
        return tune.run_experiments(
            tune_experiments(specs, run_name, storage_path),
            # A table every 30 s keeps the logs of hour-long runs readable.
            progress_reporter=BudgetReporter(
                results_dir=run_path(storage_path, run_name),
                stops={s.name: s.stop for s in specs},
                metric_columns=PROGRESS_COLUMNS,
                max_report_frequency=30,
            ),
            verbose=1,
            # AUTO resumes if the run directory holds state, else starts fresh; ERRORED also
            # restarts failed trials (e.g. on a lost node) from their last checkpoint.
            resume="AUTO+ERRORED" if resume else False,
            raise_on_failed_trial=False,
            callbacks=[*loggers, *callbacks],
        )


def run_path(storage_path: str, run_name: str) -> str:
    """The run's folder: `run_name` under the storage path (a local path or a URI)."""
    return f"{storage_path.rstrip('/')}/{run_name}"


class ResultFiles(LoggerCallback):
    """Tune's logger of ``params.json``, ``params.pkl``, ``result.json`` and ``progress.csv``,
    writing into each trial's folder under a local storage path (the module docstring)."""

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


def _table(path: Path, nrows: int | None = None) -> pd.DataFrame:
    """A ``progress.csv`` as written, every cell its text (empty where there is none yet)."""
    if not path.exists() or not path.stat().st_size:
        return pd.DataFrame()
    return pd.read_csv(path, dtype=str, keep_default_na=False, nrows=nrows)


def _drop_from(folder: Path, step: int) -> None:
    """The trial's rows without those of iteration `step` and later, each file rewritten."""
    kept = [json.dumps(row) + "\n" for row in read_rows(folder) if row.get(TRAINING_ITERATION, 0) < step]
    write_atomically(folder / EXPR_RESULT_FILE, lambda f: f.writelines(kept))
    table = _table(folder / EXPR_PROGRESS_FILE)
    if TRAINING_ITERATION in table:
        table = table[pd.to_numeric(table[TRAINING_ITERATION], errors="coerce") < step]
        write_atomically(folder / EXPR_PROGRESS_FILE, lambda f: table.to_csv(f, index=False))
