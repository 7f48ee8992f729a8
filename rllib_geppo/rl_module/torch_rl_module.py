"""`GePPOTorchRLModule`: separate policy and value networks with in-module observation normalisation.

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

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.models.configs import CNNEncoderConfig
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.models.utils import get_filter_config, get_initializer_fn
from ray.rllib.utils.annotations import override
from torch import nn

from rllib_geppo.core.networks import mlp_config

#: Normalised observations are clipped to +-OBS_CLIP (authors' code).
OBS_CLIP = 10.0
#: Floor of the policy's standard deviation.
MIN_STD = 1e-3

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU, "linear": nn.Identity}
#: The ``model_config`` keys the module reads (``init_std_multiple`` comes from GePPO's config).
MODEL_CONFIG_KEYS = (
    "fcnet_hiddens",
    "vf_fcnet_hiddens",
    "fcnet_activation",
    "conv_filters",
    "conv_activation",
    "init_std_multiple",
)
#: RLlib's initializers (a ``torch.nn.init`` function or its name, and its keyword arguments)
#: that the module reads, as RLlib's PPO applies them: the ``fcnet_`` ones to every hidden layer
#: of the MLPs (:func:`hidden_layer_init`), the ``conv_`` ones to the CNN encoders.
INITIALIZER_KEYS = tuple(
    f"{stack}_{part}_initializer{kwargs}"
    for stack in ("fcnet", "conv")
    for part in ("kernel", "bias")
    for kwargs in ("", "_kwargs")
)
#: Keys of RLlib's default modules that this module does not read, at the value that describes
#: it: they may be set to that value (a config copied from PPO), never to another.
MODEL_CONFIG_AS_BUILT = {
    "head_fcnet_hiddens": [],
    "fcnet_use_layernorm": False,
    "head_fcnet_use_layernorm": False,
    "free_log_std": True,
    "use_lstm": False,
    "use_attention": False,
}
#: Said once where ``vf_share_layers`` is True (the default of RLlib's ``DefaultModelConfig``).
SEPARATE_NETWORKS = (
    "model_config vf_share_layers=True (the default of RLlib's DefaultModelConfig) asks for one "
    "trunk shared by the policy and the value function; GePPO's module keeps them separate, as "
    "in the paper: the value function trains with its own Adam optimizer and step size "
    "(vf_lr), where a shared trunk would also move at the policy's adaptive lr, so "
    "vf_loss_coeff has no effect. Set vf_share_layers=False to say so and silence this."
)
_WHY_UNREAD = {
    "head_fcnet_hiddens": "the module has no head layers: put all hidden layers in fcnet_hiddens",
    "free_log_std": "the policy's log-std is always a free parameter, independent of the state "
    "(as in the paper)",
    **{
        f"head_fcnet_{part}_initializer{kwargs}": "the module has no head layers, and RLlib's PPO "
        "does not read it either (its heads keep their default init); the output layers keep the "
        "paper's orthogonal init (gain 0.01 for the policy, 1.0 for the value)"
        for part in ("kernel", "bias")
        for kwargs in ("", "_kwargs")
    },
}


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise ValueError unless GePPO's module can take the spaces: a flat Box observation
    (normalised with running statistics) or an image Box (height x width x channels, through a
    CNN), and a flat Box (Gaussian) action whose bounded dimensions all have ``low < high``, or
    a Discrete, MultiDiscrete or MultiBinary (categorical) one with at least one choice in each of
    at least one entry."""
    if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        raise ValueError(
            f"GePPO's RLModule takes flat or image observations, got {observation_space}, which "
            "reached the module unflattened. Fix: let GePPO's config add RLlib's FlattenObservations "
            "connector (it does for Dict and Tuple observations), i.e. do not replace the "
            "env-to-module pipeline; or flatten them in the env (gymnasium.wrappers.FlattenObservation)."
        )
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) in (1, 3)):
        raise ValueError(
            f"GePPO's RLModule needs a flat Box observation space or an image (height x width x "
            f"channels), got {observation_space}. Fix: reshape or flatten the observations with a "
            "gymnasium wrapper (gymnasium.wrappers.FlattenObservation), or pass your own RLModule "
            "via .rl_module() (docs/your_environment.md)."
        )
    flat_box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    flat_multi = isinstance(action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)) and (
        len(action_space.shape) == 1
    )
    if not (flat_box or flat_multi or isinstance(action_space, gym.spaces.Discrete)):
        raise ValueError(
            f"GePPO's RLModule supports flat Box (Gaussian), Discrete, MultiDiscrete and MultiBinary "
            f"(categorical) action spaces, got {action_space}. Nested (Tuple, Dict) and "
            "multi-dimensional actions are not supported. Fix: wrap the environment to expose one "
            "of these, e.g. flatten the actions into one Box or one MultiDiscrete."
        )
    if flat_box:
        _check_action_widths(action_space)
    else:
        _check_categories(action_space)


