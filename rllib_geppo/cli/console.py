"""The console of ``rllib train file``: known-harmless messages hidden, and Tune's progress table
with how far the run is toward its stop budget.

Only lines holding one of :data:`KNOWN_NOISE` are dropped (``-v/--verbose`` keeps them too): real
warnings and errors, a trial's traceback included, pass untouched. Worker processes' output,
Python's and C++'s, reaches the console through the driver, which prints it to
``sys.stdout``/``sys.stderr`` line by line, and the driver's own records go to the logging
handlers: :func:`quiet_console` filters both. Before Ray starts, :func:`quiet_rllib` silences
RLlib's warnings at each validate() and :func:`quiet_fds` what C libraries (MuJoCo's compiler)
print while an env is made.

:class:`BudgetReporter` is Tune's progress table with a progress line, an estimate of the time
left, and the results folder under the storage path::

    == Status ==
    Current time: 2026-11-26 04:01:57 (running for 00:02:55.92)
    Progress: env steps 88,064 / 200,000 (44%), about 3 min 43 s left
    Results: /home/me/results/geppo_hopper
    ...
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import Any, TextIO

from ray.tune import Callback, CLIReporter

from rllib_geppo.records.result_keys import ITERATION_KEY, RETURN_KEY, STEPS_KEY, TIME_KEY, lookup

#: Text of messages known to be harmless in ``rllib train file`` runs, and why.
KNOWN_NOISE = (
    # RLlib's banner for algorithms that moved to the new API stack (GePPO was built on it).
    "on the new API stack! This is the new default behavior",
    # Ray core, when RLlib creates EnvRunners with restarts on: their configs travel through the
    # object store (ray-project/ray#53727); restarts work as long as the driver lives.
    "has constructor arguments in the object store and max_restarts > 0",
    # RLlib's own RLModule.__init__ builds the deprecated RLModuleConfig for every module.
    "`RLModule(config=[RLModuleConfig object])` has been deprecated",
    # Tune's hint for GPU monitoring.
    "Install gputil for GPU system monitoring",
    # Ray's notice about token authentication, on the local cluster this command starts.
    "Token authentication is enabled for this Ray cluster",
    # gymnasium: RLlib registers its env-wrapper id again in every EnvRunner.
    "Overriding environment rllib-single-agent-env-v0 already in registry",
    # Tune's timing hint: an algorithm that starts EnvRunner actors takes seconds to set up.
    "Trainable.setup took",
    # MuJoCo's compiler, on a model file of gymnasium's MuJoCo tasks; the model loads as intended.
    "compiler attribute 'settotalmass' is deprecated",
    # Tune, when rllib train file ends its run after Ctrl+C or SIGTERM: the command says what
    # happens itself, and prints its own resume command (Tune's names Tuner.restore or
    # tune.run_experiments(..., resume=True), by the entry point it was run through).
    "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run",
    "Experiment has been interrupted, but the most recent state was saved",
    "Resume experiment with: ",
)


def is_noise(line: str) -> bool:
    """Whether a console line holds one of :data:`KNOWN_NOISE`."""
    return any(noise in line for noise in KNOWN_NOISE)


class _LineFilter(io.TextIOBase):
    """A text stream that passes whole lines to ``target`` unless they hold known noise."""

    def __init__(self, target: TextIO):
        self.target = target
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        kept = [line for line in lines if not is_noise(line)]
        if kept:
            self.target.write("\n".join(kept) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._partial and not is_noise(self._partial):
            self.target.write(self._partial)
        self._partial = ""
        self.target.flush()

    def isatty(self) -> bool:
        # Asked at exit too (colorama's atexit hook), when pytest has closed its capture stream.
        return not self.closed and self.target.isatty()

    @property
    def closed(self) -> bool:
        return getattr(self.target, "closed", False)

    @property
    def encoding(self) -> str:
        return getattr(self.target, "encoding", "utf-8")


def _not_noise(record: logging.LogRecord) -> bool:
    """A logging filter: whether a record holds none of :data:`KNOWN_NOISE`."""
    return not is_noise(record.getMessage())


@contextmanager
def quiet_console(enabled: bool = True) -> Iterator[None]:
    """Drops known-harmless lines from this process's console output during the block (nothing
    if not ``enabled``): what is printed, and what the logging handlers that exist write."""
    if not enabled:
        yield
        return
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = {h for logger in loggers for h in getattr(logger, "handlers", ())}
    for handler in handlers:
        handler.addFilter(_not_noise)
    with redirect_stdout(_LineFilter(sys.stdout)) as out, redirect_stderr(_LineFilter(sys.stderr)) as err:
        try:
            yield
        finally:
            out.flush()
            err.flush()
            for handler in handlers:
                handler.removeFilter(_not_noise)


@contextmanager
def quiet_fds() -> Iterator[None]:
    """Everything written to file descriptors 1 and 2 during the block (C libraries' prints
    too) goes to stderr afterwards, less the lines of :data:`KNOWN_NOISE`."""
    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(captured.fileno(), 1)
            os.dup2(captured.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if not is_noise(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


@contextmanager
def quiet_rllib() -> Iterator[None]:
    """Silence RLlib's per-validate() warnings (e.g. "running on the new API stack")."""
    rllib_logger = logging.getLogger("ray.rllib")
    level = rllib_logger.level
    rllib_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        rllib_logger.setLevel(level)


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
