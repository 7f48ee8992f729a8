"""`StackFrames`: the last k observations as one, stacked in the environment.

A feed-forward policy that needs recent history (velocities from positions, motion in images)
gets it from stacked observations. GePPO stores the episodes' observations and re-evaluates them
in every update, so the stacking must happen where the episodes are recorded: in the
environment. RLlib's ``FrameStackingEnvToModule`` connector stacks only on the way to the
EnvRunner's module and is refused (``rllib_geppo.rl_module.checks``).

Observations are concatenated on their last axis, oldest first: a flat Box of d features becomes
k x d features, an image of height x width x c channels becomes height x width x k c, both of
which GePPO's module takes (an MLP and a CNN). After a reset every frame is the first
observation.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np


class StackFrames(gym.Wrapper):
    """``env``'s last ``num_frames`` observations concatenated on their last axis.

    .. code-block:: python

        import gymnasium as gym
        from ray import tune
        from rllib_geppo import GePPOConfig, StackFrames

        tune.register_env("StackedHopper", lambda config: StackFrames(gym.make("Hopper-v5"), 4))
        config = GePPOConfig().environment("StackedHopper")
    """

    def __init__(self, env: gym.Env, num_frames: int):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (1, 3):
            raise ValueError(
                f"StackFrames stacks flat Box or image (height x width x channels) observations, got {space}."
            )
        if not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"num_frames must be an integer >= 1, got {num_frames!r}.")
        self.observation_space = gym.spaces.Box(
            np.concatenate([space.low] * num_frames, axis=-1),
            np.concatenate([space.high] * num_frames, axis=-1),
            dtype=space.dtype,
        )
        self._frames: deque[np.ndarray] = deque(maxlen=num_frames)

    def reset(self, **kwargs) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._frames.extend([obs] * self._frames.maxlen)
        return self._stacked(), info

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(obs)
        return self._stacked(), reward, terminated, truncated, info

    def _stacked(self) -> np.ndarray:
        return np.concatenate(self._frames, axis=-1)
