"""A warning for trials that wait for resources the cluster does not have (any more).

Tune keeps a trial PENDING until its placement group fits. On an autoscaling cluster that is
right: a node will come. On a fixed cluster that lost a node, a trial retried after the loss
(``max_failures``) that needs the lost node's resources (a custom resource, a GPU, more CPUs
than the rest have) waits forever without a word: Tune's own warning compares CPUs and GPUs
only, against the cluster as it was when the run started. :class:`StrandedTrials` compares each
trial that has waited long enough with the cluster as it is, says what is missing, and how to
go on.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Mapping

from ray.tune import Callback

from rllib_geppo.cli.preflight import amounts

log = logging.getLogger(__name__)

#: Tune's variable for how long no trial may start before it warns, and its default (s).
WAIT_VARIABLE, DEFAULT_WAIT_S = "TUNE_WARN_INSUFFICENT_RESOURCE_THRESHOLD_S", 60.0
#: How often the cluster's resources are read while a trial waits (s).
CHECK_EVERY_S = 10.0


def shortfall(required: Mapping[str, float], cluster: Mapping[str, float]) -> list[str]:
    """The resources of which `required` asks for more than the whole `cluster` has."""
    return sorted(k for k, v in required.items() if v > cluster.get(k, 0.0) + 1e-9)


class StrandedTrials(Callback):
    """Warns, once per wait, about a trial that has been PENDING for ``wait_s`` seconds and
    asks for more of a resource than the whole cluster has (summed over its bundles). A trial
    whose bundle fits no single node, while the cluster has enough in all, is not caught.

    Args:
        resume_command: the command line that continues the run after a stop.
        wait_s: how long a trial waits before the warning, in seconds (default: Tune's
            ``TUNE_WARN_INSUFFICENT_RESOURCE_THRESHOLD_S``, else 60). The cluster is read at
            most every :data:`CHECK_EVERY_S`, so the warning may come that much later.
        cluster_resources: the cluster's total resources now (default ``ray.cluster_resources``).
        clock: seconds, monotonic (default ``time.monotonic``).
    """

    def __init__(self, resume_command: str, wait_s: float | None = None,
                 cluster_resources: Callable[[], Mapping[str, float]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._resume = resume_command
        self._wait_s = float(os.environ.get(WAIT_VARIABLE, DEFAULT_WAIT_S)) if wait_s is None else wait_s
        self._cluster_resources = cluster_resources or _ray_cluster_resources
        self._clock = clock
        self._pending_since: dict[str, float] = {}
        self._next_check = -float("inf")
        self._warned: set[str] = set()  # the trials warned about in their current wait

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """After each step of Tune's loop, which runs while every trial waits too."""
        now = self._clock()
        pending = {t.trial_id: t for t in trials if t.status == "PENDING"}
        self._pending_since = {i: self._pending_since.get(i, now) for i in pending}
        self._warned &= pending.keys()
        waiting = [t for i, t in pending.items() if now - self._pending_since[i] >= self._wait_s]
        if not waiting or now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        try:
            cluster = self._cluster_resources()
        except Exception as e:  # noqa: BLE001 - a warning must never end the run
            log.debug("The cluster's resources could not be read: %s", e)
            return
        for trial in waiting:
            required = trial.placement_group_factory.required_resources
            short = shortfall(required, cluster)
            if short and trial.trial_id not in self._warned:
                self._warned.add(trial.trial_id)
                log.warning(
                    "%s has waited %.0f s for %s; the cluster has %s. It starts once a node that "
                    "has them joins (an autoscaling cluster adds one; by hand: ray start --address "
                    "<head> with the missing --num-cpus, --num-gpus or --resources). Or stop this "
                    "run with Ctrl+C and continue it later, from each trial's last checkpoint, "
                    "with: %s", trial, now - self._pending_since[trial.trial_id],
                    amounts(required, short), amounts(cluster, short), self._resume)


def _ray_cluster_resources() -> Mapping[str, float]:
    import ray

    return ray.cluster_resources()
