"""Environments that several test modules share: one that fails in a chosen way, one with a
space GePPO refuses, and one that reports the actions it gets. Shipped to Ray's workers by value
(tests are no installed package)."""

import os
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import ray.cloudpickle

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Fault(gym.Wrapper):
    """Pendulum with one bad step, counted over the env's life: a NaN reward, a NaN in
    observation index 1, an exception (once per marker file, so a restarted EnvRunner's env
    does not fail again), a step that never returns ("block"), the process's death after which
    the env cannot be made again ("gone"); or, "broken", an exception at every step from then
    on."""

    def __init__(self, config: dict):
        super().__init__(gym.make("Pendulum-v1"))
        self.kind, self.at, self.marker = config["kind"], config["at"], config.get("marker")
        if self.kind == "gone" and Path(self.marker).exists():
            raise RuntimeError("the simulator's license is gone")
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.kind == "nan_reward":
                reward = float("nan")
            elif self.kind == "nan_obs":
                obs = obs.copy()
                obs[1] = np.nan
            elif self.kind == "crash" and not Path(self.marker).exists():
                Path(self.marker).touch()
                raise RuntimeError("the simulator crashed")
            elif self.kind == "block":
                time.sleep(3600)
            elif self.kind == "gone":  # the process dies, and no restart can make the env again
                Path(self.marker).touch()
                os._exit(1)
        if self.kind == "broken" and self.steps >= self.at:
            raise RuntimeError("the simulator is broken")
        return obs, reward, terminated, truncated, info


class TupleActionEnv(gym.Env):
    """Two actions at once, which GePPO's module does not take."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)])

    def __init__(self, config=None):
        super().__init__()


class ActionReport(gym.Env):
    """Box actions with asymmetric bounds, [0, 10] and [-3, -1]; each step's info holds the action
    the env got (``info["action"]``). 20 steps to an episode, reward 0."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(np.float32([0, -3]), np.float32([10, -1]))

    def __init__(self, config=None):
        super().__init__()
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(), {}

    def step(self, action):
        self.t += 1
        return self.obs(), 0.0, False, self.t >= 20, {"action": np.array(action)}

    def obs(self) -> np.ndarray:
        return self.np_random.uniform(-1, 1, 2).astype(np.float32)