def unread_model_config(model_config: Any) -> list[str]:
    """What ``model_config`` asks that this module would silently not do, one message per key
    (empty: nothing). Accepted: the keys it reads, a None value (nothing asked), a key of
    :data:`MODEL_CONFIG_AS_BUILT` at its value, and, in RLlib's ``DefaultModelConfig``, fields
    left at their defaults. ``use_lstm`` and ``use_attention`` are the config's to refuse, and
    ``vf_share_layers`` is accepted with a warning (:func:`shares_layers`)."""
    if dataclasses.is_dataclass(model_config):
        model_config = {
            f.name: getattr(model_config, f.name)
            for f in dataclasses.fields(model_config)
            if getattr(model_config, f.name) != _field_default(f)
        }
    problems = []
    for key, value in (model_config or {}).items():
        if key in ("use_lstm", "use_attention", "vf_share_layers"):
            continue
        if key == "fcnet_activation" and value not in _ACTIVATIONS:
            problems.append(
                f"model_config['fcnet_activation']={value!r} is not one of GePPO's "
                f"module's activations ({', '.join(_ACTIVATIONS)}). Fix: use one of these."
            )
        if (
            key in MODEL_CONFIG_KEYS
            or key in INITIALIZER_KEYS
            or value is None
            or (key in MODEL_CONFIG_AS_BUILT and value == MODEL_CONFIG_AS_BUILT[key])
        ):
            continue
        why = _WHY_UNREAD.get(key, "it is not a setting of GePPO's module")
        fix = (
            f"leave it out, or set it to {MODEL_CONFIG_AS_BUILT[key]!r}"
            if key in MODEL_CONFIG_AS_BUILT
            else "leave it out"
        )
        problems.append(
            f"model_config[{key!r}]={value!r} would be ignored: {why}. GePPO's RLModule reads "
            f"{', '.join(MODEL_CONFIG_KEYS[:-1])} and RLlib's fcnet_ and conv_ initializers only. "
            f"Fix: {fix}; for another architecture, "
            "pass your own RLModule (.rl_module(rl_module_spec=...), docs/your_environment.md)."
        )
    return problems


def shares_layers(model_config: Any) -> bool:
    """Whether ``model_config`` (a mapping or RLlib's ``DefaultModelConfig``) asks for a trunk
    shared by the policy and the value function, which GePPO's module keeps separate
    (:data:`SEPARATE_NETWORKS`)."""
    if dataclasses.is_dataclass(model_config):
        return bool(model_config.vf_share_layers)
    return bool((model_config or {}).get("vf_share_layers"))


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else None


def is_image(space: gym.Space) -> bool:
    """Whether observations of ``space`` are images: a Box of height x width x channels."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def normalizes_observations(space: gym.Space) -> bool:
    """Whether GePPO keeps running statistics of the observations of ``space`` and its module
    normalises them: flat Box observations, not images (which it scales by their bounds)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1


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
            "drops that dimension from the action space and inserts the constant before env.step."
        )


def _check_categories(action_space: gym.Space) -> None:
    """Raise ValueError for a discrete action space without a choice to make: no entries (an
    empty ``nvec``), or an entry with no category. RLlib's categorical distributions fail on
    them deep in sampling (an ``IndexError``)."""
    sizes = category_sizes(action_space)
    if not sizes:
        raise ValueError(
            f"the action space {action_space} has no entries: there is no action to choose. Fix: "
            "give it at least one entry, e.g. MultiDiscrete([2]) for a choice of two."
        )
    empty = [i for i, n in enumerate(sizes) if n < 1]
    if empty:
        raise ValueError(
            f"entry {empty[0]} of the action space {action_space} has {sizes[empty[0]]} choices: a "
            "categorical policy cannot choose among none. Fix: give every entry at least one "
            "choice, or drop that entry from the action space (a gymnasium.ActionWrapper that "
            "passes the environment a fixed value for it)."
        )


