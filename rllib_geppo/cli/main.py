"""`rllib train file <yaml>`: run RLlib tuned-example YAML files through Ray Tune.

Ray 2.60 ships no `rllib` command, so this package provides one that reads RLlib's old
tuned-example format: a mapping of experiment name to `run`, `env`, `stop`, `config` and optional
`num_samples`, `checkpoint_config` and `max_failures`. Every experiment in a file runs in one
Tune run.

Input is validated before anything starts: bad input exits with code 2 and one message naming
the file, the key and the fix (a `UserError`); a failed trial exits with code 1, a run stopped
by Ctrl+C or SIGTERM with 130 or 143 (:mod:`rllib_geppo.cli.interrupt`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import logging
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import yaml


from rllib_geppo.cli.checkpoints import ResumeFromCheckpoints, check_run_checkpoints, newest_checkpoints
from rllib_geppo.cli.env_modules import prepare_env_modules
from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import (
    ExperimentSpec,
    apply_overrides,
    load_experiments,
    resolve_trials,
    select_experiments,
)
from rllib_geppo.cli.trainables import to_algorithm_config, trainable
from rllib_geppo.cli.validation import validate_experiment
from rllib_geppo.cli.preflight import (
    check_cluster_resources,
    check_reachable,
    check_resources,
    check_resume,
    check_token,
    connection_failure,
    machine_cpus,
)
from rllib_geppo.cli.interrupt import GracefulStop, stop_exit_code
from rllib_geppo.cli.progress import BestReturns, BudgetReporter
from rllib_geppo.cli.result_files import ProgressCSV, ResultJSON
from rllib_geppo.cli.resume import (
    check_run_lock, check_unchanged, mark_finished_trials, order_as_created, run_lock, saved_stops,
    saved_trials,
)
from rllib_geppo.cli.quiet import QuietConsole, quiet_console
from rllib_geppo.cli.stranded import StrandedTrials
from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TIME_KEY

log = logging.getLogger(__name__)

PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    STEPS_KEY: "env steps",
    RETURN_KEY: "return",
    TIME_KEY: "time (s)",
}


# --------------------------------------------------------------------------------------------
# Running


def dry_run_report(specs: Sequence[ExperimentSpec], trials: Mapping[str, list[dict]]) -> str:
    """The resolved experiments as YAML (machine-readable: tests and users can load it)."""
    doc = {
        s.name: dict(run=s.run, stop=s.stop, num_trials=len(trials[s.name]), trials=trials[s.name])
        for s in specs
    }
    total = sum(len(t) for t in trials.values())
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    return f"{body}# {total} trial(s) in {len(specs)} experiment(s); dry run, nothing started.\n"


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
        config=to_algorithm_config(spec.config) if algorithm else spec.config,
        num_samples=spec.num_samples,
        max_failures=spec.max_failures,
        storage_path=storage_path,
        checkpoint_config=tune.CheckpointConfig(
            **{"checkpoint_at_end": algorithm, **spec.checkpoint_config}
        ),
        trial_name_creator=functools.partial(_trial_name, spec.name),
    )


def _trial_name(experiment: str, trial: Any) -> str:
    return f"{experiment}_{trial.trial_id}"


def run_experiments(
    specs: Sequence[ExperimentSpec], run_name: str, storage_path: str, resume: bool,
    best_returns: BestReturns | None = None, resume_from: Mapping[str, Path] | None = None,
    graceful_stop: GracefulStop | None = None, stranded: StrandedTrials | None = None,
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
            results_dir=_join(storage_path, run_name), stops={s.name: s.stop for s in specs},
            metric_columns=PROGRESS_COLUMNS, max_report_frequency=30,
        ),
        verbose=1,
        # AUTO resumes if the run directory holds state, else starts fresh; ERRORED also
        # restarts failed trials (e.g. on a lost node) from their last checkpoint.
        resume="AUTO+ERRORED" if resume else False,
        raise_on_failed_trial=False,
        # GracefulStop last: it asks for a checkpoint after the loggers have written the result.
        callbacks=[c for c in (best_returns, resume_from and ResumeFromCheckpoints(resume_from),
                               ResultJSON(), ProgressCSV(), stranded, graceful_stop) if c],
    )


def _join(storage_path: str, run_name: str) -> str:
    return f"{storage_path.rstrip('/')}/{run_name}"


@contextmanager
def ray_session(address: str | None, console: QuietConsole | None = None,
                runtime_env: dict[str, Any] | None = None) -> Iterator[None]:
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


def trial_status(trial: Any) -> str:
    """Tune's status, except that a trial stopped by a signal (not by its criteria) is
    INTERRUPTED, and one that reached its criteria without sampling an env step has failed."""
    if trial.status == "TERMINATED" and not (trial.last_result or {}).get("done"):
        return "INTERRUPTED"
    if trial.status == "TERMINATED" and sampled_nothing(trial):
        return "ERROR"
    return trial.status


def sampled_nothing(trial: Any) -> bool:
    """Whether a trial that samples from environments (not offline data) reported no env step:
    every sample failed, e.g. an environment that fails whenever it runs, with stop criteria
    that came before GePPO's ``max_failed_samples_in_a_row``."""
    offline = trial.config.get("input_", trial.config.get("input", "sampler")) != "sampler"
    return not offline and (trial.last_result or {}).get(STEPS_KEY) == 0


