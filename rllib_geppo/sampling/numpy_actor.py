"""Acting with GePPO's MLP Gaussian policy in numpy: one env step's forward pass and sample.

An EnvRunner acts on one observation per env. For the paper's 64x64 policy that is a few
thousand multiply-adds, which torch wraps in some ten operator dispatches, each costing more
than its arithmetic (with the distribution object, about 160 us per step on one core); numpy
does the same float32 arithmetic in about 20 us. :func:`sample_actions` is the module's
``_forward`` and RLlib's ``TorchDiagGaussian`` sample and log-prob in numpy, on arrays that
share memory with the module's parameters (:class:`NumpyGaussianMLP`), so a weight sync needs
no copy. ``tests/sampling/test_lean_sampling.py`` holds it to the module. Pure numpy; no Ray.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: log(sqrt(2 pi)), the Gaussian log-density's constant (as torch's ``Normal.log_prob``).
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


#: The hidden activations :func:`sample_actions` computes, in place.
ACTIVATIONS = {"tanh": _tanh, "relu": _relu, "linear": lambda x: x}


@dataclass(frozen=True)
class NumpyGaussianMLP:
    """A Gaussian MLP policy with a state-independent std, as float32 arrays.

    Attributes:
        layers: ``(weight [out, in], bias [out])`` of each linear layer, input first.
        activation: the hidden layers' activation, a key of :data:`ACTIVATIONS`.
        obs_mean, obs_std, obs_clip: observations enter as ``clip((obs - mean) / std, +-clip)``.
        action_center, action_half_range: the network's output o gives the mean
            ``center + half_range * o`` (environment units).
        log_std: the log-std in environment units, one per action dimension.
    """

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    activation: str
    obs_mean: np.ndarray
    obs_std: np.ndarray
    obs_clip: float
    action_center: np.ndarray
    action_half_range: np.ndarray
    log_std: np.ndarray


def sample_actions(
    policy: NumpyGaussianMLP, obs: np.ndarray, noise: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Actions ``mean + std * noise`` for a batch of observations, with their log-probs.

    Args:
        policy: the policy.
        obs: ``[B, obs_dim]`` observations (any real dtype; computed in float32).
        noise: ``[B, action_dim]`` standard normal draws (float32).

    Returns:
        ``(actions [B, action_dim], log-probs [B], distribution inputs [B, 2 * action_dim])``,
        float32; the distribution inputs are ``[mean, log_std]`` as the module's ``_forward``
        gives them (RLlib's ``TorchDiagGaussian`` logits).
    """
    x = (obs.astype(np.float32) - policy.obs_mean) / policy.obs_std
    # np.clip's Python wrapper costs more than the clip: the two ufuncs directly.
    np.minimum(np.maximum(x, -policy.obs_clip, out=x), policy.obs_clip, out=x)
    activate = ACTIVATIONS[policy.activation]
    *hidden, (weight, bias) = policy.layers
    for w, b in hidden:
        x = activate(x @ w.T + b)
    mean = policy.action_center + policy.action_half_range * (x @ weight.T + bias)
    std = np.exp(policy.log_std)
    actions = mean + std * noise
    # As torch's Normal.log_prob of the action drawn, summed over the action's dimensions.
    logp = (-((actions - mean) ** 2) / (2 * std * std) - policy.log_std - LOG_SQRT_2PI).sum(-1)
    dist_inputs = np.empty((len(mean), 2 * mean.shape[1]), np.float32)
    dist_inputs[:, : mean.shape[1]], dist_inputs[:, mean.shape[1] :] = mean, policy.log_std
    return actions, logp.astype(np.float32), dist_inputs
