"""The Tune run of ``rllib train file``: every experiment of a file in one
``tune.run_experiments`` call, in a Ray session that joins a cluster or starts a local Ray.

All experiments share one run folder (``storage_path/run_name``); the run writes each trial's
results there (:mod:`rllib_geppo.cli.result_files`, and Tune's TensorBoard logger), shows the
progress table (:mod:`rllib_geppo.cli.progress`) and takes the callbacks for resumes, stops and
stranded trials.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import ExperimentSpec
from rllib_geppo.cli.preflight import connection_failure
from rllib_geppo.cli.progress import BudgetReporter
from rllib_geppo.cli.result_files import ResultFiles
from rllib_geppo.cli.trainables import trainable, tune_config
from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TIME_KEY

log = logging.getLogger(__name__)


PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    STEPS_KEY: "env steps",
    RETURN_KEY: "return",
    TIME_KEY: "time (s)",
}


def tune_experiments(specs: Sequence[ExperimentSpec], run_name: str, storage_path: str) -> list:
    """One tune.Experiment per spec, all sharing the directory `storage_path/run_name`.

    Tune uploads the files the driver writes (TensorBoard's, the error files; under cloud
    storage the results too) from the staging directory of the *first* experiment only:
    experiments with their own names would keep only their checkpoints. So all share one name,
    and trial names carry the experiment's. The staging path embeds the second each Experiment
    was created in; in the rare case that creating them spans a second boundary, build them
    again. Needs Ray to be initialised.
    """
    for _ in range(3):
        experiments = [_tune_experiment(s, run_name, storage_path) for s in specs]
        if len({e.local_path for e in experiments}) == 1:
            return experiments
    raise RuntimeError("could not give the experiments one Tune staging directory")


def _tune_experiment(spec: ExperimentSpec, run_name: str, storage_path: str) -> Any:
    from ray import tune

    # The class, not its name: Tune would otherwise import every RLlib algorithm to find it.
    run = trainable(spec.run, spec.name)
    algorithm = isinstance(run, type)  # function trainables (SB3PPO) save no checkpoints
    return tune.Experiment(
        name=run_name,
        run=run,
        stop=spec.stop,
        config=tune_config(run, spec.config),
        num_samples=spec.num_samples,
        max_failures=spec.max_failures,
        storage_path=storage_path,
        checkpoint_config=tune.CheckpointConfig(**{"checkpoint_at_end": algorithm, **spec.checkpoint_config}),
        trial_name_creator=functools.partial(_trial_name, spec.name),
    )


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
    environment = {"RAY_AIR_NEW_OUTPUT": os.environ.get("RAY_AIR_NEW_OUTPUT", "0")}
    with _environ(**environment, TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=str(int(local))):
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


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Environment variables set for the block, as they were after it."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value


def run_path(storage_path: str, run_name: str) -> str:
    """The run's folder: `run_name` under the storage path (a local path or a URI)."""
    return f"{storage_path.rstrip('/')}/{run_name}"


@contextmanager
def ray_session(
    address: str | None, quiet: bool = False, runtime_env: dict[str, Any] | None = None
) -> Iterator[None]:
    """Joins the Ray cluster at `address`, or starts a local Ray, with the job's `runtime_env`
    (the env modules' :meth:`EnvModules.runtime_env`); shuts down on exit. ``quiet`` keeps Ray's
    own notices ("Started a local Ray instance") out."""
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
