"""`UpdateInputs`: what the Algorithm decides once per iteration for every learner.

The Algorithm owns the sample store, the running statistics and the lr rule; the learners (local
or remote, one or many) and the old stack's policy receive these values with each update. On the
new stack they travel in ``Learner.update(timesteps={UPDATE_INPUTS: inputs})``, RLlib's channel
for per-iteration values. Pure Python; no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

#: Key of the :class:`UpdateInputs` in ``Learner.update(timesteps=...)``.
UPDATE_INPUTS = "geppo_update_inputs"


@dataclass(frozen=True)
class UpdateInputs:
    """One update's inputs, the same for every learner.

    Attributes:
        policy_lr: the policy optimizer's learning rate for this update (adapted by the lr rule,
            or read from ``lr``'s schedule).
        clip_eps: eps of the clipped objective for this update: eps_PPO / E_nu[i + 1] (with
            ``lag_clip_rule="bound"``, over the lagged weights, so it shrinks when the youngest
            stored batch is not age 0).
        weights_by_version: per-sample weight of each stored policy version (mean 1).
        reward_scale: rewards are divided by it (running std of the discounted return).
        obs_mean, obs_std: observation statistics the module installs *after* the update, so
            that the policy that samples next is the updated one, statistics included (None:
            observations the module does not normalise, such as images).
        obs_stats_before_update: install them before the update as well (the first update,
            with ``obs_stats_warm_start``).
        minibatches_per_epoch: gradient steps per epoch
            (:func:`~rllib_geppo.core.minibatches.minibatch_shape`).
        shuffle_seed: seed of this update's minibatch shuffles, the same for every learner, so
            that learners averaging their gradients slice the same global minibatches
            (:mod:`rllib_geppo.core.minibatches`).
        entropy_coeff: the entropy bonus's coefficient for this update (``entropy_coeff``, or
            its schedule's value).
    """

    policy_lr: float
    clip_eps: float
    weights_by_version: Mapping[int, float]
    reward_scale: float
    obs_mean: np.ndarray | None
    obs_std: np.ndarray | None
    minibatches_per_epoch: int
    shuffle_seed: int
    obs_stats_before_update: bool = False
    entropy_coeff: float = 0.0
