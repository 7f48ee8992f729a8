"""`GePPOTorchRLModule`: separate policy and value MLPs with in-module observation normalisation.

The module carries the running observation statistics as buffers, so a saved module acts on
raw environment observations with nothing kept outside it, and every stored sample is
re-evaluated under the current statistics (the same function of the raw observation that the
current policy computes). The statistics change only together with the weights, right after an
update (see ``GePPOLearner``), so every policy version is one fixed function.

Continuous actions are parametrised as in the authors' code, in units where the action bounds
are [-1, 1]: the network outputs the normalised mean and the log-std parameter is the normalised
log-std (initially log(init_std_multiple)). The module maps both to environment units with the
bounds it holds as buffers, so the saved module acts in the environment's units while learning
runs exactly as in normalised units: an affine change of action units multiplies every density
by the same constant, which cancels in every ratio the loss and V-trace use.
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
    """Raise ValueError unless the spaces are a flat Box observation and a Box/Discrete action
    whose bounded dimensions all have ``low < high``."""
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
    if isinstance(action_space, gym.spaces.Box):
        _check_action_widths(action_space)


def _check_action_widths(action_space: gym.spaces.Box) -> None:
    """Raise ValueError at the first bounded action dimension with ``low >= high``: the
    Gaussian's std there is a multiple of the zero width, so every log-probability is NaN."""
    low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    bad = np.flatnonzero(bounded & ~(low < high))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"action dimension {i} of {action_space} has low = {low[i]:g} and high = {high[i]:g}: "
            "a Gaussian policy cannot sample a constant action (its std would be zero and every "
            "log-probability NaN). Fix: wrap the environment with a gymnasium.ActionWrapper that "
            "drops that dimension from the action space and inserts the constant before env.step.")


def action_units(action_space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """Centre and half-width of each action dimension: environment units are
    ``center + half_range * normalised``. Unbounded dimensions keep their units (0, 1)."""
    low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    center = np.where(bounded, (low + high) / 2.0, 0.0)
    half_range = np.where(bounded, (high - low) / 2.0, 1.0)
    return center, half_range


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
    (default "tanh") and ``init_std_multiple`` (set from the GePPO config: the initial std in
    normalised action units, i.e. multiple * half the action range in environment units).
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
            action_dim = self.action_space.shape[0]
            self.pi = mlp([obs_dim, *hiddens, action_dim], activation, 0.01)
            multiple = self.model_config.get("init_std_multiple", 1.0)
            self.log_std = nn.Parameter(torch.full((action_dim,), math.log(max(multiple, MIN_STD))))
            center, half_range = action_units(self.action_space)
            self.register_buffer("action_center", torch.as_tensor(center, dtype=torch.float32))
            self.register_buffer("action_half_range", torch.as_tensor(half_range, dtype=torch.float32))
        if not self.inference_only:
            self.vf = mlp([obs_dim, *hiddens, 1], activation, 1.0)

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
            # Normalised mean and log-std to environment units (see the module docstring).
            mean = self.action_center + self.action_half_range * out
            log_std = torch.clamp(self.log_std, min=math.log(MIN_STD)) + torch.log(self.action_half_range)
            out = torch.cat([mean, log_std.expand_as(mean)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: out}

    # No layer here acts differently in train and eval mode (no dropout, no batch norm), so
    # acting skips the eval()/train() walk over the submodules that TorchRLModule does around
    # every call: on an EnvRunner that is twice per env step, for nothing.
    @override(TorchRLModule)
    def forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_exploration(batch, **kwargs)

    @override(TorchRLModule)
    def forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)

    @override(RLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # Values go through forward_train too: one forward pass gives the loss all it needs.
        return {**self._forward(batch), Columns.VF_PREDS: self.compute_values(batch)}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.vf(self.normalize(batch[Columns.OBS])).squeeze(-1)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return ["vf"]
