"""`GePPOTorchRLModule`: separate policy and value MLPs with in-module observation normalisation.

The module carries the running observation statistics as buffers, so a saved module acts on
raw environment observations with nothing kept outside it, and every stored sample is
re-evaluated under the current statistics (the same function of the raw observation that the
current policy computes). The statistics change only between iterations, when the Algorithm
hands the learners new values (see ``GePPOLearner``), so pi_k equals the policy that collected
the newest batch exactly.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from torch import nn

#: Normalised observations are clipped to +-OBS_CLIP (authors' code).
OBS_CLIP = 10.0
#: Floor of the policy's standard deviation.
MIN_STD = 1e-3

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise ValueError unless the spaces are a flat Box observation and a Box/Discrete action."""
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
        raise ValueError(
            f"GePPO's default RLModule needs a flat Box observation space, got {observation_space}. "
            "Fix: flatten the observations with a gymnasium wrapper "
            "(gymnasium.wrappers.FlattenObservation) or pass your own RLModule via .rl_module().")
    if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)) or (
        isinstance(action_space, gym.spaces.Box) and len(action_space.shape) != 1
    ):
        raise ValueError(
            f"GePPO supports flat Box (Gaussian) and Discrete (categorical) action spaces, got "
            f"{action_space}. Fix: wrap the environment to expose one of these.")


def mlp(sizes: list[int], activation: str, out_gain: float) -> nn.Sequential:
    """MLP with orthogonal init: gain sqrt(2) on hidden layers, ``out_gain`` on the output."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(fan_in, fan_out)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, gain=out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(_ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class GePPOTorchRLModule(TorchRLModule, ValueFunctionAPI, InferenceOnlyAPI):
    """Gaussian (state-independent log-std) or categorical policy and a separate value MLP.

    ``model_config`` keys: ``fcnet_hiddens`` (default [64, 64]), ``fcnet_activation``
    (default "tanh") and ``init_std_multiple`` (set from the GePPO config: initial std =
    multiple * half the action range; 1 where the range is unbounded).
    """

    @override(RLModule)
    def setup(self) -> None:
        check_spaces(self.observation_space, self.action_space)
        hiddens = list(self.model_config.get("fcnet_hiddens", [64, 64]))
        activation = self.model_config.get("fcnet_activation", "tanh")
        obs_dim = self.observation_space.shape[0]

        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))

        if isinstance(self.action_space, gym.spaces.Discrete):
            self.pi = mlp([obs_dim, *hiddens, int(self.action_space.n)], activation, 0.01)
            self.log_std = None
        else:
            self.pi = mlp([obs_dim, *hiddens, self.action_space.shape[0]], activation, 0.01)
            self.log_std = nn.Parameter(torch.as_tensor(self._initial_log_std(), dtype=torch.float32))
        if not self.inference_only:
            self.vf = mlp([obs_dim, *hiddens, 1], activation, 1.0)

    def _initial_log_std(self) -> np.ndarray:
        low, high = self.action_space.low, self.action_space.high
        half_range = np.where(np.isfinite(high - low), (high - low) / 2.0, 1.0)
        std = self.model_config.get("init_std_multiple", 1.0) * half_range
        return np.log(np.maximum(std, MIN_STD))

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """(obs - mean) / std, clipped to +-OBS_CLIP, with the module's running statistics."""
        return torch.clamp((obs.float() - self.obs_mean) / self.obs_std, -OBS_CLIP, OBS_CLIP)

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Install new observation statistics (between iterations only)."""
        self.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(std, dtype=torch.float32))

    @override(RLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = self.pi(self.normalize(batch[Columns.OBS]))
        if self.log_std is not None:
            log_std = torch.clamp(self.log_std, min=math.log(MIN_STD)).expand_as(out)
            out = torch.cat([out, log_std], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: out}

    @override(RLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # Values go through forward_train too, so that a DDP-wrapped module (2+ learners)
        # sees every parameter in one forward pass and averages all gradients.
        return {**self._forward(batch), Columns.VF_PREDS: self.compute_values(batch)}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.vf(self.normalize(batch[Columns.OBS])).squeeze(-1)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return ["vf"]
