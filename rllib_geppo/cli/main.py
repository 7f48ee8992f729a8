"""`rllib train file <yaml>`: the command line: its arguments, the checks in order, the dry run
and the command that resumes a run.

Input is validated before anything starts: bad input exits with code 2 and one message naming
the file, the key and the fix (a :class:`UserError`). The Tune run is
:mod:`rllib_geppo.cli.tune_run`; the summary and the exit status (1 for a failed trial, 130 or 143
for a run stopped by Ctrl+C or SIGTERM) come from :mod:`rllib_geppo.cli.outcomes`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import yaml

from rllib_geppo.cli import resume
from rllib_geppo.cli.console import BestReturns, quiet_console
from rllib_geppo.cli.env_modules import prepare_env_modules
from rllib_geppo.cli.experiment_file import (
    ExperimentSpec,
    UserError,
    apply_overrides,
    load_experiments,
    named_by,
    resolve_trials,
    select_experiments,
)
from rllib_geppo.cli.outcomes import GracefulStop, LostNodes, exit_status, trial_summary
from rllib_geppo.cli.recorded import recorded_trials, without_recorded
from rllib_geppo.cli.stranded import StrandedTrials, check_resources
from rllib_geppo.cli.tune_run import check_reachable, ray_session, run_experiments, run_path
from rllib_geppo.cli.validation import validate_experiment

log = logging.getLogger(__name__)


def _prog() -> str:
    """`rllib`, `rllib-geppo` or `python -m rllib_geppo`, as invoked (`rllib` when embedded)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and main_spec.name == "rllib_geppo.__main__":
        return "python -m rllib_geppo"
    name = Path(sys.argv[0]).name
    return name if name in ("rllib", "rllib-geppo") else "rllib"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(), description="Train GePPO and RLlib's built-in algorithms from tuned-example YAML files."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,report}")
    train = commands.add_parser("train", help="train from a YAML file: train file <path>")
    file = train.add_subparsers(dest="train_command", required=True, metavar="{file}").add_parser(
        "file",
        help="run every experiment of a tuned-example YAML file as one Tune run",
        description="Run every experiment of a tuned-example YAML file as one Ray Tune run.",
    )
    repeatable = dict(action="append", default=[])
    file.add_argument("file", help="tuned-example YAML file, e.g. tuned_examples/geppo_hopper.yaml")
    file.add_argument("--address", help="join this Ray cluster (e.g. auto); default: start a local Ray")
    file.add_argument(
        "--storage-path", default="results", help="where results and checkpoints go (default: ./results)"
    )
    file.add_argument(
        "--name", help="run directory under --storage-path (default: the file's name without .yaml)"
    )
    file.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, print the resolved trials as YAML and the command that resumes the run, "
        "stop; with --resume, each saved trial and the checkpoint it would continue from",
    )
    file.add_argument(
        "--config",
        "-c",
        **repeatable,
        metavar="KEY=VALUE",
        help="override a config value in every experiment; VALUE is YAML, dots reach nested keys "
        "(e.g. -c lr=1e-4 -c model_config.fcnet_hiddens=[32,32]); repeatable",
    )
    file.add_argument(
        "--stop", **repeatable, metavar="KEY=VALUE", help="add or override a stop criterion; repeatable"
    )
    file.add_argument("--num-samples", type=int, help="override num_samples of every experiment")
    file.add_argument(
        "--import",
        dest="imports",
        **repeatable,
        metavar="MODULE",
        help="import this module first, here and in every Ray worker: one that registers envs "
        "(tune.register_env, gymnasium's register) that the file names; a module beside the "
        "file is found there; repeatable",
    )
    file.add_argument(
        "--experiment",
        "-e",
        **repeatable,
        metavar="NAME",
        help="run only this experiment of the file; a shell-style pattern ('walker2d-*') runs "
        "every match; repeatable",
    )
    file.add_argument(
        "--resume", action="store_true", help="continue the run in --storage-path/--name, failed trials too"
    )
    file.add_argument(
        "--skip-recorded",
        **repeatable,
        type=Path,
        metavar="DIR",
        help="leave out every trial that a finished trial under DIR ran (a trial record of "
        "'report --keep-trials', or a run's folder): same experiment and config, a stop "
        "criterion met; starts a new run of the rest; repeatable",
    )
    file.add_argument(
        "--skip-damaged-checkpoints",
        action="store_true",
        help="with --resume: a trial whose newest checkpoint cannot be read continues from its "
        "previous intact checkpoint (default: exit naming the damaged file)",
    )
    file.add_argument(
        "--verbose", "-v", action="store_true", help="show the known-harmless messages of Ray and RLlib too"
    )
    # Its arguments, --help included, are parsed by rllib_geppo.report once imported.
    commands.add_parser("report", add_help=False, help="tables and plots from results (report --help)")
    return parser


