"""The EnvRunners' connector pipelines, lean: RLlib's pieces without per-piece bookkeeping.

RLlib's ``ConnectorPipelineV2`` runs its pieces one after another on every env step and times
each into the EnvRunner's ``MetricsLogger`` (a timer, an EMA push, a NaN check and a regex on
the class name per piece). The default pieces themselves regroup a batch of one observation
per env through nested per-episode structures. On Hopper-v5 with 64x64 networks that is more
than half the EnvRunner's time per step, several times MuJoCo's.

:func:`lean` gives the EnvRunner two cheaper pipelines with the same pieces and state:

- **fused**, when the pieces are RLlib's defaults for a single-agent module: the same result in
  one step (stack the latest observations into a tensor; sample actions and their log-probs
  from the module's distribution and clip them for the env). Any call they were not built for
  (a stateful module, a pre-filled batch, actions already chosen) runs the pieces instead.
- **untimed**, for any other pieces (a user's connectors): the pieces in order, with the same
  arguments (``metrics`` included, so a piece that logs its own metrics still does), untimed.

Either way the EnvRunner still reports its sampling time as a whole; only the per-piece timers
and the pipelines' episode-length counters are gone. ``tests/algorithm/test_algorithm.py`` checks that
the episodes are the same as with RLlib's own pipelines.

Both rely on how RLlib calls a pipeline and on its default pieces, which are not a public API:
on a Ray where the lean sampling path steps aside (:data:`LEAN_SAMPLING`, decided at import by
:func:`rllib_geppo.private_ray.usable`), :func:`lean` returns RLlib's own pipelines unchanged.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.connectors.common import (
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    BatchIndividualItems,
    NumpyToTensor,
    TensorToNumpy,
)
from ray.rllib.connectors.common.flatten_observations import FlattenObservations
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    EnvToModulePipeline,
    MeanStdFilter,
)
from ray.rllib.connectors.module_to_env import (
    GetActions,
    ListifyDataForVectorEnv,
    ModuleToEnvPipeline,
    NormalizeAndClipActions,
    RemoveSingleTsTimeRankFromBatch,
    UnBatchToIndividualItems,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian
from ray.rllib.utils.annotations import override
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_geppo import private_ray

#: RLlib's default pieces for a single-agent module, in order: what the fused pipelines fuse
#: (multi-agent pipelines hold more pieces, so they are never fused).
DEFAULT_ENV_TO_MODULE = (
    AddObservationsFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    AddStatesFromEpisodesToBatch,
    BatchIndividualItems,
    NumpyToTensor,
)
DEFAULT_MODULE_TO_ENV = (
    GetActions,
    TensorToNumpy,
    UnBatchToIndividualItems,
    RemoveSingleTsTimeRankFromBatch,
    NormalizeAndClipActions,
    ListifyDataForVectorEnv,
)

#: RLlib's internals that the lean sampling path relies on (this module's pipelines, the lean
#: loop and the env step tally): see :mod:`rllib_geppo.private_ray`.
PRIVATE_RAY_NAMES = private_ray.LEAN_SAMPLING

#: Whether the lean sampling path runs on the installed Ray, decided once, at import.
LEAN_SAMPLING = private_ray.usable(PRIVATE_RAY_NAMES, "the lean sampling path")

logger = logging.getLogger(__name__)


class _Untimed:
    """``__call__`` of a pipeline: each piece in order on the previous piece's output."""

    connectors: list

    def __call__(
        self,
        *,
        rl_module,
        batch: dict | None = None,
        episodes,
        explore=None,
        shared_data: dict | None = None,
        metrics=None,
        **kwargs,
    ) -> dict[str, Any]:
        batch = {} if batch is None else batch
        shared_data = {} if shared_data is None else shared_data
        for connector in self.connectors:
            batch = connector(
                rl_module=rl_module,
                batch=batch,
                episodes=episodes,
                explore=explore,
                shared_data=shared_data,
                metrics=metrics,
                **kwargs,
            )
            if not isinstance(batch, dict):
                raise ValueError(
                    f"connector {connector} returned {type(batch).__name__}, not the "
                    "batch dict. Fix: return the `batch` argument from its __call__."
                )
        return batch


class UntimedEnvToModulePipeline(_Untimed, EnvToModulePipeline):
    """RLlib's env-to-module pipeline, untimed."""


class UntimedModuleToEnvPipeline(_Untimed, ModuleToEnvPipeline):
    """RLlib's module-to-env pipeline, untimed."""


