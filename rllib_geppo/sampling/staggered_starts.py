"""Staggered episode starts: the training envs of a run begin their episodes out of phase.

Envs that start together and whose episodes all last the time limit (HalfCheetah's 1,000 steps)
stay in phase for the whole run: with E envs per EnvRunner each advances n / E steps per
iteration, so every stored batch holds the same stretch of the episode in every env, and the
store cycles through the episode's phases (start-up, running, the steps before the time limit)
instead of holding all of them at once, as one env's store does. Cutting the first episode of
training env g of G after ``L - round(L * g / G)`` steps (L the time limit) spreads their
phases evenly from then on; env 0 keeps its full first episode, so one env (G = 1) is never
cut. A cut is a time-limit truncation: GePPO bootstraps from the value of its last state, as at
any time limit. An EnvRunner that recreates its envs (``restart_failed_sub_environments``)
staggers the new ones again, since they start together too.

On HalfCheetah-v5 with 8 envs it removes the value loss's cycle with the envs' phase
(``benchmarks/phases.py``) but measured no change in return, so it is off by default
(``stagger_starts``; docs/results/layouts).

The wrapper is pure gymnasium; :class:`rllib_geppo.sampling.env_runner.GePPOEnvRunner` applies it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def num_training_envs(num_env_runners: int, envs_per_env_runner: int) -> int:
    """G, the training envs of a run: ``num_env_runners=0`` samples in the driver, one sampler."""
    return max(1, num_env_runners) * envs_per_env_runner


def first_episode_limit(time_limit: int, env_index: int, num_envs: int) -> int:
    """Steps after which the first episode of training env ``env_index`` of ``num_envs`` is
    cut: ``time_limit - round(time_limit * env_index / num_envs)`` (``time_limit`` for env 0).

    ``env_index`` counts the envs of all training EnvRunners: ``runner * envs_per_runner + i``.
    """
    if not 0 <= env_index < num_envs:
        raise ValueError(f"env_index {env_index} is outside 0..{num_envs - 1}.")
    return time_limit - round(time_limit * env_index / num_envs)


class FirstEpisodeLimit(gym.Wrapper):
    """Truncates the env's first episode after ``steps`` steps (unless it ends sooner); every
    later episode runs as the env does."""

    def __init__(self, env: gym.Env, steps: int):
        super().__init__(env)
        if steps < 1:
            raise ValueError(f"FirstEpisodeLimit: steps must be >= 1, got {steps}.")
        self.steps = steps
        self._resets = 0  # episodes started
        self._elapsed = 0  # steps into the current episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._resets += 1
        self._elapsed = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._resets == 1 and self._elapsed >= self.steps and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info
