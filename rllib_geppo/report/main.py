"""``rllib-geppo report``: the paper's Table 1 and figures from Ray Tune result folders.

The command line: its arguments, the files it writes into ``--out`` (docs/command_line.md says
what each holds) and its exit status. Given reports' ``table.csv`` files instead of result
folders, it joins their rows, relabelled by ``--pool``, with their mean gains across
environments: the paper's six-task means from studies that ran apart.
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

import pandas as pd

from rllib_geppo.records.result_keys import EVALUATION_RETURN_KEY, RETURN_KEY, TV_KEY
from rllib_geppo.records.trial_record import write_record
from rllib_geppo.report.build import Report, build_report, joined_rows
from rllib_geppo.report.grouping import BASE_LABELS, load_trials, pool_variants, setting_names
from rllib_geppo.report.markdown import render_markdown, render_tables
from rllib_geppo.report.plots import figures
from rllib_geppo.report.stats import mean_gains
from rllib_geppo.report.trials import ReportError, Trial

logger = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2
#: The options that read result folders (table.csv files hold rows only).
FOLDER_OPTIONS = ("budget", "paper", "target", "keep_trials", "baseline", "group_by", "return_key")


def _group_by(text: str) -> str:
    """Parse ``variant``, ``experiment`` or ``SETTING,SETTING,...``."""
    if not setting_names(text) or (text not in BASE_LABELS and set(setting_names(text)) & set(BASE_LABELS)):
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(BASE_LABELS)} alone, or setting names such as lr,num_epochs; got {text!r}"
        )
    return text.strip()


def _members(value: str) -> tuple[str, ...]:
    """``VARIANT,VARIANT,...`` (commas inside brackets, as in ``fcnet_hiddens=[64,64]``, do not split)."""
    if not (names := tuple(m.strip() for m in re.split(r",(?![^\[]*\])", value) if m.strip())):
        raise ValueError(value)
    return names


def _finite(value: str) -> float:
    if not math.isfinite(number := float(value)):
        raise ValueError(value)
    return number


def _name_and(parse: Callable[[str], Any], form: str) -> Callable[[str], tuple[str, Any]]:
    """An argparse type for ``NAME=VALUE``: ``(NAME, parse(VALUE))``, split at the first "=", or
    an error that shows ``form``."""

    def name_and_value(text: str) -> tuple[str, Any]:
        name, _, value = text.partition("=")
        try:
            if not name.strip():
                raise ValueError(name)
            return name.strip(), parse(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}") from None

    return name_and_value


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
        help="env steps at which 'final' is read, for every environment; trials that end before it "
        "are flagged and excluded (default: per environment, the largest budget every complete "
        "trial reaches)",
    )
    parser.add_argument(
        "--baseline",
        default="PPO",
        help="variant the others are compared with (default: PPO, i.e. GePPO with "
        "sample_reuse=False; 'RLlib PPO' compares with RLlib's PPO)",
    )
    parser.add_argument(
        "--group-by",
        type=_group_by,
        default="variant",
        metavar="variant|experiment|SETTING,...",
        help="label trials by algorithm variant (default) or by the YAML experiment they ran in, "
        "each followed by every setting their trials differ in besides the seed (e.g. 'GePPO "
        "lr=0.001'); or by variant and the named settings alone (e.g. lr,num_epochs; "
        "model_config covers its entries), pooling trials that differ in others",
    )
    parser.add_argument(
        "--pool",
        type=_name_and(_members, "LABEL=VARIANT,VARIANT,..."),
        action="append",
        default=[],
        metavar="LABEL=VARIANT,...",
        help="report these variants as one, labelled LABEL, their trials counted together "
        "(repeatable); --baseline may name a LABEL",
    )
    parser.add_argument(
        "--target",
        type=_name_and(_finite, "ENV=RETURN (e.g. Hopper-v5=2500)"),
        action="append",
        default=[],
        metavar="ENV=RETURN",
        help="a return to reach in ENV (repeatable): table.md adds where each variant's mean "
        "curve first reaches it, in env steps and training time",
    )
    parser.add_argument(
        "--paper",
        action="store_true",
        help="put the paper's Table 1 (MuJoCo v3, 1M env steps, 5 seeds) beside our GePPO and PPO "
        "rows of its six tasks, with the differences in %%; needs the default baseline PPO (use "
        "with --budget 1e6)",
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
        help=f"'/'-separated result key of the return curve (default: {RETURN_KEY}; "
        f"{EVALUATION_RETURN_KEY} reads the evaluation EnvRunners' returns)",
    )


def run_report(args: argparse.Namespace) -> int:
    """Build and write the report; returns the process exit code (2: unusable input)."""
    try:
        if any(path.is_file() for path in args.paths):
            return _tables_report(args)
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


def _tables_report(args: argparse.Namespace) -> int:
    """Reports' ``table.csv`` files joined: their rows, relabelled by ``--pool``, and the mean
    gains across environments. Raises ReportError for bad input."""
    if not all(path.is_file() for path in args.paths):
        raise ReportError(
            "pass reports' table.csv files or result folders, not both (a trial's result.json: pass "
            "its folder)"
        )
    add_report_arguments(parser := argparse.ArgumentParser())
    if given := [
        f"--{k.replace('_', '-')}" for k in FOLDER_OPTIONS if getattr(args, k) != parser.get_default(k)
    ]:
        raise ReportError(f"{', '.join(given)} read result folders; table.csv files hold rows only")
    written = {(args.out / name).resolve() for name in ("table.csv", "mean_gains.csv")}
    if overwritten := [str(p) for p in args.paths if p.resolve() in written]:
        raise ReportError(f"--out {args.out} would overwrite {', '.join(overwritten)}; pass another --out")
    rows = joined_rows(args.paths, args.pool)
    gains = mean_gains(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text := render_tables(rows, gains, args.paths))
    write_csv(rows, args.out / "table.csv")
    write_csv(gains, args.out / "mean_gains.csv")
    print(text)
    print(f"Wrote {args.out / 'table.md'}, {args.out / 'table.csv'}, {args.out / 'mean_gains.csv'}")
    return 0


def write_csv(table: pd.DataFrame, path: Path) -> None:
    """``table`` as CSV: raw numbers, empty cells for NaN, lines ended as RFC 4180 ends them."""
    table.to_csv(path, index=False, lineterminator="\r\n")


def write_report(report: Report, out: Path) -> list[Path]:
    """Write ``table.md``, the CSVs (table, trials and stability always; paper and mean gains
    where they have rows) and the figures into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(render_markdown(report))
    written = [out / "table.md"]
    tables = {
        "table.csv": report.rows,
        "paper.csv": report.paper,
        "trials.csv": report.trials,
        "stability.csv": report.stability,
        "mean_gains.csv": report.mean_gains,
    }
    for name, table in tables.items():
        if name in ("table.csv", "trials.csv", "stability.csv") or not table.empty:
            write_csv(table, out / name)
            written.append(out / name)
    drawn = figures(report)
    for name, figure in drawn.items():
        figure.savefig(out / name, dpi=120)
        written.append(out / name)
    if "returns_vs_time.png" not in drawn:
        logger.info("no environment's runs share a window of training time: returns_vs_time.png not written")
    if "tv.png" not in drawn:
        logger.info("no trial logged %s: tv.png not written", TV_KEY)
    return written


def keep_trials(trials: Sequence[Trial], report: Report, out: Path) -> int:
    """Write a record (:mod:`rllib_geppo.records.trial_record`) of each trial that the report's
    rows average and that finished (Tune's status TERMINATED), leaving records already in
    ``out`` as they are; returns how many of those trials ``out`` holds."""
    averaged, out, kept = set(report.trials.trial), out.resolve(), 0
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
