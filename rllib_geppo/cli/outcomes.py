"""How a run ends: a graceful stop on Ctrl+C and SIGTERM, and what became of the trials, for the
summary and the exit status.

Tune's own handling of Ctrl+C stops the trials at once, with no checkpoint, and Ray's handler of
SIGTERM (``kill``, ``timeout``, ``docker stop``, a batch scheduler's preemption) dumps stacks and
exits with no summary. :class:`GracefulStop` handles both alike: at the first signal it asks every
running trial for a checkpoint at its next result (Tune's ``should_checkpoint``), and once each
has saved one (or ended), it ends Tune's run with SIGUSR1, Tune's graceful stop: the run's state
is saved, the summary printed, and ``rllib train file`` exits with 130 (SIGINT) or 143 (SIGTERM)
after printing the command that resumes the run. A second signal ends the run at once, losing the
iterations in progress.

Tune's statuses hide two outcomes: a trial stopped by a signal looks finished, and one whose every
sample failed looks successful (:func:`trial_status`). A trial's error comes from its
``error.txt`` (:func:`exception_line`); where a failure is a lost actor (a trial's process that
went away), :class:`LostNodes` names the nodes that died, so the warning can say what the cluster
lost.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.result import SHOULD_CHECKPOINT

from rllib_geppo.records.result_keys import STEPS_KEY

log = logging.getLogger(__name__)

#: The signals handled.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop(Callback):
    """Handles SIGINT and SIGTERM while Tune runs, as the module docstring says.

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


#: Words of Ray's errors for an actor (a trial's process) that went away, alone or with its node.
ACTOR_LOST = ("is unavailable", "ActorUnavailableError", "ActorDiedError", "actor died", "node has died")
#: Ray marks a lost node dead once it has missed its heartbeats, about 15 s after the trials on
#: it failed: how long to wait for that.
NODE_DEATH_WAIT_S = 30.0


def trial_status(trial: Any) -> str:
    """Tune's status, except that a trial stopped by a signal (not by its criteria) is
    INTERRUPTED, and one that reached its criteria without sampling an env step has failed."""
    if trial.status == "TERMINATED" and not (trial.last_result or {}).get("done"):
        return "INTERRUPTED"
    return "ERROR" if trial.status == "TERMINATED" and sampled_nothing(trial) else trial.status


def sampled_nothing(trial: Any) -> bool:
    """Whether a trial that samples from environments (not offline data) reported no env step:
    every sample failed, e.g. an environment that fails whenever it runs, with stop criteria
    that came before GePPO's ``max_failed_samples_in_a_row``."""
    offline = trial.config.get("input_", trial.config.get("input", "sampler")) != "sampler"
    return not offline and (trial.last_result or {}).get(STEPS_KEY) == 0


def trial_summary(trial: Any, best: float | None = None) -> str:
    """One line: trial, status, best mean return (``best``, from
    :class:`~rllib_geppo.cli.console.BestReturns`), env steps, last checkpoint (or the error's
    message and file)."""
    steps = (trial.last_result or {}).get(STEPS_KEY)
    parts = [
        f"{trial}: {trial_status(trial)}",
        f"best return {best:.2f}" if best is not None else "best return n/a",
        f"env steps {int(steps)}" if steps is not None else "env steps n/a",
        f"checkpoint {trial.checkpoint.path}" if trial.checkpoint else "no checkpoint",
    ]
    if trial.status == "TERMINATED" and sampled_nothing(trial):
        parts.append(
            "it sampled no env step: every sample failed (the EnvRunners' errors are "
            "above); fix the environment and start a new run"
        )
    if trial.error_file:
        if message := exception_line(error_text(trial.error_file)):
            parts.append(message)
        # Last, whole (the path is what scripts read): where Tune keeps it with the trial's
        # results, not its staging folder in Ray's session directory.
        parts.append(f"error {Path(trial.path, Path(trial.error_file).name)}")
    return ", ".join(parts)


def error_text(path: str | Path | None) -> str:
    """A trial's error file, whole; empty where there is none or it cannot be read."""
    try:
        return Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""


def exception_line(error_text: str) -> str | None:
    """The first line of the last failure's exception in Tune's error file: a ``Failure # n``
    header per failure, then Ray's traceback (indented frames), then the exception, whose
    message may go on over more lines. Without a traceback: the failure's first line."""
    lines = error_text.splitlines()
    failures = [i for i, line in enumerate(lines) if line.startswith("Failure # ")]
    lines = lines[failures[-1] + 1 :] if failures else lines
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = lines[frames[-1] + 1 :] if frames else lines
    return next((line.strip() for line in after if line.strip() and not line[0].isspace()), None)


def actor_lost(error_text: str) -> bool:
    """Whether the last failure in an error file (Tune's ``error.txt``) is a lost actor: the
    trial's process went away, alone or with its node."""
    return any(word in (exception_line(error_text) or "") for word in ACTOR_LOST)


def exit_status(
    resume_line: str, results: Sequence[Any], signum: int | None, lost: Mapping[str, str] | None
) -> int:
    """The command's exit status, after the warning that says how to go on (``resume_line``, the
    command that resumes the run): 130 or 143 for a run stopped by Ctrl+C or SIGTERM
    (128 + the signal's number, as shells report it), 1 for a failed trial (naming the nodes the
    cluster lost, from :meth:`LostNodes.lost`), else 0."""
    statuses = {trial_status(t) for t in results}
    if "INTERRUPTED" in statuses:
        how = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM"}.get(signum, "a signal")
        log.warning("Stopped by %s. Continue with: %s", how, resume_line)
        return 128 + (signum or signal.SIGINT)
    if "ERROR" not in statuses:
        return 0
    if lost:
        log.warning(
            "The cluster lost %d node(s) during the run, at %s. The trials that failed "
            "with them continue from their last checkpoint, once the cluster has room for "
            "them, with: %s",
            len(lost),
            ", ".join(sorted(set(lost.values()))),
            resume_line,
        )
    elif lost is not None:
        log.warning(
            "A failed trial's process went away (Ray: its actor is unavailable or died), "
            "as when the node it runs on is lost. It continues from its last checkpoint, "
            "once the cluster has room for it, with: %s",
            resume_line,
        )
    return 1


class LostNodes(Callback):
    """The nodes of the Ray cluster that died during the run (Ray must be initialised)."""

    def __init__(self) -> None:
        self.dead_before = dead_nodes()
        self._dead_at_failure = self.dead_before  # when Tune last saw a trial fail

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._dead_at_failure = dead_nodes()

    def lost(self, results: Sequence[Any]) -> dict[str, str] | None:
        """Where a failed trial's actor went away (:func:`actor_lost`): the nodes that died
        since the run started (node id -> IP), possibly none (the process alone died); None
        where no trial failed that way. The node of the last failure is marked dead only once
        it has missed its heartbeats: this waits up to :data:`NODE_DEATH_WAIT_S` for a node to
        die after that failure."""
        if not any(actor_lost(error_text(t.error_file)) for t in results if trial_status(t) == "ERROR"):
            return None
        deadline = time.monotonic() + NODE_DEATH_WAIT_S
        while (dead := dead_nodes()).keys() <= self._dead_at_failure.keys() and time.monotonic() < deadline:
            time.sleep(1.0)
        return {node: ip for node, ip in dead.items() if node not in self.dead_before}


def dead_nodes() -> dict[str, str]:
    """The nodes of the Ray cluster that are no longer alive: node id -> IP address."""
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if not n["Alive"]}
