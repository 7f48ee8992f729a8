"""Finding out, in the driver, why an environment fails in the EnvRunners.

A failing EnvRunner exits, and its error stays in its own log; the driver learns only that the
actor died. :func:`diagnose_env` makes the environment in the driver and runs it with random
actions under gymnasium's passive checker, which also flags what RLlib's episodes cannot take
(a reward that is not a number, an observation outside its space), and describes the first
problem it meets.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import gymnasium as gym
from gymnasium.utils.passive_env_checker import env_reset_passive_checker, env_step_passive_checker
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env import MultiAgentEnv


def diagnose_env(env_creator: Callable[[EnvContext], Any], env_config: dict, *, steps: int = 200,
                 seed: int = 0) -> str | None:
    """The first problem of the environment within ``steps`` random steps (exceptions from
    making, resetting or stepping it, and gymnasium's checker warnings), or None if it runs
    cleanly (or is multi-agent, which the checker does not cover)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env = env_creator(EnvContext(env_config, worker_index=0))
        except Exception as error:  # noqa: BLE001 - whatever the constructor raises
            return f"making it raised {type(error).__name__}: {error}"
        try:
            if isinstance(env, MultiAgentEnv):
                return None
            return _run(env, steps, seed, caught)
        finally:
            env.close()


def _run(env: gym.Env, steps: int, seed: int, caught: list) -> str | None:
    env.action_space.seed(seed)
    try:
        env_reset_passive_checker(env, seed=seed)
    except Exception as error:  # noqa: BLE001
        return f"reset() raised {type(error).__name__}: {error}"
    if caught:
        return f"reset(): {_clean(caught[0].message)}"
    for step in range(1, steps + 1):
        try:
            _, _, terminated, truncated, _ = env_step_passive_checker(env, env.action_space.sample())
        except Exception as error:  # noqa: BLE001
            return f"step() raised {type(error).__name__}: {error} (at step {step})"
        if caught:
            return f"step(): {_clean(caught[0].message)} (at step {step})"
        if terminated or truncated:
            env.reset()
    return None


def _clean(message: Any) -> str:
    """A warning's text without gymnasium's terminal colours and prefix."""
    return str(message).replace("\x1b[33m", "").replace("\x1b[0m", "").removeprefix("WARN: ")
