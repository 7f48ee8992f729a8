"""What became of a run's trials, for the summary and the exit status: each trial's status,
its error in one line, and the cluster's nodes and trial processes that went away.

Tune's own statuses hide two outcomes: a trial stopped by a signal looks finished, and one whose
every sample failed looks successful (:func:`trial_status`). A trial's error comes from its
``error.txt`` (:func:`error_message`); a failure that Ray reports as a lost actor is traced to
the nodes that died (:func:`lost_nodes`), so the warning can say what the cluster lost.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_geppo import private_ray
from rllib_geppo.cli.interrupt import stop_exit_code
from rllib_geppo.records.result_keys import STEPS_KEY

#: Private Ray names this module reads (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = private_ray.TUNE_RUN

log = logging.getLogger(__name__)


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
        parts.append(
            "it sampled no env step: every sample failed (the EnvRunners' errors are "
            "above); fix the environment and start a new run"
        )
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
    after = lines[frames[-1] + 1 :] if frames else lines
    return next((line.strip() for line in after if line.strip() and not line[0].isspace()), None)


def last_failure(error_text: str) -> list[str]:
    """The lines of the last failure in Tune's error file (all of them if it has no header)."""
    lines = error_text.splitlines()
    failures = [i for i, line in enumerate(lines) if line.startswith("Failure # ")]
    return lines[failures[-1] + 1 :] if failures else lines


def exit_status(
    resume_line: str, results: Sequence[Any], signum: int | None, lost: Mapping[str, str] | None
) -> int:
    """The command's exit status, after the warning that says how to go on (``resume_line``, the
    command that resumes the run): 130 or 143 for a run stopped by Ctrl+C or SIGTERM
    (:mod:`rllib_geppo.cli.interrupt`), 1 for a failed trial (naming the nodes the cluster lost,
    from :func:`lost_nodes`), else 0."""
    statuses = {trial_status(t) for t in results}
    if "INTERRUPTED" in statuses:
        how = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM"}.get(signum, "a signal")
        log.warning("Stopped by %s. Continue with: %s", how, resume_line)
        return stop_exit_code(signum) if signum else 130
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
    failures = [
        error_text(Path(t.path, t.run_metadata.error_filename))
        for t in results
        if trial_status(t) == "ERROR" and t.run_metadata.error_filename
    ]
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
    lost = [text for text in error_texts if any(word in (exception_line(text) or "") for word in ACTOR_LOST)]
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
    return {
        node
        for info in infos
        if info.get("State") == "DEAD" and (node := info.get("Address", {}).get("NodeID"))
    }


def dead_nodes() -> dict[str, str]:
    """The nodes of the Ray cluster that are no longer alive: node id -> IP address."""
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if not n["Alive"]}
