"""`GePPOEnvRunner`: RLlib's ``SingleAgentEnvRunner`` with independent seeds and its own RNG.

RLlib seeds EnvRunner ``w`` with ``seed + w`` and gymnasium gives its sub-env ``i`` the seed
``seed + w + i``, so trials whose seeds differ by less than the number of envs share env seeds
(with 8 envs, seeds 0 and 1 share 7 of 8). And an EnvRunner in the driver (``num_env_runners=0``,
worker index 0) samples its actions from the process's global torch RNG, which the driver's
learner draws from too, so the same seed gives other samples in the driver than remotely.

GePPO's EnvRunner instead derives every seed from the trial's seed with numpy's ``SeedSequence``
(:func:`sampler_seeds`): env ``i`` of sampler ``r`` gets ``SeedSequence(seed, spawn_key=(role, r,
i))``, its actions come from a generator seeded with ``spawn_key=(role, r)``, where ``r`` counts
the EnvRunners that sample (the driver's when there are none, else remote ones from 0) and
``role`` separates training from evaluation. Seeds of different trials are then independent
draws, and sampling in the driver gives the same samples as on one remote EnvRunner. A
restarted EnvRunner and recreated envs get new seeds, derived from their restart count.

With ``stagger_starts`` it cuts its training envs' first episodes so that the trial's envs go
out of phase (:mod:`rllib_geppo.sampling.staggered_starts`).

It also tallies RLlib's per-step env metrics (the env step timer and the Prometheus count of
env steps) once per ``sample()`` call instead of on every env step, where they cost 8% of a
Hopper step with one env (:meth:`GePPOEnvRunner._try_env_step`).

Multi-agent runs sample with `GePPOMultiAgentEnvRunner`: RLlib's, with every step's rewards
checked. Both report a failed call's error to the driver (:class:`ReportsItsFailure`).
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np
import torch
from gymnasium.wrappers.vector import DictInfoToList
from ray.rllib.core import COMPONENT_MODULE_TO_ENV_CONNECTOR
from ray.rllib.env.env_errors import StepFailedRecreateEnvError
from ray.rllib.env.env_runner import ENV_STEP_FAILURE, NUM_ENV_STEP_FAILURES_LIFETIME
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics import ENV_STEP_TIMER

from rllib_geppo import private_ray
from rllib_geppo.sampling.env_checks import reward_problem
from rllib_geppo.sampling.lean_sampling import LeanSampling, infos_as_list
from rllib_geppo.sampling.pipelines import LEAN_SAMPLING, FusedModuleToEnvPipeline
from rllib_geppo.sampling.staggered_starts import FirstEpisodeLimit, first_episode_limit, num_training_envs

logger = logging.getLogger(__name__)

#: RLlib's internals the EnvRunners rely on: their seeds and the multi-agent reward check, and
#: the lean sampling path's env step tally (see :mod:`rllib_geppo.private_ray`).
PRIVATE_RAY_NAMES = (private_ray.ENV_RUNNERS, private_ray.LEAN_SAMPLING)

#: Whether GePPO's seeds and reward check run on the installed Ray, decided once, at import.
OWN_SEEDS = private_ray.usable(
    private_ray.ENV_RUNNERS, "GePPO's EnvRunner seeds and multi-agent reward check"
)


def sampler_seeds(
    seed: int, sampler: int, num_envs: int, *, evaluation: bool = False, generation: tuple[int, int] = (0, 0)
) -> tuple[list[int], int]:
    """``(env seeds, action seed)`` of sampler ``sampler`` of a trial with seed ``seed``.

    Env seeds are 32-bit (what gymnasium's ``reset(seed=...)`` takes), the action seed 64-bit.
    ``generation`` counts the sampler's restarts and its envs' recreations: each one gets new
    seeds, derived from it (reproducible, and never a replay of episodes already sampled).
    """
    role = int(evaluation)
    extra = tuple(generation) if any(generation) else ()
    env_seeds = [
        int(np.random.SeedSequence(seed, spawn_key=(role, sampler, i, *extra)).generate_state(1)[0])
        for i in range(num_envs)
    ]
    action_seed = int(
        np.random.SeedSequence(seed, spawn_key=(role, sampler, *extra)).generate_state(1, np.uint64)[0]
    )
    return env_seeds, action_seed


class ReportsItsFailure:
    """For an RLlib EnvRunner run as a remote actor: a call that fails gives the driver its
    error, and the actor exits at its next call.

    RLlib's ``FaultAwareApply.apply`` logs a failed call's error in the EnvRunner's own log,
    sleeps ``delay_between_env_runner_restarts_s`` (60 s by default) and exits: the driver
    learns only that the actor died, and while it sleeps, calls to it time out as if its
    environment blocked. Here the error goes back at once (a ``RayTaskError`` around it, which
    RLlib logs and GePPO reports), and the actor exits at its next call as RLlib's would: a
    health probe (``ping``, which leads to the restart) after the same delay, any other call
    (``stop``) at once, so that nothing runs on the broken state.
    """

    _failed = False

    def apply(self, func, *args, **kwargs):
        if self._failed:
            self._exit(delay=False)
        try:
            return func(self, *args, **kwargs)
        except Exception:
            logger.exception(
                "EnvRunner call failed: its error goes to the driver, and this "
                "EnvRunner exits at its next call."
            )
            self._failed = True
            raise

    def ping(self) -> str:
        if self._failed:
            self._exit(delay=True)
        return super().ping()

    def _exit(self, *, delay: bool) -> None:
        if delay and self.config.restart_failed_env_runners:
            time.sleep(self.config.delay_between_env_runner_restarts_s)
        sys.exit(1)


class GePPOMultiAgentEnvRunner(ReportsItsFailure, MultiAgentEnvRunner):
    """RLlib's ``MultiAgentEnvRunner``, with every step's rewards checked
    (:func:`~rllib_geppo.sampling.env_checks.reward_problem`): RLlib's episodes would store a reward of
    ``None`` as 0.0 without a word."""

    def _try_env_step(self, actions):
        results = super()._try_env_step(actions)
        if results is not ENV_STEP_FAILURE:
            for rewards in results[1]:  # one dict per sub-environment
                problem = reward_problem(rewards)
                if problem:
                    raise ValueError(
                        f"GePPO's EnvRunner: environment {self.config.env!r}: {problem} "
                        "(RLlib would store 0.0 in its place). Fix the environment: a number for "
                        "every agent in the reward dict, 0.0 where it earned nothing."
                    )
        return results


class GePPOEnvRunner(ReportsItsFailure, LeanSampling, SingleAgentEnvRunner):
    """A ``SingleAgentEnvRunner`` seeded by :func:`sampler_seeds`, with env step metrics tallied
    per ``sample()`` call (see the module doc).

    Without ``config.seed`` it seeds as RLlib's EnvRunner does. The own action RNG needs GePPO's
    fused module-to-env pipeline (RLlib's default pieces); with a user's module-to-env
    connectors, actions come from the global torch RNG, seeded from the action seed.
    """

    def __init__(self, *, config, **kwargs):
        self._restarts = 0  # of this EnvRunner, as the Algorithm counts them (reseed)
        self._recreations = -1  # of its envs (make_env, which RLlib's __init__ calls first)
        super().__init__(config=config, **kwargs)
        self._env_steps_untallied = 0  # env.step() calls since the last tally
        self._env_step_seconds = 0.0  # and the seconds they took
        self._apply_seeds()

    def _apply_seeds(self) -> None:
        """Seed the envs' next reset and the actions from :func:`sampler_seeds`."""
        if self.config.seed is None or self.env is None or not OWN_SEEDS:
            return
        env_seeds, action_seed = sampler_seeds(
            self.config.seed,
            self.sampler_index,
            self.num_envs,
            evaluation=self.config.in_evaluation,
            generation=(self._restarts, self._recreations),
        )
        self._seed = env_seeds  # RLlib passes it to the vector env's reset after make_env
        torch.manual_seed(action_seed)
        module_to_env = dict(self.get_checkpointable_components())[COMPONENT_MODULE_TO_ENV_CONNECTOR]
        if isinstance(module_to_env, FusedModuleToEnvPipeline):
            module_to_env.rng = torch.Generator().manual_seed(action_seed)

    def reseed(self, restarts: int) -> None:
        """New seeds after this EnvRunner's restart number ``restarts`` (a restarted actor is
        built again with its original arguments, which would replay its first episodes)."""
        self._restarts = restarts
        self._apply_seeds()

    @property
    def sampler_index(self) -> int:
        """Which of the trial's samplers this is: 0 in the driver without remote EnvRunners,
        else the remote EnvRunner's number from 0 (RLlib's worker index less one)."""
        return max(0, (self.worker_index or 0) - 1)

    def make_env(self) -> None:
        """RLlib's vector env; with ``config.stagger_starts``, a training EnvRunner's envs cut
        their first episodes so that the run's envs go out of phase
        (:mod:`rllib_geppo.sampling.staggered_starts`)."""
        super().make_env()  # sets self.env or raises
        self._recreations += 1
        if self._recreations:  # the envs of a failed step, recreated: new seeds
            self._apply_seeds()
        if self.config.stagger_starts and not self.config.in_evaluation:
            self._stagger_starts()

    def _stagger_starts(self) -> None:
        envs = getattr(self.env.unwrapped, "envs", None)
        if envs is None:  # an AsyncVectorEnv: its sub-envs live in other processes
            logger.warning("stagger_starts needs gym_env_vectorize_mode='SYNC'; the envs start in phase.")
            return
        time_limit = envs[0].spec.max_episode_steps if envs[0].spec else None
        if not time_limit:
            return  # no time limit: nothing keeps the episodes in phase
        num_envs = num_training_envs(self.config.num_env_runners, len(envs))
        for i, env in enumerate(envs):
            steps = first_episode_limit(time_limit, self.sampler_index * len(envs) + i, num_envs)
            if steps < time_limit:
                envs[i] = FirstEpisodeLimit(env, steps)

    def sample(self, **kwargs):
        """RLlib's ``sample()``, then one tally of its env steps (also after a failure)."""
        try:
            return super().sample(**kwargs)
        finally:
            self._tally_env_steps()

    def _try_env_step(self, actions):
        """RLlib's env step, with its metrics tallied per ``sample()`` call (see the module doc).

        RLlib times every step into its ``MetricsLogger`` and increments a Prometheus counter;
        here a step adds to two numbers, and :meth:`_tally_env_steps` logs the mean step time
        and the count once per call. A failing step is handled as RLlib handles it. Under an
        Ray where the lean sampling path steps aside (``LEAN_SAMPLING`` false) RLlib's own
        method runs.
        """
        if not LEAN_SAMPLING:
            return super()._try_env_step(actions)
        start = time.perf_counter()
        try:
            if type(self.env) is DictInfoToList:  # RLlib's wrapper, its conversion done faster
                *results, infos = self.env.env.step(actions)
                results = (*results, infos_as_list(infos, self.num_envs))
            else:
                results = self.env.step(actions)
        except Exception as error:  # noqa: BLE001 - any env error, as RLlib catches it
            return self._env_step_failed(error)
        self._env_step_seconds += time.perf_counter() - start
        self._env_steps_untallied += 1
        return results

    def _tally_env_steps(self) -> None:
        if self._env_steps_untallied:
            self.metrics.log_value(
                ENV_STEP_TIMER, self._env_step_seconds / self._env_steps_untallied, reduce="ema"
            )
            self._log_env_steps(metric=self._metrics_num_try_env_step, num_steps=self._env_steps_untallied)
        self._env_steps_untallied, self._env_step_seconds = 0, 0.0

    def _env_step_failed(self, error: Exception):
        """RLlib's handling of a failed env step: with ``restart_failed_sub_environments``
        recreate the env and tell the sampling loop to reset; otherwise raise."""
        self.metrics.log_value(NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum")
        if not self.config.restart_failed_sub_environments:
            # Logged here too: Tune reports a failed trial by its error file, not the message.
            logger.exception("env.step() failed and restart_failed_sub_environments is off.")
            raise RuntimeError(
                f"GePPO's EnvRunner: env.step() failed with {type(error).__name__}: {error}. "
                "Fix the environment, or set config.fault_tolerance("
                "restart_failed_sub_environments=True) to recreate the env and go on."
            ) from error
        if not isinstance(error, StepFailedRecreateEnvError):
            logger.exception("env.step() failed; recreating the env and resetting its episodes.")
        self.make_env()
        return ENV_STEP_FAILURE
