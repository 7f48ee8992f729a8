"""Trials that ask for resources the cluster does not have: refused before they queue, and a
warning for those that wait for resources the cluster no longer has.

Tune keeps a trial PENDING until its placement group fits: forever, on a cluster too small for it.
:func:`check_resources` compares what each trial asks for (its algorithm's own
``default_resource_request``) with what exists before Tune queues any. During the run, a trial
retried after its node was lost (``max_failures``) may need what only that node had (a custom
resource, a GPU); on a fixed cluster it would wait without a word, since Tune's own warning
compares CPUs and GPUs only, against the cluster as it was when the run started.
:class:`StrandedTrials` compares it with the cluster as it is, and says what is missing.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ray.tune import Callback

from rllib_geppo.cli.console import quiet_rllib
from rllib_geppo.cli.experiment_file import ExperimentSpec, UserError, to_algorithm_config, trainable

log = logging.getLogger(__name__)

# The settings behind a trial's resource request, shown when a trial does not fit.
RESOURCE_KEYS = (
    "num_env_runners",
    "num_cpus_per_env_runner",
    "num_gpus_per_env_runner",
    "num_learners",
    "num_cpus_per_learner",
    "num_gpus_per_learner",
    "num_cpus_for_main_process",
    "num_gpus",
    "evaluation_interval",
    "evaluation_num_env_runners",
)
# What to change when a trial asks for more of a resource than exists.
FIXES = {
    "CPU": "lower num_env_runners (each takes a CPU; 0 samples in the trial's own process)",
    "GPU": "set num_gpus_per_learner: 0 to learn on the CPU",
}
#: Tune's variable for how long no trial may start before it warns, and its default (s).
WAIT_VARIABLE, DEFAULT_WAIT_S = "TUNE_WARN_INSUFFICENT_RESOURCE_THRESHOLD_S", 60.0
#: How often the cluster's resources are read while a trial waits (s).
CHECK_EVERY_S = 10.0


def check_resources(
    specs: Sequence[ExperimentSpec],
    trials: Mapping[str, list[dict[str, Any]]],
    where: str,
    available: Mapping[str, float] | None = None,
    kinds: Sequence[str] | None = None,
) -> None:
    """Raises UserError if a trial asks for more of a resource than `available` holds.

    Args:
        where: what holds the resources, for the message ("this machine", "the cluster at ...").
        available: the resources that exist (default: ``ray.cluster_resources()``, once Ray runs).
        kinds: resource names to compare (default: all that a trial asks for).
    """
    if available is None:
        import ray

        available = ray.cluster_resources()
    for spec in specs:
        cls = trainable(spec.run, spec.where())
        if not isinstance(cls, type):
            continue  # a function trainable: 1 CPU
        seen: set[str] = set()
        for trial in trials[spec.name]:
            settings = {k: trial[k] for k in RESOURCE_KEYS if k in trial}
            if repr(settings) in seen:
                continue
            seen.add(repr(settings))
            # What Tune reserves for the trial: the sum of its placement group's bundles.
            with quiet_rllib():
                request = cls.default_resource_request(to_algorithm_config(dict(trial))).required_resources
            short = [k for k in exceeding(request, available) if kinds is None or k in kinds]
            if short:
                asked = ", ".join(f"{k}: {trial[k]}" for k in settings) or "the defaults"
                fixes = "; ".join(FIXES.get(k, f"ask for less {k}") for k in short)
                raise UserError(
                    f"{spec.where()}: a trial asks for {amounts(request, short)} ({asked}), but "
                    f"{where} has {amounts(available, short)}; Tune would wait for them forever. "
                    f"Fix: {fixes}; or run on a larger cluster (--address)."
                )


def exceeding(request: Mapping[str, float], available: Mapping[str, float]) -> list[str]:
    """The kinds of resource of which `request` asks for more than `available` holds."""
    return [k for k, v in request.items() if v > available.get(k, 0.0) + 1e-9]


def amounts(resources: Mapping[str, float], kinds: Sequence[str]) -> str:
    """`5 CPUs, 0 GPUs` for the named kinds of resource."""
    parts = []
    for kind in kinds:
        value = resources.get(kind, 0)
        shown = int(value) if float(value).is_integer() else round(value, 3)
        parts.append(f"{shown} {kind}{'' if value == 1 or not kind.isupper() else 's'}")
    return ", ".join(parts)


def shortfall(
    bundles: Sequence[Mapping[str, float]], strategy: str, nodes: Sequence[Mapping[str, float]]
) -> str | None:
    """What a placement group waits for in vain on a cluster of `nodes` (each node's resources),
    in words (``for 1 GPU; the cluster has 0 GPUs``); None where it can be placed.

    Its bundles together may ask for more of a resource than all nodes have, or one bundle (under
    ``STRICT_PACK``, all of them together) for more than any single node has.
    """
    required, total = Counter(), Counter()
    for bundle in bundles:
        required.update(bundle)
    for node in nodes:
        total.update(node)
    if short := sorted(exceeding(required, total)):
        return f"for {amounts(required, short)}; the cluster has {amounts(total, short)}"
    for bundle in [required] if strategy == "STRICT_PACK" else bundles:
        if all(exceeding(bundle, node) for node in nodes):
            return f"for {amounts(bundle, sorted(bundle))} on one node; no node of the cluster has that much"
    return None


class StrandedTrials(Callback):
    """Warns, once per wait, about a trial that has been PENDING for ``wait_s`` seconds and
    whose placement group the cluster cannot hold (:func:`shortfall`).

    Args:
        resume_command: the command line that continues the run after a stop.
        wait_s: how long a trial waits before the warning, in seconds (default: Tune's
            ``TUNE_WARN_INSUFFICENT_RESOURCE_THRESHOLD_S``, else 60). The cluster is read at
            most every :data:`CHECK_EVERY_S`, so the warning may come that much later.
        node_resources: the resources of each node of the cluster now (default: the alive
            nodes of ``ray.nodes()``).
        clock: seconds, monotonic (default ``time.monotonic``).
    """

    def __init__(
        self,
        resume_command: str,
        wait_s: float | None = None,
        node_resources: Callable[[], Sequence[Mapping[str, float]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._resume = resume_command
        self._wait_s = float(os.environ.get(WAIT_VARIABLE, DEFAULT_WAIT_S)) if wait_s is None else wait_s
        self._node_resources = node_resources or _alive_node_resources
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
            nodes = self._node_resources()
        except Exception as e:  # noqa: BLE001 - a warning must never end the run
            log.debug("The cluster's resources could not be read: %s", e)
            return
        for trial in waiting:
            group = trial.placement_group_factory
            missing = shortfall(group.bundles, group.strategy, nodes)
            if missing and trial.trial_id not in self._warned:
                self._warned.add(trial.trial_id)
                log.warning(
                    "%s has waited %.0f s %s. It starts once a node that has them joins (an "
                    "autoscaling cluster adds one; by hand: ray start --address <head> with the "
                    "missing --num-cpus, --num-gpus or --resources). Or stop this run with Ctrl+C "
                    "and continue it later, from each trial's last checkpoint, with: %s",
                    trial,
                    now - self._pending_since[trial.trial_id],
                    missing,
                    self._resume,
                )


def _alive_node_resources() -> list[Mapping[str, float]]:
    import ray

    return [node["Resources"] for node in ray.nodes() if node["Alive"]]
