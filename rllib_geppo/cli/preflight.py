"""Checks that `rllib train file` makes before anything can wait: the cluster and its resources.

Each check raises :class:`UserError` (exit code 2, one message) for a run that would otherwise
hang or fail late: a `--address` where nothing listens or whose cluster refuses this process's
token, and a trial that asks for more CPUs or GPUs than the cluster has (Tune would keep it
PENDING forever). The checks of the file itself are in :mod:`rllib_geppo.cli.validation`, those
of a run to resume in :mod:`rllib_geppo.cli.resume`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from rllib_geppo.cli.errors import UserError
from rllib_geppo.cli.experiment_file import ExperimentSpec
from rllib_geppo.cli.quiet import quiet_rllib
from rllib_geppo.cli.trainables import to_algorithm_config, trainable

log = logging.getLogger(__name__)

# A probe of the cluster's port that gets no answer within this many seconds fails.
CONNECT_TIMEOUT_S = 5.0
# Ray's default ports: the GCS of `ray start --head`, and the Ray Client server (ray://).
GCS_PORT = 6379
CLIENT_PORT = 10001
# Ray's switch for token authentication ("token" or "disabled").
AUTH_MODE = "RAY_AUTH_MODE"
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


# --------------------------------------------------------------------------------------------
# The cluster's address


def resolve_address(address: str) -> str | None:
    """`--address` as Ray reads it, where that is known before ``ray.init``: `auto` is the
    address in ``RAY_ADDRESS`` (without it, ``ray.init`` finds the cluster that `ray start`
    started on this machine, or says that none runs). None: `local`, or such an `auto`."""
    if address == "auto":
        return os.environ.get("RAY_ADDRESS") or None
    return None if address == "local" else address


def host_and_port(address: str) -> tuple[str, int]:
    """`host:port`, `ray://host:port` or `[::1]:port` -> (host, port), with Ray's default ports."""
    client = address.startswith("ray://")
    parts = urlsplit("//" + address.removeprefix("ray://"))
    try:
        port = parts.port
    except ValueError:
        raise UserError(f"--address {address}: the port is not a number 0-65535.") from None
    if not parts.hostname:
        raise UserError(f"--address {address}: expected host:port, e.g. 10.0.0.5:{GCS_PORT}.")
    return parts.hostname, port or (CLIENT_PORT if client else GCS_PORT)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raises UserError unless something accepts a TCP connection at the cluster's address.

    ray.init retries an unreachable GCS for minutes, warning every few seconds; a plain
    connect with a timeout answers at once.
    """
    resolved = resolve_address(address)
    if resolved is None:
        return
    host, port = host_and_port(resolved)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = (
            f"no answer within {timeout_s:g}s"
            if isinstance(e, TimeoutError)
            else (e.strerror or str(e)).lower()
        )
        shown = address if resolved == address else f"{address} ({resolved})"
        raise UserError(
            f"--address {shown}: nothing answers at {host}:{port} ({reason}). Check the address "
            "and that the cluster is up (`ray status` on its head node), or leave out --address "
            "to start a local Ray."
        ) from None


def token_refused(address: str) -> str:
    """The message for a cluster that refused this process's token, with the fix."""
    why = (
        "its token is not the cluster's"
        if os.environ.get(AUTH_MODE, "").lower() == "token"
        else f"{AUTH_MODE} is not 'token' here, so it sent none"
    )
    return (
        f"--address {address}: the cluster uses Ray's token authentication and refused this "
        f"process: {why}. Set {AUTH_MODE}=token and the cluster's token (RAY_AUTH_TOKEN=<token>, "
        "or the file ~/.ray/auth_token) where you run this command, as on the cluster's nodes."
    )


def connection_failure(address: str, error: BaseException) -> str:
    """ray.init's ConnectionError, with the reason Ray chained to it (its own message is only
    "Failed to connect to Ray cluster at ..."): a cluster that refused this process's token
    (:func:`token_refused`), `auto` without a cluster, or the last line of the reason."""
    reasons = []
    cause = error.__cause__ or error.__context__
    while cause is not None:
        reasons.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    text = "\n".join(reasons)
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
        return token_refused(address)
    if address == "auto" and resolve_address(address) is None:
        return (
            "--address auto: no running Ray cluster found (RAY_ADDRESS is not set and no cluster "
            "was started on this machine). Start one with `ray start --head`, pass its address, "
            "or leave out --address to start a local Ray."
        )
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), None)
    return (
        f"--address {address}: {error}"
        + (f" ({last})" if last else "")
        + (". Check that the cluster is up (`ray status` on its head node).")
    )


# --------------------------------------------------------------------------------------------
# Resources


def trial_request(spec: ExperimentSpec, trial: Mapping[str, Any]) -> dict[str, float] | None:
    """What Tune reserves for one trial: the sum of its placement-group bundles, from the
    algorithm's own `default_resource_request` (None for function trainables: 1 CPU)."""
    cls = trainable(spec.run, spec.where())
    if not isinstance(cls, type):
        return None
    with quiet_rllib():
        request = cls.default_resource_request(to_algorithm_config(dict(trial)))
    return {k: v for k, v in request.required_resources.items() if v > 0}


def check_resources(
    specs: Sequence[ExperimentSpec],
    trials: Mapping[str, list[dict[str, Any]]],
    available: Mapping[str, float],
    where: str,
    kinds: Sequence[str] | None = None,
) -> None:
    """Raises UserError if a trial asks for more of a resource than `available` holds.

    Args:
        available: the resources that exist, e.g. ray.cluster_resources().
        where: what holds them, for the message ("this machine", "the cluster at ...").
        kinds: resource names to compare (default: all that a trial asks for).
    """
    for spec in specs:
        seen: set[str] = set()
        for trial in trials[spec.name]:
            settings = {k: trial[k] for k in RESOURCE_KEYS if k in trial}
            if repr(settings) in seen:
                continue
            seen.add(repr(settings))
            request = trial_request(spec, trial)
            if request is None:
                continue
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


def check_cluster_resources(
    specs: Sequence[ExperimentSpec],
    trials: Mapping[str, list[dict[str, Any]]],
    address: str | None,
) -> None:
    """Once Ray runs: every trial against `ray.cluster_resources()` (the local Ray's, or the
    joined cluster's), before Tune queues any."""
    import ray

    where = f"the cluster at {address}" if address else "this machine"
    check_resources(specs, trials, ray.cluster_resources(), where)


def amounts(resources: Mapping[str, float], kinds: Sequence[str]) -> str:
    """`5 CPUs, 0 GPUs` for the named kinds of resource."""
    parts = []
    for kind in kinds:
        value = resources.get(kind, 0)
        shown = int(value) if float(value).is_integer() else round(value, 3)
        parts.append(f"{shown} {kind}{'' if value == 1 or not kind.isupper() else 's'}")
    return ", ".join(parts)


def machine_cpus() -> int:
    """The CPUs of this machine: a local Ray started here has at most as many."""
    return os.cpu_count() or 1
