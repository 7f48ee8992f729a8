"""GePPO's side of RLlib's EnvRunners: weights handed over blocking, new seeds for restarted
EnvRunners, and EnvRunners that fail or block, which stop a run with the environment's error
instead of letting it go on for ever without a sample, or hang.

RLlib restarts failed EnvRunners (``restart_failed_env_runners``) and tolerates the samples they
fail, logging the remote errors through its actor manager and nowhere else. An environment that
fails whenever it runs would keep a run restarting for ever; one that blocks in ``step()`` would
hang every blocking call. :class:`FailedSamples` counts samples that failed with no env step and
stops the run with the last error, diagnosed in the driver; :func:`wait_on_env_runners` bounds
every blocking call by ``sample_timeout_s``, :func:`sync_weights` among them.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from rllib_geppo import private_ray
from rllib_geppo.sampling.env_checks import diagnose_env

#: RLlib's logger through which it reports the errors of remote EnvRunners it tolerates, and
#: how it logs them (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = private_ray.ACTOR_MANAGER_LOG
ACTOR_MANAGER_LOGGER = "ray.rllib.utils.actor_manager"


class EnvRunnerFailedError(RuntimeError):
    """Sample after sample failed in the EnvRunners (an environment that fails whenever it runs)."""


class EnvRunnerTimeoutError(TimeoutError):
    """EnvRunners did not answer within ``sample_timeout_s`` (an environment that blocks)."""


class LastEnvRunnerError(logging.Handler):
    """The last EnvRunner error RLlib's actor manager logged (it logs the remote errors of a
    sample it tolerates, and goes on): attached to that logger until :meth:`close`."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self._last: BaseException | None = None
        logging.getLogger(ACTOR_MANAGER_LOGGER).addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, BaseException):
            self._last = record.msg

    def pop(self) -> BaseException | None:
        """The last error since the previous call, or None."""
        last, self._last = self._last, None
        return last

    @staticmethod
    def describe(error: BaseException | None) -> str:
        """``Type: first line of the message`` of the error an EnvRunner raised (unwrapped from
        Ray's ``RayTaskError``), for a one-line message; the whole error is chained to it."""
        if error is None:
            return "none reported"
        cause = getattr(error, "cause", None)
        error = cause if isinstance(cause, BaseException) else error
        lines = str(error).strip().splitlines()
        return f"{type(error).__name__}: {lines[0].removesuffix('.')}" if lines else type(error).__name__

    def close(self) -> None:
        logging.getLogger(ACTOR_MANAGER_LOGGER).removeHandler(self)
        super().close()


class FailedSamples:
    """Counts the samples that failed with no env step, and stops the run when they show an
    environment that fails whenever it runs, or EnvRunners that never come back.

    Args:
        config: the Algorithm's config (``env``, ``env_config``, ``max_failed_samples_in_a_row``,
            ``env_runner_restore_timeout_s``).
        env_creator: makes the environment in the driver, to diagnose it.
    """

    def __init__(self, config: Any, env_creator: Callable):
        self.config = config
        self.env_creator = env_creator
        self._errors = LastEnvRunnerError()
        self._in_a_row = 0
        self._no_env_step_since: float | None = None  # time.monotonic() of the first empty sample
        self._last_error: BaseException | None = None

    def count(self, steps: int, *, iteration: int) -> None:
        """A sample of ``steps`` env steps came back. Raise EnvRunnerFailedError once
        ``max_failed_samples_in_a_row`` samples in a row failed with no env step (iterations
        whose EnvRunners were only being restarted, sampling nothing and failing nothing, do
        not break the row), or once no env step came for ``env_runner_restore_timeout_s``
        while no error was reported: EnvRunners that never come back (a restart whose
        constructor fails) fail their health checks without a log line."""
        failure = self._errors.pop()
        self._last_error = failure or self._last_error
        if steps:
            self._in_a_row = 0
            self._no_env_step_since = None
            return
        if self._no_env_step_since is None:
            self._no_env_step_since = time.monotonic()
        if failure is None:  # nothing sampled and nothing failed: EnvRunners being restored
            self._check_restore_timeout(iteration)
            return
        self._in_a_row += 1
        if self._in_a_row >= self.config.max_failed_samples_in_a_row:
            problem = diagnose_env(self.env_creator, self.config.env_config)
            found = (
                f"Made in the driver and run with random actions, it shows the problem: {problem}."
                if problem
                else "It runs cleanly in the driver with random actions (the "
                "EnvRunners' logs hold their tracebacks)."
            )
            raise EnvRunnerFailedError(
                f"iteration {iteration}: {self._in_a_row} sample{'s' if self._in_a_row > 1 else ''} "
                f"in a row failed with no env step (RLlib restarted the EnvRunners in between), so "
                f"environment {self.config.env!r} seems to fail whenever it runs. The last "
                f"EnvRunner error: {LastEnvRunnerError.describe(self._last_error)}. {found} Fix the "
                "environment; max_failed_samples_in_a_row sets how many such samples stop the "
                "run."
            ) from self._last_error

    def _check_restore_timeout(self, iteration: int) -> None:
        waited = time.monotonic() - self._no_env_step_since
        if waited > self.config.env_runner_restore_timeout_s:
            raise EnvRunnerFailedError(
                f"iteration {iteration}: no env step for {waited:.0f} s, and no EnvRunner "
                "reported an error: the EnvRunners RLlib is restoring do not come back (a restart "
                "whose environment or constructor fails, or a lost node). The last EnvRunner "
                f"error: {LastEnvRunnerError.describe(self._last_error)}. The EnvRunners' logs "
                "hold the cause; .fault_tolerance(env_runner_restore_timeout_s=...) sets how long "
                "to wait (RLlib's default: 1,800 s)."
            ) from self._last_error

    def close(self) -> None:
        self._errors.close()