def trial_summary(trial: Any, best: float | None = None) -> str:
    """One line: trial, status, best mean return (``best``, from :class:`BestReturns`), env
    steps, last checkpoint (or the error's message and file)."""
    steps = (trial.last_result or {}).get(STEPS_KEY)
    parts = [
        f"{trial}: {trial_status(trial)}",
        f"best return {best:.2f}" if best is not None else "best return n/a",
        f"env steps {int(steps)}" if steps is not None else "env steps n/a",
        f"checkpoint {trial.checkpoint.path}" if trial.checkpoint else "no checkpoint",
    ]
    if trial.status == "TERMINATED" and sampled_nothing(trial):
        parts.append("it sampled no env step: every sample failed (the EnvRunners' errors are "
                     "above); fix the environment and start a new run")
    if trial.run_metadata.error_filename:
        # Where Tune copied it with the trial's results (error_file is Ray's session folder).
        error_file = Path(trial.path, trial.run_metadata.error_filename)
        message = error_message(error_file, getattr(trial, "error_file", None))
        if message:
            parts.append(message)
        parts.append(f"error {error_file}")  # last, whole: the path is what scripts read
    return ", ".join(parts)


def error_message(*error_files: str | Path | None) -> str | None:
    """The error of the trial's last failure, from the first readable error file that holds
    one: ``module.Type: `` and the first line of its message, whole; None where none does."""
    for text in filter(None, map(error_text, error_files)):
        message = exception_line(text)
        if message:
            return message
    return None


def error_text(path: str | Path | None) -> str | None:
    """A trial's error file, whole; None where there is none or it cannot be read."""
    try:
        return Path(path).read_text(errors="replace") if path else None
    except OSError:
        return None


def exception_line(error_text: str) -> str | None:
    """The first line of the last failure's exception in Tune's error file: a ``Failure # n``
    header per failure, then Ray's traceback (indented frames), then the exception, whose
    message may go on over more lines. Without a traceback: the failure's first line."""
    lines = last_failure(error_text)
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = lines[frames[-1] + 1:] if frames else lines
    return next((line.strip() for line in after if line.strip() and not line[0].isspace()), None)


def last_failure(error_text: str) -> list[str]:
    """The lines of the last failure in Tune's error file (all of them if it has no header)."""
    lines = error_text.splitlines()
    failures = [i for i, line in enumerate(lines) if line.startswith("Failure # ")]
    return lines[failures[-1] + 1:] if failures else lines


# --------------------------------------------------------------------------------------------
# Command line


