"""Finding out, in the driver, why an environment fails in the EnvRunners.

An EnvRunner whose environment fails may die without its error reaching the driver (RLlib's
EnvRunners, or one whose process exits), and an environment can fail only in some episodes.
:func:`diagnose_env` makes the environment in the driver and runs it with random
actions under gymnasium's passive checker, which also flags what RLlib's episodes cannot take
(a reward that is not a number, an observation outside its space), and describes the first
problem it meets. A multi-agent environment runs with random actions for the agents that are to
act, its rewards checked by :func:`reward_problem`, which GePPO's multi-agent EnvRunner also
applies to every step (RLlib's episodes store a ``None`` reward as 0.0 without a word).
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.passive_env_checker import env_reset_passive_checker, env_step_passive_checker
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from rllib_geppo import private_ray


def is_class_path(env: Any) -> bool:
    """Whether ``env`` is a class path ("pkg.envs.MyEnv"): a string with a dot that is neither a
    Tune name nor a gymnasium id (registered, or "module:Id")."""
    return (
        isinstance(env, str)
        and "." in env
        and ":" not in env
        and env not in gym.registry
        and not private_ray.is_registered_env(env)
    )


def diagnose_env(
    env_creator: Callable[[EnvContext], Any], env_config: dict, *, steps: int = 200, seed: int = 0
) -> str | None:
    """The first problem of the environment within ``steps`` random steps (exceptions from
    making, resetting or stepping it, gymnasium's checker warnings, and for a multi-agent env a
    reward that is not a number), or None if it runs cleanly."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env = env_creator(EnvContext(env_config, worker_index=0))
        except Exception as error:  # noqa: BLE001 - whatever the constructor raises
            return f"making it raised {type(error).__name__}: {error}"
        try:
            if isinstance(env, MultiAgentEnv):
                return _run_multi_agent(env, steps, seed)
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


def _run_multi_agent(env: MultiAgentEnv, steps: int, seed: int) -> str | None:
    """Random actions for the agents that received an observation; checks every reward."""
    for agent in env.possible_agents:
        env.get_action_space(agent).seed(seed)
    try:
        observations, _ = env.reset(seed=seed)
    except Exception as error:  # noqa: BLE001
        return f"reset() raised {type(error).__name__}: {error}"
    for step in range(1, steps + 1):
        actions = {agent: env.get_action_space(agent).sample() for agent in observations}
        try:
            observations, rewards, terminated, truncated, _ = env.step(actions)
        except Exception as error:  # noqa: BLE001
            return f"step() raised {type(error).__name__}: {error} (at step {step})"
        problem = reward_problem(rewards)
        if problem:
            return f"step(): {problem} (at step {step})"
        if terminated.get("__all__") or truncated.get("__all__"):
            observations, _ = env.reset()
    return None


def reward_problem(rewards: Mapping[Any, Any]) -> str | None:
    """What is wrong with a multi-agent step's rewards (agent -> reward): the first agent whose
    reward is not a number (``None``, a string, an array of several values), or None."""
    for agent, reward in rewards.items():
        if not (
            isinstance(reward, numbers.Real)
            or isinstance(reward, np.ndarray)
            and reward.shape == ()
            and reward.dtype.kind in "biuf"
        ):
            return f"the reward of agent {agent!r} is {reward!r}, not a number"
    return None


def _clean(message: Any) -> str:
    """A warning's text without gymnasium's terminal colours and prefix."""
    return str(message).replace("\x1b[33m", "").replace("\x1b[0m", "").removeprefix("WARN: ")
