"""Tune's progress table for ``rllib train file``, with how far the run is toward its stop budget,
an estimate of the time left, and the results folder under the storage path.

    == Status ==
    Current time: 2026-11-26 04:01:57 (running for 00:02:55.92)
    Progress: env steps 88,064 / 200,000 (44%), about 3 min 43 s left
    Results: /home/me/results/geppo_hopper
    ...
"""

from __future__ import annotations

import io
import math
import re
import time
from collections.abc import Iterable, Mapping
from contextlib import redirect_stdout
from typing import Any

from ray.tune import Callback, CLIReporter

from rllib_geppo.records.result_keys import ITERATION_KEY, RETURN_KEY, STEPS_KEY, TIME_KEY, lookup

#: Stop keys a budget can be read from, with how the line names them.
BUDGET_KEYS = {STEPS_KEY: "env steps", ITERATION_KEY: "iterations", TIME_KEY: "seconds of training"}


#: One trial's progress: its latest values, its budgets (result key -> stop value), whether it
#: finished.
Measured = tuple[Mapping[str, float], Mapping[str, float], bool]


def progress_line(trials: list[Measured], elapsed_s: float, start_fraction: float = 0.0) -> str | None:
    """``Progress: env steps 88,064 / 200,000 (44%), about 3 min 43 s left`` over trials.

    Each trial is (its latest values, its budgets, whether it finished). A trial stops at
    whichever budget it reaches first, so its progress is its largest fraction; totals are
    shown when that is the same kind of budget for every trial. The time left extrapolates
    the progress made in `elapsed_s` beyond `start_fraction`, what a resumed run had done
    when it started.
    """
    if not trials:
        return None
    fraction, leading = _fractions(trials)
    if len(set(leading)) == 1:
        key = leading[0]
        done = sum(min(values.get(key, 0.0), budgets[key]) for values, budgets, _ in trials)
        total = sum(budgets[key] for _, budgets, _ in trials)
        line = f"Progress: {BUDGET_KEYS[key]} {done:,.0f} / {total:,.0f} ({fraction:.0%})"
    else:
        line = f"Progress: {fraction:.0%} of the stop budgets"
    if 0 < fraction < 1 and fraction > start_fraction:
        line += f", about {_duration(elapsed_s * (1 - fraction) / (fraction - start_fraction))} left"
    return line


def _fractions(trials: list[Measured]) -> tuple[float, list[str]]:
    """The mean over trials of each one's progress toward its stop budget (0 without trials),
    and each one's leading budget key."""
    fractions, leading = [], []
    for values, budgets, finished in trials:
        shares = {key: min(values.get(key, 0.0) / budget, 1.0) for key, budget in budgets.items()}
        key = max(shares, key=shares.get)
        fractions.append(1.0 if finished else shares[key])
        leading.append(key)
    return sum(fractions) / max(len(fractions), 1), leading


def _numbers(values: Mapping[str, Any], keys: Iterable[str]) -> dict[str, float]:
    """The finite numbers of ``values`` under ``keys``."""
    return {
        k: float(values[k])
        for k in keys
        if isinstance(values.get(k), (int, float)) and math.isfinite(values[k])
    }


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


class BudgetReporter(CLIReporter):
    """Tune's CLIReporter with a progress line and the results folder in its header.

    Tune's table names its staging folders in Ray's session directory (``Result logdir``, each
    failed trial's error file); the files are kept under the storage path, which the table names
    instead (shorter paths padded, so that the error table keeps its borders).

    Args:
        results_dir: where the run's trial folders are (``<storage-path>/<name>``).
        stops: experiment name -> its stop criteria; trials are named ``<experiment>_<id>``.
    """

    def __init__(self, *, results_dir: str, stops: Mapping[str, Mapping[str, Any]], **kwargs):
        super().__init__(**kwargs)
        self._results_dir = results_dir
        # Per experiment, the stop criteria that progress is measured against.
        self._budgets = {
            name: {k: v for k, v in _numbers(stop, BUDGET_KEYS).items() if v > 0}
            for name, stop in stops.items()
        }
        self._started = time.time()
        # Progress at the first report: what a resumed run had done (its trials' saved last
        # results; after --skip-damaged-checkpoints a little more than it restores), so that
        # the time left extrapolates only this run's progress.
        self._start_fraction: float | None = None

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        lines = [line for line in (self._progress(trials), f"Results: {self._results_dir}") if line]
        with redirect_stdout(io.StringIO()) as table:
            super().report(trials, done, *sys_info, *lines)
        text = re.sub(r"^Result logdir: .*\n", "", table.getvalue(), flags=re.M)
        for trial in trials:
            if trial.local_path and trial.path and trial.local_path in text:
                text = text.replace(trial.local_path, trial.path.ljust(len(trial.local_path)))
        print(text, end="")

    def _progress(self, trials: list) -> str | None:
        measured = []
        for trial in trials:
            budgets = next(
                (b for name, b in self._budgets.items() if str(trial).startswith(f"{name}_")), None
            )
            if not budgets:
                continue
            result = trial.last_result or {}
            finished = trial.status == "TERMINATED" and bool(result.get("done"))
            measured.append((_numbers(result, budgets), budgets, finished))
        if self._start_fraction is None:
            self._start_fraction = _fractions(measured)[0]
        return progress_line(measured, time.time() - self._started, self._start_fraction)


class BestReturns(Callback):
    """Each trial's best mean episode return so far, skipping iterations in which no episode
    ended (NaN). Tune's own ``metric_analysis`` max is NaN once the last iteration was one."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}  # trial id -> best finite return

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info) -> None:
        value = lookup(result, RETURN_KEY)
        if math.isfinite(value):
            self.best[trial.trial_id] = max(value, self.best.get(trial.trial_id, -math.inf))