def wait_on_env_runners(
    group: Any, fn: Callable, what: str, *, timeout_s: float | None, iteration: int, env: Any
) -> list:
    """``fn`` on every healthy EnvRunner of ``group`` (and its local one), waiting at most
    ``timeout_s`` (``sample_timeout_s``; None waits as long as it takes). If any does not
    answer in time, the group's remote EnvRunners are killed and EnvRunnerTimeoutError names
    the cause: ``what`` they did not do, in iteration ``iteration``, with environment ``env``."""
    results = group.foreach_env_runner(fn, local_env_runner=True, timeout_seconds=timeout_s)
    # After the call: an EnvRunner that died meanwhile is unhealthy (RLlib restarts it);
    # one that is healthy but did not answer is busy in its environment.
    expected = group.num_healthy_remote_workers() + (1 if group.local_env_runner is not None else 0)
    if len(results) < expected and timeout_s is not None:
        group.reset([])  # kills the remote EnvRunners, so that stopping does not wait on them
        raise EnvRunnerTimeoutError(
            f"iteration {iteration}: {expected - len(results)} of {expected} EnvRunners did "
            f"not {what} within {timeout_s:g} s (sample_timeout_s). An EnvRunner is busy while its "
            f"environment's step() or reset() runs: environment {env!r} may block. Fix "
            "the environment, or raise sample_timeout_s if its steps are that slow."
        )
    return results


class ActingPolicies:
    """The policies the EnvRunners act with next, oldest first: the learners' newest, pi_k, or
    with ``sample_lag`` set the one ``held_back_updates`` updates older (pi_0 while there is
    none that old). Each is the inference-only module and its ``weights_seq_no``."""

    def __init__(self, learner_group: Any, held_back_updates: int):
        self.learner_group = learner_group
        self._policies: deque[dict[str, Any]] = deque(maxlen=held_back_updates + 1)
        if held_back_updates:
            self._policies.append(self.newest())

    def newest(self) -> dict[str, Any]:
        """The learners' policy as the EnvRunners take it."""
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True
        )[COMPONENT_LEARNER]
        return {COMPONENT_RL_MODULE: state[COMPONENT_RL_MODULE], WEIGHTS_SEQ_NO: state[WEIGHTS_SEQ_NO]}

    def next(self, *, restart: bool = False) -> dict[str, Any]:
        """The policy to act with next, after the learners' newest joined the queue.
        ``restart`` (after a restore) empties the queue first."""
        newest = self.newest()
        if restart:
            self._policies.clear()
        self._policies.append(newest)
        return self._policies[0]


def sync_weights(
    groups: Sequence[Any],
    state: dict[str, Any],
    *,
    force: bool,
    timeout_s: float | None,
    iteration: int,
    env: Any,
) -> None:
    """Give every EnvRunner of ``groups`` the acting policy ``state`` (the inference-only
    module and its ``weights_seq_no``), and wait for all of them.

    RLlib's ``sync_weights`` is fire-and-forget and drops requests to busy actors; GePPO's ages
    need every batch tagged with the policy that really collected it, so this sync blocks, with
    ``timeout_s`` as its limit (:func:`wait_on_env_runners`: an EnvRunner stuck in an env's
    ``step()`` fails the run instead of hanging it). An EnvRunner loads weights only with a
    version above its own, but takes the version anyway: ``force=True`` (after a restore, whose
    version may be older than the EnvRunners') loads the module first without a version, which
    RLlib's ``set_state`` always loads, then the version alone.
    """
    ref = ray.put(state)

    def sync(runner) -> bool:
        new = ray.get(ref)
        if force:
            runner.set_state({COMPONENT_RL_MODULE: new[COMPONENT_RL_MODULE]})
        runner.set_state(new)
        return True

    for group in groups:
        wait_on_env_runners(
            group, sync, "take the new weights", timeout_s=timeout_s, iteration=iteration, env=env
        )


def reseed_restarted(
    group: Any, restored: Sequence[int], restarts: dict[tuple[bool, int], int], *, evaluation: bool
) -> None:
    """Give each restarted EnvRunner of ``group`` new seeds, derived from its restart count
    (counted in ``restarts``, keyed by (evaluation, index)), so that it does not replay the
    episodes of its first life."""
    for index in restored:
        key = (evaluation, index)
        restarts[key] = count = restarts.get(key, 0) + 1
        group.foreach_env_runner(
            lambda runner, n=count: runner.reseed(n) if hasattr(runner, "reseed") else None,
            remote_worker_ids=[index],
            local_env_runner=False,
        )
