"""What each trained module will see and be, checked before any worker starts.

:func:`check_module_spaces` makes the environment once in the driver, runs its spaces through
the env-to-module connectors as the EnvRunners will (Dict and Tuple observations come out
flattened, see ``GePPOConfig.build_env_to_module_connector``), builds each trained module from
the config's spec and checks it: every refused space or model fails here, with what to do
instead, not in a remote EnvRunner or learner. :func:`module_problems` runs it from
``GePPOConfig.validate()``, so that these refusals come with the settings' in one message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.connectors.common.frame_stacking import FrameStacking
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from rllib_geppo import private_ray
from rllib_geppo.rl_module.apis import value_function_attributes
from rllib_geppo.rl_module.torch_rl_module import check_spaces, normalizes_observations

ModuleID = str

logger = logging.getLogger(__name__)


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


def module_spaces(config: AlgorithmConfig, pipeline) -> dict[ModuleID, tuple[gym.Space, gym.Space]]:
    """Each module's (observation, action) space after the env-to-module ``pipeline``
    (single-agent: the default module's)."""
    if not config.is_multi_agent:
        return {DEFAULT_MODULE_ID: (pipeline.observation_space, pipeline.input_action_space)}
    return {
        module_id: (space, pipeline.action_space[module_id])
        for module_id, space in pipeline.observation_space.spaces.items()
    }


def env_to_module_pipeline(config: AlgorithmConfig, env: gym.Env | MultiAgentEnv):
    """The EnvRunners' env-to-module pipeline for ``env``'s spaces, with the connectors GePPO
    cannot train with refused (:func:`check_env_to_module_pieces`)."""
    if isinstance(env, MultiAgentEnv):
        agents = env.possible_agents
        observations = gym.spaces.Dict({agent: env.get_observation_space(agent) for agent in agents})
        actions = gym.spaces.Dict({agent: env.get_action_space(agent) for agent in agents})
    else:
        observations, actions = env.observation_space, env.action_space
    pipeline = config.build_env_to_module_connector(spaces={INPUT_ENV_SINGLE_SPACES: (observations, actions)})
    check_env_to_module_pieces(pipeline.connectors)
    return pipeline


def check_env_to_module_pieces(pieces: list) -> None:
    """Raise ValueError for env-to-module connectors whose work the learner would not see.

    GePPO stores the observations of the episodes and re-evaluates them in every update, without
    the EnvRunner's connectors. ``FrameStackingEnvToModule`` stacks frames only on the way to
    the EnvRunner's module (the episodes keep single frames), so the learner would get other
    inputs than the policy acted on.
    """
    if any(isinstance(piece, FrameStacking) for piece in pieces):  # FrameStackingEnvToModule
        raise ValueError(
            "RLlib's FrameStackingEnvToModule stacks frames only on the way to the EnvRunner's "
            "module; the episodes, which GePPO stores and trains on, keep single frames. Fix: stack "
            "them in the environment, with rllib_geppo.StackFrames (the last k observations "
            "concatenated on their last axis: features, or an image's channels), e.g. "
            "tune.register_env('stacked', lambda cfg: StackFrames(gym.make(...), 4)) "
            "(docs/your_environment.md)."
        )


def check_module_spaces(
    config: AlgorithmConfig, env_creator: Callable[[EnvContext], Any]
) -> dict[ModuleID, gym.Space]:
    """Build and check every trained module in the driver; returns each one's observation
    space. Raises ValueError naming the environment, the module and the fix."""
    filtered = False  # the EnvRunners' pipeline holds RLlib's MeanStdFilter
    if config.observation_space is not None and config.action_space is not None and not config.is_multi_agent:
        spaces = {DEFAULT_MODULE_ID: (config.observation_space, config.action_space)}
    else:
        env = env_creator(EnvContext(config.env_config, worker_index=0))
        try:
            if config.is_multi_agent and isinstance(env, MultiAgentEnv):
                check_policy_mapping(config, env)
            spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
            if config.enable_env_runner_and_connector_v2:
                pipeline = env_to_module_pipeline(config, env)
                spaces = module_spaces(config, pipeline)
                filtered = any(isinstance(piece, MeanStdFilter) for piece in pipeline.connectors)
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
        raise ValueError(
            f"{config.env!r}: no agent maps to the trained module(s) {missing}; check "
            "policy_mapping_fn and policies_to_train."
        )
    if filtered:  # GePPOConfig leaves the filter out where all modules are GePPO's
        raise ValueError(f"{config.env!r}: {FILTERED_USER_MODULE}")
    specs = config.get_multi_rl_module_spec(spaces=spaces).rl_module_specs
    for module_id in trained_modules(config):
        try:
            check_trainable(specs[module_id].build())
        except ValueError as err:
            where = f"module {module_id!r}: " if config.is_multi_agent else ""
            raise ValueError(f"{config.env!r}: {where}{err}") from None
    return {module_id: spaces[module_id][0] for module_id in trained_modules(config)}


#: Why RLlib's MeanStdFilter cannot run with a user's RLModule, and what to do instead.
FILTERED_USER_MODULE = (
    "RLlib's MeanStdFilter runs here with your own RLModule. GePPO stores samples for several "
    "iterations and re-evaluates each under every new policy, but the filter normalised each "
    "with the statistics of the moment it was collected, so a stored sample would not be seen "
    "as the current policy sees that state; and the module saved alone "
    "(RLModule.from_checkpoint) would act on unnormalised observations. Fix: use GePPO's module "
    "(leave out rl_module_spec), which normalises observations itself and takes the filter's "
    "place; or normalise inside your module, with running statistics kept as buffers and "
    "changed only between updates, and remove the filter (docs/from_ppo.md)."
)


def module_problems(config: AlgorithmConfig) -> list[str]:
    """:func:`check_module_spaces` on the config's environment, made here in the driver: its
    message, or none. An env that cannot be made here (a package only the cluster's workers
    have) is left to the trial, with a warning. A config whose check passed is not checked
    again in this process (:func:`_module_check_key`): the trials of a sweep differ in seeds and
    settings that the check does not read."""
    if config.env is None:
        return []
    key = _module_check_key(config)
    if key in _PASSED:
        return []
    try:
        creator = private_ray.env_creator(config)
        if creator is None:  # RLlib's lookup has moved (logged): each trial checks its spaces
            return []
        check_module_spaces(config, creator)
    except ValueError as err:
        return [str(err)]
    except Exception as err:  # noqa: BLE001 - whatever the env's constructor raises
        logger.warning(
            "Could not make env %r to check its spaces before the run (%s: %s); each trial "
            "checks them when it starts.",
            config.env,
            type(err).__name__,
            err,
        )
        return []
    # The objects whose repr (an address) the key holds stay alive: no address is reused.
    _PASSED[key] = (config.env, config.policy_mapping_fn, private_ray.env_to_module_connector(config))
    return []


#: The configs whose check passed in this process, by :func:`_module_check_key`. Only passes are
#: kept: a changed environment can leave a refusal to the trial's own check, never make one up.
_PASSED: dict[str, tuple] = {}


def _module_check_key(config: AlgorithmConfig) -> str:
    """What :func:`check_module_spaces` reads of a config: the environment, the spaces, the
    modules and the connectors."""
    return repr(
        (
            config.env,
            config.env_config,
            config.observation_space,
            config.action_space,
            config.enable_env_runner_and_connector_v2,
            config.is_multi_agent
            and (sorted(config.policies), config.policy_mapping_fn, config.policies_to_train),
            private_ray.user_rl_module_spec(config),
            private_ray.user_model_config(config),
            config.model,
            private_ray.env_to_module_connector(config),
            config.observation_filter,
        )
    )


def check_policy_mapping(config: AlgorithmConfig, env: MultiAgentEnv) -> None:
    """Raise ValueError if ``policy_mapping_fn`` maps an agent of ``env`` to a module that does
    not exist. Each agent is mapped as RLlib's ``AgentToModuleMapping`` connector maps it, for a
    fresh episode; RLlib itself never names such an agent: its steps reach no module, and runs
    sample nothing or fail with an empty ``RuntimeError``."""
    spec = config.rl_module_spec
    modules = set(spec.rl_module_specs) if isinstance(spec, MultiRLModuleSpec) else set(config.policies)
    for agent in env.possible_agents or env.agents:
        try:
            module_id = config.policy_mapping_fn(agent, MultiAgentEpisode())
        except Exception:  # noqa: BLE001 - a mapping that needs a real episode: left to RLlib
            continue
        if module_id not in modules:
            raise ValueError(
                f"{config.env!r}: policy_mapping_fn maps agent {agent!r} to policy {module_id!r}, "
                f"which is not among the policies {sorted(modules)}. Fix: return one of those "
                f"from policy_mapping_fn, or add {module_id!r} to .multi_agent(policies=...)."
            )


def check_old_stack_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise ValueError unless the old API stack's policy can take the spaces: a flat Box
    observation and a flat Box or Discrete action (the new API stack takes more)."""
    check_spaces(observation_space, action_space)
    if not normalizes_observations(observation_space) or not isinstance(
        action_space, (gym.spaces.Box, gym.spaces.Discrete)
    ):
        raise ValueError(
            f"GePPO's old API stack takes flat Box observations and flat Box or Discrete actions, "
            f"got {observation_space} and {action_space}. Fix: use RLlib's new API stack (remove "
            ".api_stack(...)), which also takes images, MultiDiscrete and MultiBinary actions."
        )


def check_trainable(module) -> None:
    """Raise ValueError unless GePPO can train ``module``: it computes values (RLlib's
    ``ValueFunctionAPI``, which V-trace needs), names its value function's parts
    (:func:`value_function_attributes`) and keeps no recurrent state (GePPO re-evaluates
    stored samples one by one, so a recurrent module would need each sample's stored state and
    sequence)."""
    if not isinstance(module, ValueFunctionAPI):
        raise ValueError(
            f"{type(module).__name__} does not implement RLlib's ValueFunctionAPI "
            "(compute_values), which GePPO's V-trace targets need. Fix: implement "
            "ray.rllib.core.rl_module.apis.ValueFunctionAPI in the module (docs/your_environment.md)."
        )
    value_function_attributes(module)
    if module.is_stateful():
        raise ValueError(
            f"{type(module).__name__} is recurrent (is_stateful() is True): GePPO re-evaluates "
            "every stored sample under the current policy one sample at a time, without its "
            "recurrent state or sequence, so it trains feed-forward modules only. Fix: stack "
            "recent observations in the environment instead (rllib_geppo.StackFrames) and use a "
            "feed-forward module."
        )