def train_file(args: argparse.Namespace) -> int:
    """`train file`: validate everything, then print (--dry-run) or run."""
    specs = select_experiments(load_experiments(args.file), args.experiment, args.file)
    specs = [apply_overrides(s, args.config, args.stop, args.num_samples) for s in specs]
    if args.skip_recorded and args.resume:
        raise UserError(
            "--skip-recorded starts a new run without the trials already recorded; --resume "
            "continues a run as it was saved. Pass one of them."
        )
    if args.skip_damaged_checkpoints and not args.resume:
        raise UserError("--skip-damaged-checkpoints applies to --resume only.")
    envs = {
        t["env"]: s.where("config.env")
        for s in specs
        for t in resolve_trials(s)
        if isinstance(t.get("env"), str)
    }
    runtime_env = prepare_env_modules(args.file, args.imports, envs, cluster=bool(args.address))
    trials = {s.name: validate_experiment(s) for s in specs}
    if args.skip_recorded:
        if not (specs := without_recorded(specs, recorded_trials(args.skip_recorded))):
            where = ", ".join(map(str, args.skip_recorded))
            log.info("%s: every trial selected is recorded under %s; nothing to run.", args.file, where)
            return 0
        trials = {s.name: validate_experiment(s) for s in specs}
        # The new run holds only the experiments with trials left, so its resume command names
        # only the -e patterns that select one of them, and no --num-samples: --resume refuses
        # patterns the run does not hold and counts that differ from its cut grids.
        kept = [name for name in args.experiment if any(named_by(s.name, [name]) for s in specs)]
        args = argparse.Namespace(**{**vars(args), "experiment": kept, "num_samples": None})
    storage = args.storage_path  # a local path must be absolute for Tune; URIs pass through
    local = "://" not in storage
    storage = os.path.abspath(storage) if local else storage
    run_name = args.name or Path(args.file).stem
    run_dir, resume_cmd = Path(run_path(storage, run_name)), resume_command(args, run_name)
    saved, resume_from = None, {}
    if local and (args.resume or not args.dry_run):
        resume.check_run_lock(run_dir)
    if local and args.resume:
        saved = resume.SavedRun.read(storage, run_name)
        # Options that would change the run are refused first: the command that the check of
        # its checkpoints prints, to continue past a damaged one, must not hold them.
        counts = {s.name: len(trials[s.name]) for s in specs} if args.num_samples is not None else None
        resume.check_unchanged(saved.trials, args.experiment, args.config, args.stop, counts)
        stops = resume.saved_stops(saved.trials)  # the stop criteria Tune uses
        specs = [dataclasses.replace(s, stop=stops.get(s.name, s.stop)) for s in specs]
        resume_from = resume.check_run_checkpoints(
            saved.unfinished(), resume_cmd, args.skip_damaged_checkpoints
        )
    if args.dry_run and saved is not None:
        sys.stdout.write(resume_dry_run(saved, specs, resume_from))
    elif args.dry_run:
        sys.stdout.write(dry_run_report(specs, trials, resume_cmd))
        if args.resume:  # remote storage, which Tune alone reads
            print(f"# --resume from {storage}: Tune reads the saved run there; its trials are not listed.")
    if args.dry_run:
        return 0
    if args.address:
        check_reachable(args.address)
    else:  # a local Ray has this machine's CPUs at most; once Ray runs, every resource is checked
        check_resources(specs, trials, "this machine", {"CPU": os.cpu_count() or 1}, kinds=["CPU"])
    if saved is not None:
        saved.save()
        resume_from |= resume.newest_checkpoints(saved.folder / folder for folder in saved.finished)
        log.info("%s: resumes the run in %s: %s", args.file, run_dir, saved.continues())
    elif args.resume:
        log.warning(
            "--resume from %s: Tune reads the run there; the checks of a local run (its "
            "saved settings, checkpoints and lock) do not apply to remote storage.",
            storage,
        )
    else:
        count = sum(map(len, trials.values()))
        log.info("%s: %d trial(s) in %d experiment(s); results in %s", args.file, count, len(specs), run_dir)
    with quiet_console(not args.verbose), ray_session(args.address, not args.verbose, runtime_env):
        check_resources(specs, trials, f"the cluster at {args.address}" if args.address else "this machine")
        best, lost, stop = BestReturns(), LostNodes(), GracefulStop()
        callbacks = [best, resume.ResumeFromCheckpoints(resume_from), StrandedTrials(resume_cmd), lost, stop]
        try:
            with resume.run_lock(run_dir) if local else nullcontext():
                results = run_experiments(specs, run_name, storage, args.resume, callbacks)
        finally:
            stop.restore()
        print("\nSummary:")
        for trial in results:
            print("  " + trial_summary(trial, best.best.get(trial.trial_id)))
        dead = lost.lost(results)
    return exit_status(resume_cmd, results, stop.signal, dead)