def _prog() -> str:
    """`rllib`, `rllib-geppo` or `python -m rllib_geppo`, as invoked (`rllib` when embedded)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and main_spec.name == "rllib_geppo.__main__":
        return "python -m rllib_geppo"
    name = Path(sys.argv[0]).name
    return name if name in ("rllib", "rllib-geppo") else "rllib"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Train GePPO and RLlib's built-in algorithms from tuned-example YAML files.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,report}")
    train = commands.add_parser("train", help="train from a YAML file: train file <path>")
    train_commands = train.add_subparsers(dest="train_command", required=True, metavar="{file}")
    file = train_commands.add_parser(
        "file",
        help="run every experiment of a tuned-example YAML file as one Tune run",
        description="Run every experiment of a tuned-example YAML file as one Ray Tune run.",
    )
    file.add_argument("file", help="tuned-example YAML file, e.g. tuned_examples/geppo_hopper.yaml")
    file.add_argument(
        "--address", help="join this Ray cluster (e.g. auto); default: start a local Ray"
    )
    file.add_argument(
        "--storage-path", default="results",
        help="where Tune writes results and checkpoints (default: ./results)",
    )
    file.add_argument(
        "--dry-run", action="store_true", help="validate, print the resolved trials as YAML, stop"
    )
    file.add_argument(
        "--config", "-c", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value in every experiment; VALUE is YAML, dots reach nested keys "
        "(e.g. -c lr=1e-4 -c model_config.fcnet_hiddens=[32,32]); repeatable",
    )
    file.add_argument(
        "--stop", action="append", default=[], metavar="KEY=VALUE",
        help="add or override a stop criterion, e.g. --stop training_iteration=5; repeatable",
    )
    file.add_argument("--num-samples", type=int, help="override num_samples of every experiment")
    file.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import this module first, here and in every Ray worker: one that registers envs "
        "(tune.register_env, gymnasium's register) that the file names; a module beside the "
        "file is found there; repeatable",
    )
    file.add_argument(
        "--experiment", "-e", action="append", default=[], metavar="NAME",
        help="run only this experiment of the file; a shell-style pattern ('walker2d-*') runs "
             "every match; repeatable",
    )
    file.add_argument(
        "--name", help="run directory under --storage-path (default: the file's name without .yaml)"
    )
    file.add_argument(
        "--resume", action="store_true",
        help="resume the run in --storage-path/--name: unfinished and failed trials continue",
    )
    file.add_argument(
        "--skip-damaged-checkpoints", action="store_true",
        help="with --resume: a trial whose newest checkpoint cannot be read continues from its "
        "previous intact checkpoint (default: exit naming the damaged file)",
    )
    file.add_argument(
        "--verbose", "-v", action="store_true",
        help="show every message of Ray, RLlib and Tune (default: known-harmless ones are hidden)",
    )
    file.set_defaults(handler=train_file)
    # Its arguments, --help included, are parsed by rllib_geppo.report once imported.
    commands.add_parser(
        "report", add_help=False, help="tables and plots from results (report --help)"
    )
    return parser


def train_file(args: argparse.Namespace) -> int:
    """`train file`: validate everything, then print (--dry-run) or run."""
    specs = select_experiments(load_experiments(args.file), args.experiment, args.file)
    specs = [apply_overrides(s, args.config, args.stop, args.num_samples) for s in specs]
    envs = {t["env"]: s.where("config.env") for s in specs for t in resolve_trials(s)
            if isinstance(t.get("env"), str)}
    env_modules = prepare_env_modules(args.file, args.imports, envs, cluster=bool(args.address))
    trials = {s.name: validate_experiment(s) for s in specs}
    if args.dry_run:
        sys.stdout.write(dry_run_report(specs, trials))
        return 0
    storage = args.storage_path  # a local path must be absolute for Tune; URIs pass through
    storage = storage if "://" in storage else os.path.abspath(storage)
    run_name = args.name or Path(args.file).stem
    local = "://" not in storage
    if local:
        check_run_lock(Path(_join(storage, run_name)))
    resume_from = preflight(args, specs, trials, storage, run_name)
    if args.resume and local:
        specs = resumed_specs(args, specs, trials, _join(storage, run_name))
    elif args.resume:
        log.warning("--resume from %s: Tune reads the run there; the checks of a local run (its "
                    "saved settings, checkpoints and lock) do not apply to remote storage.", storage)
    log.info("%s: %d trial(s) in %d experiment(s); results in %s",
             args.file, sum(map(len, trials.values())), len(specs), _join(storage, run_name))
    with (quiet_console(not args.verbose) as console,
          ray_session(args.address, console, env_modules.runtime_env())):
        check_cluster_resources(specs, trials, args.address)
        best_returns, stop, nodes_before = BestReturns(), GracefulStop(), dead_nodes()
        try:
            with run_lock(Path(_join(storage, run_name))) if local else nullcontext():
                results = run_experiments(specs, run_name, storage, args.resume, best_returns,
                                          resume_from, stop,
                                          StrandedTrials(resume_command(args, run_name)))
        finally:
            stop.restore()
        print("\nSummary:")
        for trial in results:
            print("  " + trial_summary(trial, best_returns.best.get(trial.trial_id)))
        lost = lost_nodes(results, nodes_before)
    return exit_status(args, run_name, results, stop.signal, lost)


def exit_status(args: argparse.Namespace, run_name: str, results: Sequence[Any],
                signum: int | None, lost: Mapping[str, str] | None) -> int:
    """The command's exit status, after the warning that says how to go on: 130 or 143 for a
    run stopped by Ctrl+C or SIGTERM (:mod:`rllib_geppo.cli.interrupt`), 1 for a failed trial
    (naming the nodes the cluster lost, from :func:`lost_nodes`), else 0."""
    statuses = {trial_status(t) for t in results}
    if "INTERRUPTED" in statuses:
        how = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM"}.get(signum, "a signal")
        log.warning("Stopped by %s. Continue with: %s", how, resume_command(args, run_name))
        return stop_exit_code(signum) if signum else 130
    if "ERROR" not in statuses:
        return 0
    if lost:
        log.warning("The cluster lost %d node(s) during the run, at %s. The trials that failed "
                    "with them continue from their last checkpoint, once the cluster has room for "
                    "them, with: %s", len(lost), ", ".join(sorted(set(lost.values()))),
                    resume_command(args, run_name))
    elif lost is not None:
        log.warning("A failed trial's process went away (Ray: its actor is unavailable or died), "
                    "as when the node it runs on is lost. It continues from its last checkpoint, "
                    "once the cluster has room for it, with: %s", resume_command(args, run_name))
    return 1


#: Words of Ray's errors for an actor (a trial's process) that went away, alone or with its node.
ACTOR_LOST = ("is unavailable", "ActorUnavailableError", "ActorDiedError", "actor died", "node has died")
#: A Ray actor ID in an error message: 16 bytes in hex (node and worker IDs have 28).
ACTOR_ID = re.compile(r"\b[0-9a-f]{32}\b")
#: Ray marks a lost node dead once it has missed its heartbeats, about 15 s after the trials on
#: it failed: how long to wait for that.
NODE_DEATH_WAIT_S = 30.0


def lost_nodes(results: Sequence[Any], dead_before: Mapping[str, str]) -> dict[str, str] | None:
    """Where a failed trial's actor went away: the nodes that died since the run started (node
    id -> IP), waiting up to :data:`NODE_DEATH_WAIT_S` for Ray to mark dead the nodes those
    actors ran on; possibly none (the process alone died). None where no trial failed that way."""
    failures = [error_text(Path(t.path, t.run_metadata.error_filename)) for t in results
                if trial_status(t) == "ERROR" and t.run_metadata.error_filename]
    actors = lost_actors([text for text in failures if text])
    if actors is None:
        return None
    homes = dead_actor_nodes(actors)
    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    while True:
        dead = dead_nodes()
        new = {node: ip for node, ip in dead.items() if node not in dead_before}
        if (new and homes <= dead.keys()) or time.monotonic() > deadline:
            return new
        time.sleep(1.0)


def lost_actors(error_texts: Sequence[str]) -> set[str] | None:
    """The IDs of the actors that went away in the last failures of these error files (Tune's
    ``error.txt``); None where no failure was such a loss."""
    lost = [text for text in error_texts
            if any(word in (exception_line(text) or "") for word in ACTOR_LOST)]
    if not lost:
        return None
    # The ID is in the exception's first line (ActorUnavailableError) or further down its
    # message (ActorDiedError: "actor_id: ...").
    return {actor for text in lost for actor in ACTOR_ID.findall("\n".join(last_failure(text)))}


def dead_actor_nodes(actor_ids: set[str]) -> set[str]:
    """The nodes the dead ones of these actors ran on, from the GCS's actor table, which keeps
    dead actors. (Ray's public state API, ``ray.util.state.get_actor``, needs the dashboard,
    which a cluster may run without.) An actor not found there, or not dead, adds no node; so
    does every actor if the table cannot be read."""
    from ray._private import state

    try:
        infos = [state.actors(actor_id) for actor_id in actor_ids]
    except Exception as e:  # noqa: BLE001 - only the wait's precision depends on it
        log.debug("Ray's actor table could not be read: %s", e)
        return set()
    return {node for info in infos if info.get("State") == "DEAD"
            and (node := info.get("Address", {}).get("NodeID"))}


def dead_nodes() -> dict[str, str]:
    """The nodes of the Ray cluster that are no longer alive: node id -> IP address."""
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if not n["Alive"]}


def preflight(
    args: argparse.Namespace, specs: Sequence[ExperimentSpec], trials: Mapping[str, list[dict]],
    storage: str, run_name: str,
) -> dict[str, Path]:
    """The checks that need no Ray: the run to resume and its checkpoints, the cluster's
    address, and (for a local Ray) the trials' CPUs against this machine's. Resources are
    checked again once Ray runs. Returns the checkpoint each resumed trial continues from (and
    each trial that finished after the run's state was saved shows).
    """
    resume_from: dict[str, Path] = {}
    if args.resume:
        run_dir = _join(storage, run_name)
        check_resume(storage, run_name, run_dir)
        finished = []
        if "://" not in storage:  # Tune's saved state is a local file
            finished = mark_finished_trials(Path(run_dir))
            order_as_created(Path(run_dir))
        resume_from = check_run_checkpoints(
            run_dir, resume_command(args, run_name), args.skip_damaged_checkpoints
        ) | newest_checkpoints(run_dir, finished)
    elif args.skip_damaged_checkpoints:
        raise UserError("--skip-damaged-checkpoints applies to --resume only.")
    if args.address:
        check_reachable(args.address)
        check_token(args.address)
    else:
        check_resources(specs, trials, {"CPU": machine_cpus()}, "this machine", kinds=["CPU"])
    return resume_from


def resumed_specs(args: argparse.Namespace, specs: Sequence[ExperimentSpec],
                  trials: Mapping[str, list[dict]], run_dir: str) -> list[ExperimentSpec]:
    """The experiments as the saved run holds them: options that would change the run are
    refused (:mod:`rllib_geppo.cli.resume`), and each shows the stop criteria Tune uses."""
    saved = saved_trials(Path(run_dir))
    counts = {s.name: len(trials[s.name]) for s in specs} if args.num_samples is not None else None
    check_unchanged(saved, args.experiment, args.config, args.stop, counts)
    stops = saved_stops(saved)
    resumed = []
    for spec in specs:
        spec = copy.deepcopy(spec)
        spec.stop = stops.get(spec.name, spec.stop)
        resumed.append(spec)
    return resumed


def resume_command(args: argparse.Namespace, run_name: str) -> str:
    """The command line that resumes this run, with the options it was started with."""
    argv = ["train", "file", args.file, "--storage-path", args.storage_path, "--name", run_name]
    argv += ["--address", args.address] if args.address else []
    argv += [item for module in args.imports for item in ("--import", module)]
    for option, values in (("-e", args.experiment), ("-c", args.config), ("--stop", args.stop)):
        argv += [item for value in values for item in (option, value)]
    argv += ["--num-samples", str(args.num_samples)] if args.num_samples is not None else []
    return f"{_prog()} {shlex.join([*argv, '--resume'])}"


def report_command(argv: Sequence[str]) -> int:
    """`report`: imported lazily, so that `train` never pays for plotting libraries."""
    try:
        from rllib_geppo.report import main as report
    except ModuleNotFoundError as e:
        if e.name == "rllib_geppo.report.main":
            raise UserError("the report command is not available in this installation.")
        raise UserError(f"the report command needs '{e.name}': pip install -e '.[report]' from a checkout of rllib-geppo.")
    parser = argparse.ArgumentParser(prog=f"{_prog()} report")
    report.add_report_arguments(parser)
    return report.run_report(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `rllib`, `rllib-geppo` and `python -m rllib_geppo`; returns the exit code."""
    _setup_logging()
    try:
        parser = build_parser()
        args, rest = parser.parse_known_args(argv)
        if args.command == "report":
            return report_command(rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.handler(args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    except UserError as e:
        print(f"{_prog()}: error: {e}", file=sys.stderr)
        return 2


class _StderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stderr`` is when a record comes: the quiet
    console and callers that run ``main`` more than once (tests) swap it."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _setup_logging() -> None:
    package_logger = logging.getLogger("rllib_geppo")
    if not package_logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        package_logger.addHandler(handler)
        package_logger.setLevel(logging.INFO)
