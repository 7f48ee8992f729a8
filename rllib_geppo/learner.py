"""`GePPOLearner`: the framework-independent part of GePPO's Learner.

Per update (one call of ``Learner.update`` per iteration):

1. ``before_gradient_based_update`` installs this iteration's inputs, decided once by the
   Algorithm for all learners and passed in the ``timesteps`` dict: the policy lr, the weight
   of each policy version in the store and the reward scale.
2. The learner connector (``AddOneTsToEpisodesAndTruncate`` ... ``ComputeGePPOTargets``) runs
   once over every stored sample with the module still at pi_k.
3. ``num_epochs`` x minibatches of ``compute_loss_for_module`` (see ``GePPOTorchLearner``).
4. ``after_gradient_based_update`` measures TV & co. over all stored samples, then installs
   the observation statistics the next policy will sample with.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.utils.annotations import override

from rllib_geppo.learner_connector import ComputeGePPOTargets

#: Keys of the per-iteration inputs in ``Learner.update(timesteps=...)``.
POLICY_LR = "geppo_policy_lr"
WEIGHTS_BY_VERSION = "geppo_weights_by_version"
REWARD_SCALE = "geppo_reward_scale"
OBS_STATS = "geppo_obs_stats"  # (mean, std) to install after the update

#: Optimizer names.
POLICY_OPTIMIZER = "policy"
VALUE_OPTIMIZER = "value"


class GePPOLearner(Learner):
    """Builds GePPO's learner pipeline and routes the Algorithm's per-iteration decisions."""

    @override(Learner)
    def build(self) -> None:
        super().build()
        self.clip_eps = self.config.clip_eps  # read once, not per minibatch
        self.targets_connector = ComputeGePPOTargets(
            gamma=self.config.gamma, lambda_=self.config.lambda_, vtrace_clip=self.config.vtrace_clip)
        if self._learner_connector is not None and self.config.add_default_connectors_to_learner_pipeline:
            self._learner_connector.prepend(AddOneTsToEpisodesAndTruncate())
            self._learner_connector.append(self.targets_connector)

    @classmethod
    @override(Learner)
    def rl_module_required_apis(cls) -> list[type]:
        return [ValueFunctionAPI]

    @override(Learner)
    def before_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self.targets_connector.weights_by_version = timesteps[WEIGHTS_BY_VERSION]
        self.targets_connector.reward_scale = timesteps[REWARD_SCALE]
        for module_id in self.module.keys():
            optimizer = self.get_optimizer(module_id, POLICY_OPTIMIZER)
            self._set_optimizer_lr(optimizer, timesteps[POLICY_LR])

    @override(Learner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        batch, self._update_batch = self._update_batch, None
        for module_id, module_batch in batch.policy_batches.items():
            self.log_policy_change(module_id, module_batch)
        for module_id in self.module.keys():
            self.module[module_id].unwrapped().set_obs_stats(*timesteps[OBS_STATS])

    def log_policy_change(self, module_id: str, batch: dict[str, Any]) -> None:
        """Log TV, clip fraction, KL and entropy of the update over all stored samples."""
        raise NotImplementedError

    @override(Learner)
    def _make_batch_if_necessary(self, training_data):
        # Keep the full train batch of this update: the TV estimate that drives the lr rule
        # is measured over all stored samples after the last gradient step.
        self._update_batch = super()._make_batch_if_necessary(training_data)
        return self._update_batch

    @override(Learner)
    def postprocess_gradients_for_module(self, *, module_id, config=None, module_gradients_dict):
        # Clip the policy's gradient norm only; the value function is never clipped.
        grads = dict(module_gradients_dict)
        if config.grad_clip:
            policy_grads = self.filter_param_dict_for_optimizer(
                grads, self.get_optimizer(module_id, POLICY_OPTIMIZER))
            norm = self._get_clip_function()(policy_grads, grad_clip=config.grad_clip,
                                             grad_clip_by=config.grad_clip_by)
            grads.update(policy_grads)
            if norm is not None:
                self.metrics.log_value((module_id, "policy_grad_norm"), norm, window=1)
        return grads
