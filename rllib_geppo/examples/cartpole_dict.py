"""RLlib's CartPole with Dict observations, with CartPole-v1's episode limit.

RLlib's ``CartPoleWithDictObservationSpace`` has no time limit: once a policy balances the
pole, an episode lasts until the run stops and reports no return. :class:`CartPoleDict` ends
episodes at 500 steps (truncated), as CartPole-v1 does. Name it by class path in a config or
YAML file: ``rllib_geppo.examples.cartpole_dict.CartPoleDict``.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.examples.envs.classes.cartpole_with_dict_observation_space import (
    CartPoleWithDictObservationSpace,
)

#: CartPole-v1's limit, in env steps per episode.
MAX_EPISODE_STEPS = 500


class CartPoleDict(CartPoleWithDictObservationSpace):
    """``CartPoleWithDictObservationSpace`` truncated after :data:`MAX_EPISODE_STEPS` steps."""

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._steps += 1
        return obs, reward, terminated, truncated or self._steps >= MAX_EPISODE_STEPS, info