class FusedEnvToModulePipeline(UntimedEnvToModulePipeline):
    """RLlib's default env-to-module pieces in one step: each episode's latest observation,
    stacked into one float32 tensor on the EnvRunner's device."""

    def __init__(self, *args, device=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.device = None if device is None else torch.device(device)

    @override(EnvToModulePipeline)
    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        # A checkpoint rebuilds the pipeline from these: its own settings go with the pieces.
        args, kwargs = super().get_ctor_args_and_kwargs()
        return args, {**kwargs, "device": None if self.device is None else str(self.device)}

    def __call__(
        self, *, rl_module, batch: dict | None = None, episodes, shared_data: dict | None = None, **kwargs
    ) -> dict[str, Any]:
        if batch or rl_module.is_stateful():
            return super().__call__(
                rl_module=rl_module, batch=batch, episodes=episodes, shared_data=shared_data, **kwargs
            )
        if shared_data is not None:
            # The episode of each row, as BatchIndividualItems leaves it for a module-to-env
            # pipeline that runs RLlib's pieces (UnBatchToIndividualItems), not fused ones.
            shared_data["memorized_map_structure"] = [episode.id_ for episode in episodes]
        return self.from_observations(np.stack([episode.get_observations(-1) for episode in episodes]))

    def from_observations(self, observations: np.ndarray) -> dict[str, Any]:
        """The batch for the envs' latest observations, stacked ``[num_envs, ...]``."""
        return {Columns.OBS: _tensor(observations, self.device)}


class FusedModuleToEnvPipeline(UntimedModuleToEnvPipeline):
    """RLlib's default module-to-env pieces in one step: actions sampled from the module's
    distribution (its mode when not exploring) with their log-probs, one item per env, and the
    actions clipped to the env's bounds for the env (the unclipped ones go into the episode)."""

    def __init__(self, *args, clip_actions: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_actions = clip_actions
        #: The generator actions are drawn from (the EnvRunner's own); None: torch's global one.
        self.rng: torch.Generator | None = None

    @override(ModuleToEnvPipeline)
    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        # A checkpoint rebuilds the pipeline from these: a deployed policy clips as in training.
        args, kwargs = super().get_ctor_args_and_kwargs()
        return args, {**kwargs, "clip_actions": self.clip_actions}

    def __call__(self, *, rl_module, batch: dict, episodes, explore=None, **kwargs) -> dict[str, Any]:
        if Columns.ACTIONS in batch or Columns.ACTION_DIST_INPUTS not in batch or rl_module.is_stateful():
            return super().__call__(
                rl_module=rl_module, batch=batch, episodes=episodes, explore=explore, **kwargs
            )
        dist_cls = (
            rl_module.get_exploration_action_dist_cls()
            if explore
            else rl_module.get_inference_action_dist_cls()
        )
        if explore and dist_cls is TorchDiagGaussian:
            actions, logp = diag_gaussian_sample(batch[Columns.ACTION_DIST_INPUTS], self.rng)
        else:
            dist = dist_cls.from_logits(batch[Columns.ACTION_DIST_INPUTS])
            if not explore:
                dist = dist.to_deterministic()
            actions = self._sample(dist)
            logp = dist.logp(actions)
        out = dict(batch)
        out.setdefault(Columns.ACTION_LOGP, logp)
        # One item per env in every column but the actions, which the vector env takes batched.
        out = {column: list(_numpy(values)) for column, values in out.items()}
        out[Columns.ACTIONS] = _numpy(actions)
        out[Columns.ACTIONS_FOR_ENV] = self.actions_for_env(out[Columns.ACTIONS])
        return out

    def _sample(self, dist) -> torch.Tensor:
        if self.rng is None:
            return dist.sample()
        # Any distribution class draws from the global RNG: lend it this generator's state.
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng.get_state())
            actions = dist.sample()
            self.rng.set_state(torch.get_rng_state())
        return actions

    def actions_for_env(self, actions: np.ndarray) -> np.ndarray:
        """The actions as the env takes them: clipped to a Box's bounds with ``clip_actions``,
        a copy otherwise (the episode keeps the unclipped ones)."""
        space = self.input_action_space
        if self.clip_actions and isinstance(space, gym.spaces.Box):
            return np.minimum(np.maximum(actions, space.low), space.high)  # np.clip, less its wrapper
        return actions.copy()


def diag_gaussian_sample(
    inputs: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions drawn from ``TorchDiagGaussian.from_logits(inputs)`` and their log-probs.

    The same torch ``Normal`` that RLlib's class wraps, so bit-identical to its ``sample()`` and
    ``logp()`` for the same generator state, but drawn from ``generator`` directly instead of
    swapping it into torch's global RNG on every env step (None: the global RNG, as RLlib does).
    """
    loc, log_std = inputs.chunk(2, dim=-1)
    dist = torch.distributions.Normal(loc, log_std.exp(), validate_args=False)
    actions = torch.normal(dist.loc, dist.scale, generator=generator)
    return actions, dist.log_prob(actions).sum(-1)


def _tensor(array: np.ndarray, device: torch.device | None) -> torch.Tensor:
    # What NumpyToTensor does to one array (float64 becomes float32), without
    # convert_to_torch_tensor's walk over nested structures (half its time per env step).
    tensor = torch.from_numpy(array)
    if tensor.is_floating_point() and tensor.dtype != torch.float16:
        tensor = tensor.float()
    return tensor if device is None else tensor.to(device)


def _numpy(values: Any) -> np.ndarray:
    # What TensorToNumpy does to a tensor column, without its walk over nested structures.
    return values.detach().cpu().numpy() if torch.is_tensor(values) else convert_to_numpy(values)


def _classes(pipeline: ConnectorPipelineV2) -> tuple[type, ...]:
    return tuple(type(connector) for connector in pipeline.connectors)


def lean(
    pipeline: ConnectorPipelineV2, *, device=None, normalize_actions: bool = False, clip_actions: bool = True
) -> ConnectorPipelineV2:
    """The fused or untimed pipeline of the same pieces (the same objects) and input spaces.

    Args:
        pipeline: a pipeline RLlib's config built for an EnvRunner.
        device: where the env-to-module pipeline puts the observations (as NumpyToTensor).
        normalize_actions, clip_actions: the config's settings for the module-to-env pipeline;
            the fused one handles clipping only (normalising goes through the pieces).

    A pipeline of any other class (a user's own) is returned unchanged, and so is every
    pipeline where the lean sampling path steps aside (:data:`LEAN_SAMPLING`).
    """
    if not LEAN_SAMPLING:
        return pipeline
    spaces = {
        "input_observation_space": pipeline.input_observation_space,
        "input_action_space": pipeline.input_action_space,
        "connectors": pipeline.connectors,
    }
    if type(pipeline) is EnvToModulePipeline:
        if _classes(pipeline) == DEFAULT_ENV_TO_MODULE:
            return FusedEnvToModulePipeline(device=device, **spaces)
        return UntimedEnvToModulePipeline(**spaces)
    if type(pipeline) is ModuleToEnvPipeline:
        if _classes(pipeline) == DEFAULT_MODULE_TO_ENV and not normalize_actions:
            return FusedModuleToEnvPipeline(clip_actions=clip_actions, **spaces)
        return UntimedModuleToEnvPipeline(**spaces)
    return pipeline


def flatten_observations(pipeline: ConnectorPipelineV2, *, multi_agent: bool) -> ConnectorPipelineV2:
    """``pipeline`` with RLlib's FlattenObservations first, where observations are not Boxes
    (Dicts, Tuples, discretes: they reach the module as flat Boxes, one-hot for discretes, and
    the episodes, which GePPO stores, hold them flat too); unchanged where they all are."""
    agents = _agents_to_flatten(pipeline.input_observation_space, multi_agent)
    if agents != [] and not any(isinstance(piece, FlattenObservations) for piece in pipeline.connectors):
        pipeline.prepend(
            FlattenObservations(multi_agent=multi_agent, agent_ids=agents, as_learner_connector=False)
        )
    return pipeline


#: Logged once per process where :func:`without_mean_std_filter` leaves a filter out.
FILTER_LEFT_OUT = (
    "RLlib's MeanStdFilter is left out of the EnvRunners' connectors: GePPO's module normalises "
    "observations itself, with running statistics that change only together with the weights "
    "(so every stored sample is re-evaluated under the current ones) and are saved in the module "
    "(so RLModule.from_checkpoint alone acts as trained). See docs/from_ppo.md."
)


def without_mean_std_filter(pipeline: ConnectorPipelineV2) -> ConnectorPipelineV2:
    """``pipeline`` without RLlib's MeanStdFilter pieces, for GePPO's own modules, which
    normalise observations themselves (:data:`FILTER_LEFT_OUT`, logged once)."""
    filters = [piece for piece in pipeline.connectors if isinstance(piece, MeanStdFilter)]
    for piece in filters:
        pipeline.remove(type(piece))
    if filters:
        _log_once(FILTER_LEFT_OUT)
    return pipeline


@functools.cache
def _log_once(message: str) -> None:
    """Log ``message`` once per process: every EnvRunner's pipeline is built again and again."""
    logger.info(message)


def _agents_to_flatten(space, multi_agent: bool) -> list | None:
    """The agents whose observations are not Boxes (Dicts, Tuples, discretes), which RLlib's
    FlattenObservations makes flat Boxes (one-hot for discretes): ``[]`` for none, None for the
    single agent of a single-agent env."""
    if not multi_agent:
        return [] if isinstance(space, gym.spaces.Box) else None
    agents = space.spaces.items() if isinstance(space, gym.spaces.Dict) else ()
    return [agent for agent, agent_space in agents if not isinstance(agent_space, gym.spaces.Box)]
