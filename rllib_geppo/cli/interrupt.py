"""Ctrl+C and SIGTERM (``kill``, ``timeout``, ``docker stop``, a batch scheduler's preemption):
each running trial ends its current iteration and saves a checkpoint, then the run stops.

Tune's own handling of Ctrl+C stops the trials at once, with no checkpoint, and Ray's handler
of SIGTERM dumps stacks and exits with no summary. :class:`GracefulStop` handles both alike:
at the first signal it asks every running trial for a checkpoint at its next result (Tune's
``should_checkpoint``), and once each has saved one (or ended), it ends Tune's run with SIGUSR1,
Tune's graceful stop: the run's state is saved, the summary printed, and ``rllib train file``
exits with 130 (SIGINT) or 143 (SIGTERM) after printing the command that resumes the run. A
second signal ends the run at once, losing the iterations in progress.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from ray.tune import Callback
from ray.tune.result import SHOULD_CHECKPOINT

log = logging.getLogger(__name__)

#: The signals handled.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop(Callback):
    """Handles SIGINT and SIGTERM while Tune runs (see the module docstring).

    Its handlers are installed when Tune sets up its callbacks (after Tune installs its own
    handlers for SIGINT and SIGUSR1) and stay until :meth:`restore`. Pass it last among the
    callbacks: it marks a result for a checkpoint after the loggers have written it.
    """

    def __init__(self) -> None:
        self.signal: int | None = None  # the first stop signal received
        self._ended = False
        self._originals = {sig: signal.getsignal(sig) for sig in SIGNALS}
        self._asked = False  # a signal came; the trials to wait for are chosen at the next step
        self._waiting: set = set()  # running trials that have not saved since

    def setup(self, **info: Any) -> None:
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        """The signal handlers from before the run."""
        for sig, handler in self._originals.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = "Ctrl+C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.signal is not None:
            log.warning("%s again: stopping now; the iterations in progress are lost.", name)
            self._end()
            return
        self.signal, self._asked = signum, True
        log.warning(
            "%s: each running trial ends its iteration and saves a checkpoint, then the "
            "run stops (%s again stops it now).",
            name,
            name,
        )

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._asked:
            self._asked = False
            # A function trainable (SB3PPO) saves no checkpoint: it is not waited for.
            self._waiting = {
                t for t in trials if t.status == "RUNNING" and (t.checkpoint_at_end or t.checkpoint_freq)
            }
            self._done(None)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if trial in self._waiting:
            result[SHOULD_CHECKPOINT] = True  # Tune saves after this result

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def _done(self, trial: Any) -> None:
        """``trial`` saved or ended (None: none); ends the run once no trial is waited for."""
        if trial is None or trial in self._waiting:
            self._waiting.discard(trial)
            if not self._waiting:
                self._end()

    def _end(self) -> None:
        """Ends Tune's run gracefully, once (the run's state is saved)."""
        if not self._ended:
            self._ended = True
            signal.raise_signal(signal.SIGUSR1)