def resume_command(args: argparse.Namespace, run_name: str) -> str:
    """The command line that resumes this run, with the options it was started with."""
    argv = ["train", "file", args.file, "--storage-path", args.storage_path, "--name", run_name]
    argv += ["--address", args.address] if args.address else []
    argv += [item for module in args.imports for item in ("--import", module)]
    for option, values in (("-e", args.experiment), ("-c", args.config), ("--stop", args.stop)):
        argv += [item for value in values for item in (option, value)]
    argv += ["--num-samples", str(args.num_samples)] if args.num_samples is not None else []
    return f"{_prog()} {shlex.join([*argv, '--resume'])}"


def dry_run_report(specs: Sequence[ExperimentSpec], trials: Mapping[str, list[dict]], resume: str) -> str:
    """The resolved experiments as YAML (machine-readable: tests and users can load it), and
    the command that resumes the run after a stop."""
    doc = {
        s.name: dict(run=s.run, stop=s.stop, num_trials=len(trials[s.name]), trials=trials[s.name])
        for s in specs
    }
    total = sum(len(t) for t in trials.values())
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    return (
        f"{body}# {total} trial(s) in {len(specs)} experiment(s); dry run, nothing started.\n"
        f"# After a stop, resume the run with: {resume}\n"
    )


def resume_dry_run(
    saved: resume.SavedRun, specs: Sequence[ExperimentSpec], resume_from: Mapping[str, Path]
) -> str:
    """What `--resume` would do, as YAML, after the checks of the saved run (its lock, settings,
    state and checkpoints): each saved trial's status and the checkpoint it continues from
    (``start``: none yet; null: finished), in the order the run created them."""
    stops = {s.name: s.stop for s in specs}
    doc: dict[str, dict] = {}
    for t in saved.trials:
        done = saved.is_finished(t)
        entry = doc.setdefault(t.experiment, dict(stop=stops.get(t.experiment, t.stop), trials=[]))
        start = resume_from[t.folder].name if t.folder in resume_from else "start"
        status, start = ("TERMINATED", None) if done else (t.status, start)
        entry["trials"].append(dict(folder=t.folder, status=status, continues_from=start))
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    return f"{body}# --resume of {saved.folder}: {saved.continues()}; dry run, nothing started.\n"


def report_command(argv: Sequence[str]) -> int:
    """`report`: imported lazily, so that `train` never pays for plotting libraries."""
    try:
        from rllib_geppo.report import main as report
    except ModuleNotFoundError as e:
        if e.name == "rllib_geppo.report.main":
            raise UserError("the report command is not available in this installation.") from None
        raise UserError(
            f"the report command needs '{e.name}': pip install -e '.[report]' from a checkout of rllib-geppo."
        ) from None
    parser = argparse.ArgumentParser(prog=f"{_prog()} report")
    report.add_report_arguments(parser)
    return report.run_report(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `rllib`, `rllib-geppo` and `python -m rllib_geppo`; returns the exit code."""
    # The command's own log lines, on the stderr it was started with, for as long as it runs.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package_logger = logging.getLogger("rllib_geppo")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    try:
        parser = build_parser()
        args, rest = parser.parse_known_args(argv)
        if args.command == "report":
            return report_command(rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return train_file(args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    except UserError as e:
        print(f"{_prog()}: error: {e}", file=sys.stderr)
        return 2
    finally:
        package_logger.removeHandler(handler)