def action_units(action_space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """Centre and half-width of each action dimension: environment units are
    ``center + half_range * normalised``. Unbounded dimensions keep their units (0, 1)."""
    low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    center = np.where(bounded, (low + high) / 2.0, 0.0)
    half_range = np.where(bounded, (high - low) / 2.0, 1.0)
    return center, half_range


def mlp(
    sizes: list[int], activation: str, out_gain: float, hidden_init: Callable[[nn.Linear], None]
) -> nn.Sequential:
    """MLP whose hidden layers ``hidden_init`` initialises (:func:`hidden_layer_init`) and whose
    output layer has the paper's init: orthogonal with gain ``out_gain``, zero bias."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(fan_in, fan_out)
        last = i == len(sizes) - 2
        if last:
            nn.init.orthogonal_(linear.weight, gain=out_gain)
            nn.init.zeros_(linear.bias)
        else:
            hidden_init(linear)
        layers.append(linear)
        if not last:
            layers.append(_ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def hidden_layer_init(model_config: Mapping[str, Any]) -> Callable[[nn.Linear], None]:
    """How the MLPs' hidden layers are initialised: the weights by ``fcnet_kernel_initializer``
    and the biases by ``fcnet_bias_initializer`` (each with its ``_kwargs``) where
    ``model_config`` sets them, as RLlib's PPO initialises the layers of ``fcnet_hiddens``;
    otherwise by the paper's init, orthogonal with gain sqrt(2) and zero biases. The output
    layers keep the paper's init either way, as RLlib's PPO heads keep theirs."""
    kernel = _initializer(model_config, "fcnet_kernel_initializer") or functools.partial(
        nn.init.orthogonal_, gain=math.sqrt(2)
    )
    bias = _initializer(model_config, "fcnet_bias_initializer") or nn.init.zeros_

    def init(linear: nn.Linear) -> None:
        kernel(linear.weight)
        bias(linear.bias)

    return init


def _initializer(model_config: Mapping[str, Any], key: str) -> Callable[[torch.Tensor], Any] | None:
    """The initializer ``model_config[key]`` names, resolved by RLlib's ``get_initializer_fn``
    (a ``torch.nn.init`` function, or its name such as "xavier_uniform_") and called with
    ``model_config[key + "_kwargs"]``; None where unset."""
    fn = get_initializer_fn(model_config.get(key), framework="torch")
    if fn is None:
        return None
    return functools.partial(fn, **(model_config.get(f"{key}_kwargs") or {}))


class GePPOTorchRLModule(TorchRLModule, ValueFunctionAPI, InferenceOnlyAPI):
    """Gaussian (state-independent log-std) or categorical policy and a separate value network.

    Flat observations are normalised with the module's running statistics and feed MLPs; image
    observations (height x width x channels) are scaled to [0, 1] by their bounds and feed a
    CNN encoder of RLlib's (``CNNEncoderConfig``), one for the policy and one for the value
    function, each followed by its MLP. Discrete, MultiDiscrete and MultiBinary actions are
    categorical (MultiBinary as one two-way category per entry).

    ``model_config`` keys: ``fcnet_hiddens`` (default [64, 64]), ``vf_fcnet_hiddens`` (the value
    network's, default: those of ``fcnet_hiddens``; the paper's wide-network runs widen the
    policy only), ``fcnet_activation`` (default "tanh"), ``conv_filters`` (default: RLlib's
    for the image size, ``ray.rllib.models.utils.get_filter_config``), ``conv_activation``
    (default "relu"), ``init_std_multiple`` (set from the GePPO config: the initial std in
    normalised action units, i.e. multiple * half the action range in environment units) and
    RLlib's initializers (:data:`INITIALIZER_KEYS`; default: the paper's orthogonal init).
    """

    @override(RLModule)
    def setup(self) -> None:
        check_spaces(self.observation_space, self.action_space)
        layers = mlp_config(self.model_config)
        hiddens, activation = layers["fcnet_hiddens"], layers["fcnet_activation"]
        hidden_init = hidden_layer_init(self.model_config)
        self.log_std = None
        if is_image(self.observation_space):
            low, high = float(self.observation_space.low.min()), float(self.observation_space.high.max())
            self.register_buffer("image_low", torch.tensor(low if np.isfinite(low) else 0.0))
            self.register_buffer("image_range", torch.tensor(high - low if np.isfinite(high - low) else 1.0))
            self.pi_encoder = self._cnn()
            features = self._cnn_config().output_dims[0]
        else:
            features = self.observation_space.shape[0]
            self.register_buffer("obs_mean", torch.zeros(features))
            self.register_buffer("obs_std", torch.ones(features))
            self.pi_encoder = None

        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            action_dim = space.shape[0]
            self.pi = mlp([features, *hiddens, action_dim], activation, 0.01, hidden_init)
            multiple = self.model_config.get("init_std_multiple", 1.0)
            self.log_std = nn.Parameter(torch.full((action_dim,), math.log(max(multiple, MIN_STD))))
            center, half_range = action_units(space)
            self.register_buffer("action_center", torch.as_tensor(center, dtype=torch.float32))
            self.register_buffer("action_half_range", torch.as_tensor(half_range, dtype=torch.float32))
        else:
            categories = category_sizes(space)
            self.pi = mlp([features, *hiddens, sum(categories)], activation, 0.01, hidden_init)
            if not isinstance(space, gym.spaces.Discrete):
                self.action_dist_cls = TorchMultiCategorical.get_partial_dist_cls(input_lens=categories)
        if not self.inference_only:
            self.vf_encoder = self._cnn() if self.pi_encoder is not None else None
            self.vf = mlp([features, *layers["vf_fcnet_hiddens"], 1], activation, 1.0, hidden_init)

    def _cnn_config(self) -> CNNEncoderConfig:
        shape = list(self.observation_space.shape)
        filters = self.model_config.get("conv_filters") or get_filter_config(shape)
        return CNNEncoderConfig(
            input_dims=shape,
            cnn_filter_specifiers=filters,
            cnn_activation=self.model_config.get("conv_activation", "relu"),
            cnn_kernel_initializer=self.model_config.get("conv_kernel_initializer"),
            cnn_kernel_initializer_config=self.model_config.get("conv_kernel_initializer_kwargs"),
            cnn_bias_initializer=self.model_config.get("conv_bias_initializer"),
            cnn_bias_initializer_config=self.model_config.get("conv_bias_initializer_kwargs"),
        )

    def _cnn(self) -> nn.Module:
        return self._cnn_config().build(framework="torch")

    def features(self, obs: torch.Tensor, encoder: nn.Module | None) -> torch.Tensor:
        """What the policy's or the value function's MLP takes: flat observations normalised
        (:meth:`normalize`), images scaled to [0, 1] and encoded by ``encoder``."""
        if encoder is None:
            return self.normalize(obs)
        return encoder({Columns.OBS: (obs.float() - self.image_low) / self.image_range})[ENCODER_OUT]

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """(obs - mean) / std, clipped to +-OBS_CLIP, with the module's running statistics."""
        return torch.clamp((obs.float() - self.obs_mean) / self.obs_std, -OBS_CLIP, OBS_CLIP)

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Install new observation statistics (between iterations only; flat observations)."""
        self.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(std, dtype=torch.float32))

    @override(RLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = self.pi(self.features(batch[Columns.OBS], self.pi_encoder))
        if self.log_std is not None:
            # Normalised mean and log-std to environment units (see the module docstring).
            mean = self.action_center + self.action_half_range * out
            out = torch.cat([mean, self.action_log_std().expand_as(mean)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: out}

    def action_log_std(self) -> torch.Tensor:
        """The policy's log-std in environment units (Box actions): the parameter, floored at
        log MIN_STD, plus log of the action bounds' half range."""
        return torch.clamp(self.log_std, min=math.log(MIN_STD)) + torch.log(self.action_half_range)

    @override(RLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        # Values go through forward_train too: one forward pass gives the loss all it needs.
        return {**self._forward(batch), Columns.VF_PREDS: self.compute_values(batch)}

    @override(ValueFunctionAPI)
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.vf(self.features(batch[Columns.OBS], self.vf_encoder)).squeeze(-1)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return ["vf", "vf_encoder"] if self.pi_encoder is not None else ["vf"]


def category_sizes(space: gym.Space) -> list[int]:
    """The number of choices of each categorical part of a discrete action space."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiBinary):
        return [2] * int(space.n)
    return [int(n) for n in space.nvec]
