"""What each trained module will see and be, checked before any worker starts.

:func:`check_module_spaces` makes the environment once in the driver, runs its spaces through
the env-to-module connectors as the EnvRunners will (Dict and Tuple observations come out
flattened, see ``GePPOConfig.build_env_to_module_connector``), builds each trained module from
the config's spec and checks it: every refused space or model fails here, with what to do
instead, not in a remote EnvRunner or learner.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from rllib_geppo.rl_module import check_spaces, normalizes_observations

ModuleID = str


def trained_modules(config: AlgorithmConfig) -> list[ModuleID]:
    """The modules GePPO trains: the single-agent module, or the multi-agent policies that
    ``policies_to_train`` selects (all of them by default), sorted."""
    if not config.is_multi_agent:
        return [DEFAULT_MODULE_ID]
    policies = sorted(config.policies)
    to_train = config.policies_to_train
    if to_train is None:
        return policies
    if callable(to_train):
        return [module_id for module_id in policies if to_train(module_id, None)]
    return [module_id for module_id in policies if module_id in to_train]


def module_spaces(config: AlgorithmConfig, env: gym.Env | MultiAgentEnv) -> dict[ModuleID, tuple[gym.Space, gym.Space]]:
    """Each module's (observation, action) space after the env-to-module connectors, from an
    env instance (single-agent: the default module's)."""
    if isinstance(env, MultiAgentEnv):
        agents = env.possible_agents
        observations = gym.spaces.Dict({agent: env.get_observation_space(agent) for agent in agents})
        actions = gym.spaces.Dict({agent: env.get_action_space(agent) for agent in agents})
    else:
        observations, actions = env.observation_space, env.action_space
    pipeline = config.build_env_to_module_connector(spaces={INPUT_ENV_SINGLE_SPACES: (observations, actions)})
    if not config.is_multi_agent:
        return {DEFAULT_MODULE_ID: (pipeline.observation_space, actions)}
    return {module_id: (space, pipeline.action_space[module_id])
            for module_id, space in pipeline.observation_space.spaces.items()}


def check_module_spaces(config: AlgorithmConfig, env_creator: Callable[[EnvContext], Any]) -> dict[ModuleID, gym.Space]:
    """Build and check every trained module in the driver; returns each one's observation
    space. Raises ValueError naming the environment, the module and the fix."""
    if config.observation_space is not None and config.action_space is not None and not config.is_multi_agent:
        spaces = {DEFAULT_MODULE_ID: (config.observation_space, config.action_space)}
    else:
        env = env_creator(EnvContext(config.env_config, worker_index=0))
        try:
            spaces = (module_spaces(config, env) if config.enable_env_runner_and_connector_v2
                      else {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)})
        finally:
            env.close()
    if not config.enable_env_runner_and_connector_v2:
        try:
            check_old_stack_spaces(*spaces[DEFAULT_MODULE_ID])
        except ValueError as err:
            raise ValueError(f"{config.env!r}: {err}") from None
        return {DEFAULT_MODULE_ID: spaces[DEFAULT_MODULE_ID][0]}
    missing = [module_id for module_id in trained_modules(config) if module_id not in spaces]
    if missing:
        raise ValueError(f"{config.env!r}: no agent maps to the trained module(s) {missing}; check "
                         "policy_mapping_fn and policies_to_train.")
    specs = config.get_multi_rl_module_spec(spaces=spaces).rl_module_specs
    for module_id in trained_modules(config):
        try:
            check_trainable(specs[module_id].build())
        except ValueError as err:
            where = f"module {module_id!r}: " if config.is_multi_agent else ""
            raise ValueError(f"{config.env!r}: {where}{err}") from None
    return {module_id: spaces[module_id][0] for module_id in trained_modules(config)}


def check_old_stack_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise ValueError unless the old API stack's policy can take the spaces: a flat Box
    observation and a flat Box or Discrete action (the new API stack takes more)."""
    check_spaces(observation_space, action_space)
    if not normalizes_observations(observation_space) or not isinstance(
            action_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise ValueError(
            f"GePPO's old API stack takes flat Box observations and flat Box or Discrete actions, "
            f"got {observation_space} and {action_space}. Fix: use RLlib's new API stack (remove "
            ".api_stack(...)), which also takes images, MultiDiscrete and MultiBinary actions.")


def check_trainable(module) -> None:
    """Raise ValueError unless GePPO can train ``module``: it computes values (RLlib's
    ``ValueFunctionAPI``, which V-trace needs) and keeps no recurrent state (GePPO re-evaluates
    stored samples one by one, so a recurrent module would need each sample's stored state and
    sequence)."""
    if not isinstance(module, ValueFunctionAPI):
        raise ValueError(
            f"{type(module).__name__} does not implement RLlib's ValueFunctionAPI "
            "(compute_values), which GePPO's V-trace targets need. Fix: implement "
            "ray.rllib.core.rl_module.apis.ValueFunctionAPI in the module (docs/your_environment.md).")
    if module.is_stateful():
        raise ValueError(
            f"{type(module).__name__} is recurrent (is_stateful() is True): GePPO re-evaluates "
            "every stored sample under the current policy one sample at a time, without its "
            "recurrent state or sequence, so it trains feed-forward modules only. Fix: stack "
            "recent observations instead (RLlib's FrameStackingEnvToModule connector) and use a "
            "feed-forward module.")
