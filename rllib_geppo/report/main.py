"""``rllib-geppo report``: the paper's Table 1 and figures from Ray Tune result folders.

Reads every Tune trial folder (``params.json`` + ``result.json``) and trial record
(``--keep-trials``) under the given paths, groups trials by environment and variant, aligns
their curves on env steps and writes into ``--out``: ``table.md``, ``table.csv``,
``trials.csv`` (each trial's figures), ``stability.csv`` (the TV of
the last updates against its target, the return's late change: the paper's Figure 2),
``returns.png`` and, when any trial logged it, ``tv.png``. With rows in two or more
environments, ``table.md`` ends with each variant's mean gain in average return over each other
across them (also in ``mean_gains.csv``: the paper's "on average, GePPO improves ... by 31%").
With ``--paper``, ``table.md`` opens with the paper's Table 1 beside ours (also in
``paper.csv``) and the return curves mark the paper's final returns
(:mod:`rllib_geppo.report.paper`).

Trials of one environment and variant that differ in any setting other than the seed are
never averaged as seeds of one: each set is a row of its own, labelled with the settings it
differs in ("GePPO lr=0.001"; :mod:`rllib_geppo.report.settings`). ``--group-by`` chooses the
settings instead, and ``--pool`` joins rows on purpose.

Variants: a GePPO trial with ``sample_reuse`` is "GePPO" ("GePPO overlapped" when its updates
ran with a sampling lag, ``overlap_sampling``'s default wherever there is an EnvRunner); without
it, "PPO" (fixed lr) or "PPO-Adapt" (``adaptive_lr``); RLlib's own PPO is "RLlib PPO",
Stable-Baselines3's (``run: SB3PPO``) "SB3 PPO"; any other trainable keeps its name.

Given reports' ``table.csv`` files instead, it joins their rows, relabelled by ``--pool``, and
writes their mean gains across environments (:mod:`~rllib_geppo.report.tables`): the paper's
six-task means from studies that ran apart.

This module is the command line alone; the package's docstring says which module does what.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rllib_geppo.records.result_keys import EVALUATION_RETURN_KEY, RETURN_KEY
from rllib_geppo.records.trial_record import write_record
from rllib_geppo.report.build import Report, build_report
from rllib_geppo.report.files import write_csv, write_report
from rllib_geppo.report.grouping import BASE_LABELS, load_trials, pool_variants, setting_names
from rllib_geppo.report.markdown import render_markdown
from rllib_geppo.report.stats import mean_gains
from rllib_geppo.report.tables import joined_rows, render_tables
from rllib_geppo.report.trials import ReportError, Trial

logger = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2


def _group_by(text: str) -> str:
    """Parse ``variant``, ``experiment`` or ``SETTING,SETTING,...``."""
    if not setting_names(text) or (text not in BASE_LABELS and set(setting_names(text)) & set(BASE_LABELS)):
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(BASE_LABELS)} alone, or setting names such as lr,num_epochs; got {text!r}"
        )
    return text.strip()


def _pool(text: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``LABEL=VARIANT,VARIANT,...`` (commas inside brackets, as in a label's
    ``fcnet_hiddens=[64,64]``, do not split)."""

    def members(value: str) -> tuple[str, ...]:
        names = tuple(m.strip() for m in re.split(r",(?![^\[]*\])", value) if m.strip())
        if not names:
            raise ValueError(value)
        return names

    return _name_and_value(text, "LABEL=VARIANT,VARIANT,...", members)


def _target(text: str) -> tuple[str, float]:
    """Parse ``ENV=RETURN``."""

    def finite(value: str) -> float:
        if not math.isfinite(number := float(value)):
            raise ValueError(value)
        return number

    return _name_and_value(text, "ENV=RETURN (e.g. Hopper-v5=2500)", finite)


def _name_and_value(text: str, form: str, parse: Callable[[str], Any]) -> tuple[str, Any]:
    """``NAME=VALUE`` as ``(NAME, parse(VALUE))``, split at the first "=", or an argparse error
    that shows ``form``."""
    name, _, value = text.partition("=")
    try:
        if not name.strip():
            raise ValueError(name)
        return name.strip(), parse(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}") from None


