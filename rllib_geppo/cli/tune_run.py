"""The Tune run of ``rllib train file``: every experiment of a file in one
``tune.run_experiments`` call, in a Ray session that joins a cluster or starts a local Ray.

All experiments share one run folder (``storage_path/run_name``); the run writes each trial's
results there (:mod:`rllib_geppo.cli.result_files`), shows the progress table
(:mod:`rllib_geppo.cli.progress`) and takes the callbacks for resumes, stops and stranded trials.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rllib_geppo.cli.checkpoints import ResumeFromCheckpoints
from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import ExperimentSpec
from rllib_geppo.cli.interrupt import GracefulStop
from rllib_geppo.cli.preflight import connection_failure
from rllib_geppo.cli.progress import BestReturns, BudgetReporter
from rllib_geppo.cli.quiet import QuietConsole
from rllib_geppo.cli.result_files import ProgressCSV, ResultJSON
from rllib_geppo.cli.stranded import StrandedTrials
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

    Tune 2.60 uploads the driver-side results (result.json, progress.csv, params.json) from the
    staging directory of the *first* experiment only: experiments with their own names would
    keep only their checkpoints. So all share one name, and trial names carry the experiment's.
    The staging path embeds the second each Experiment was created in; in the rare case that
    creating them spans a second boundary, build them again. Needs Ray to be initialised.
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
    specs: Sequence[ExperimentSpec],
    run_name: str,
    storage_path: str,
    resume: bool,
    best_returns: BestReturns | None = None,
    resume_from: Mapping[str, Path] | None = None,
    graceful_stop: GracefulStop | None = None,
    stranded: StrandedTrials | None = None,
) -> list:
    """Runs all experiments as one Tune run (Ray must be initialised) and returns its trials.

    One `tune.run_experiments` call, not one Tuner per experiment: a Tuner takes a single
    trainable and param space, while run_experiments schedules the trials of every experiment
    (each with its own algorithm, stop criteria and checkpointing) in one TuneController that
    shares the cluster, shows one progress table and resumes as a whole.
    """
    from ray import tune

    # Tune's new output engine cannot be told which metrics to show when given several
    # experiments; the classic reporter can. Users can still opt in with RAY_AIR_NEW_OUTPUT=1.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
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
        # GracefulStop last: it asks for a checkpoint after the loggers have written the result.
        callbacks=[
            c
            for c in (
                best_returns,
                resume_from and ResumeFromCheckpoints(resume_from),
                ResultJSON(),
                ProgressCSV(),
                stranded,
                graceful_stop,
            )
            if c
        ],
    )


def run_path(storage_path: str, run_name: str) -> str:
    """The run's folder: `run_name` under the storage path (a local path or a URI)."""
    return f"{storage_path.rstrip('/')}/{run_name}"


@contextmanager
def ray_session(
    address: str | None, console: QuietConsole | None = None, runtime_env: dict[str, Any] | None = None
) -> Iterator[None]:
    """Joins the Ray cluster at `address`, or starts a local Ray, with the job's `runtime_env`
    (the env modules' :meth:`EnvModules.runtime_env`); shuts down on exit."""
    import ray

    # "local", not None: ray.init() would silently join a cluster started on this machine.
    try:
        ray.init(address=address or "local", runtime_env=runtime_env)
    except ConnectionError as e:  # e.g. the cluster went away after check_reachable()
        if address is None:
            raise
        raise UserError(connection_failure(address, e)) from None
    if console is not None:
        console.refresh()  # Ray's logging handlers, created by ray.init
    log.info("Ray resources: %s", ray.cluster_resources())
    try:
        yield
    finally:
        ray.shutdown()