def _env_steps(text: str) -> int:
    """Parse an env-step count such as ``300000`` or ``3e5``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of env steps: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the budget must be positive: {text!r}")
    return int(value)


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``report`` command's arguments."""
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="RESULTS_DIR",
        help="Tune results, experiment or trial directories (searched recursively); or reports' "
        "table.csv files, whose rows are joined (relabelled by --pool) and compared across "
        "environments",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("report"),
        help="output folder for table.md, table.csv, trials.csv, stability.csv, "
        "mean_gains.csv, returns.png, tv.png (default: ./report)",
    )
    parser.add_argument(
        "--budget",
        type=_env_steps,
        default=None,
        help="env steps at which 'final' is read, for every environment; trials "
        "that end before it are flagged and excluded (default: per "
        "environment, the largest budget every complete trial reaches)",
    )
    parser.add_argument(
        "--baseline",
        default="PPO",
        help="variant the others are compared with (default: PPO, i.e. GePPO "
        "with sample_reuse=False; 'RLlib PPO' compares with RLlib's PPO)",
    )
    parser.add_argument(
        "--group-by",
        type=_group_by,
        default="variant",
        metavar="variant|experiment|SETTING,...",
        help="label trials by algorithm variant (default) or by the YAML "
        "experiment they ran in, each followed by every setting their "
        "trials differ in besides the seed (e.g. 'GePPO lr=0.001'); or by "
        "variant and the named settings alone (e.g. lr,num_epochs; "
        "model_config covers its entries), pooling trials that differ in "
        "others",
    )
    parser.add_argument(
        "--pool",
        type=_pool,
        action="append",
        default=[],
        metavar="LABEL=VARIANT,...",
        help="report these variants as one, labelled LABEL, their trials "
        "counted together (repeatable); --baseline may name a LABEL",
    )
    parser.add_argument(
        "--target",
        type=_target,
        action="append",
        default=[],
        metavar="ENV=RETURN",
        help="a return to reach in ENV (repeatable): table.md adds where each "
        "variant's mean curve first reaches it, in env steps and training time",
    )
    parser.add_argument(
        "--paper",
        action="store_true",
        help="put the paper's Table 1 (MuJoCo v3, 1M env steps, 5 seeds) beside "
        "our GePPO and PPO rows of its six tasks, with the differences in %%; "
        "needs the default baseline PPO (use with --budget 1e6)",
    )
    parser.add_argument(
        "--keep-trials",
        type=Path,
        metavar="DIR",
        help="also write into DIR a record of each finished trial the table averages: its "
        "params.json and its rows cut to what the report reads (result.json.gz, tens of kB), small "
        "enough for git; the report reads DIR as a results folder, and rllib train file "
        "--skip-recorded DIR runs only the trials no record holds",
    )
    parser.add_argument(
        "--return-key",
        default=RETURN_KEY,
        help="'/'-separated result key of the return curve "
        f"(default: {RETURN_KEY}; {EVALUATION_RETURN_KEY} "
        "reads the evaluation EnvRunners' returns)",
    )


def run_report(args: argparse.Namespace) -> int:
    """Build and write the report; returns the process exit code (2: unusable input)."""
    if any(path.is_file() for path in args.paths):
        return run_tables_report(args)
    try:
        trials = pool_variants(load_trials(args.paths, args.return_key, args.group_by), args.pool)
        report = build_report(
            trials, args.budget, args.baseline, args.return_key, args.paper, dict(args.target)
        )
    except ReportError as err:
        logger.error("%s", err)
        return EXIT_BAD_INPUT
    written = write_report(report, args.out)
    print(render_markdown(report))
    print("Wrote " + ", ".join(str(p) for p in written))
    if args.keep_trials:
        kept = keep_trials(trials, report, args.keep_trials)
        print(f"Kept {kept} trial record(s) in {args.keep_trials}")
    return 0


def run_tables_report(args: argparse.Namespace) -> int:
    """Reports' ``table.csv`` files joined (:mod:`rllib_geppo.report.tables`): their rows,
    relabelled by ``--pool``, and the mean gains across environments."""
    try:
        if not all(path.is_file() for path in args.paths):
            raise ReportError(
                "pass reports' table.csv files or result folders, not both (a trial's result.json: "
                "pass its folder)"
            )
        folder_only = {
            "--budget": args.budget is not None,
            "--paper": args.paper,
            "--target": args.target,
            "--keep-trials": args.keep_trials,
            "--baseline": args.baseline != "PPO",
            "--group-by": args.group_by != "variant",
            "--return-key": args.return_key != RETURN_KEY,
        }
        if given := [option for option, value in folder_only.items() if value]:
            raise ReportError(f"{', '.join(given)} read result folders; table.csv files hold rows only")
        written = {(args.out / name).resolve() for name in ("table.csv", "mean_gains.csv")}
        if overwritten := [str(p) for p in args.paths if p.resolve() in written]:
            raise ReportError(
                f"--out {args.out} would overwrite {', '.join(overwritten)}; pass another --out"
            )
        rows = joined_rows(args.paths, args.pool)
    except ReportError as err:
        logger.error("%s", err)
        return EXIT_BAD_INPUT
    gains = mean_gains(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text := render_tables(rows, gains, args.paths))
    write_csv(rows, args.out / "table.csv")
    write_csv(gains, args.out / "mean_gains.csv")
    print(text)
    print(f"Wrote {args.out / 'table.md'}, {args.out / 'table.csv'}, {args.out / 'mean_gains.csv'}")
    return 0


def keep_trials(trials: Sequence[Trial], report: Report, out: Path) -> int:
    """Write a record (:mod:`rllib_geppo.records.trial_record`) of each trial that the report's
    rows average and that finished (Tune's status TERMINATED), leaving records already in
    ``out`` as they are; returns how many of those trials ``out`` holds."""
    averaged = set(report.trials.trial)
    out = out.resolve()
    kept = 0
    for trial in trials:
        if trial.path.name not in averaged:
            continue
        if trial.status != "TERMINATED":
            logger.info("%s: not recorded, not finished (Tune's status: %s)", trial.path.name, trial.status)
            continue
        if trial.path.parent != out:
            write_record(trial.path, out, {"trainable_name": trial.algorithm, "status": trial.status})
        kept += 1
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rllib_geppo.report.main``."""
    parser = argparse.ArgumentParser(prog="rllib-geppo report", description=__doc__.split("\n\n")[0])
    add_report_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    return run_report(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
