"""`GePPOLearner`: one GePPO update per iteration inside RLlib's Learner.

The Algorithm calls ``LearnerGroup.update(batch=..., timesteps={UPDATE_INPUTS: inputs})`` once
per iteration with every stored sample, laid out as trajectory segments
(:mod:`rllib_geppo.core.segments`); every learner gets all of them. :meth:`GePPOLearner.update`
then, on the learner's device:

1. sets the policy lr of this update;
2. evaluates pi_k and the critic on the whole store and computes V-trace advantages, value
   targets and sample weights (:mod:`rllib_geppo.core.targets`), once, before any gradient step;
3. runs ``num_epochs`` x ``minibatches_per_epoch`` gradient steps on slices of those tensors,
   with several learners each on its slice of every global minibatch
   (:mod:`rllib_geppo.core.minibatches`); which step runs is chosen once per module and named in
   each result as ``step_path`` (:mod:`rllib_geppo.learner.step_path`: by default on the CPU,
   GePPO's loss with its gradients written out by hand, compiled ahead of time);
4. measures TV, clip fraction, KL and entropy over the store after the last step;
5. installs the observation statistics the next policy samples with.

It takes the place of RLlib's generic update loop, which would run a learner-connector pass over
all stored episodes (M times the new data) and wrap each minibatch in batch objects and metrics.
Multiple learners, GPUs and checkpoints work as for any RLlib Learner: the learners take the
steps one learner would, and the module, optimizer and ``weights_seq_no`` are RLlib's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.typing import ModuleID, ResultDict

from rllib_geppo.core.update_inputs import UPDATE_INPUTS, UpdateInputs

#: The optimizer's name: one Adam with a policy and a value parameter group.
OPTIMIZER = "geppo_adam"
#: The result key naming each module's minibatch step (:mod:`rllib_geppo.learner.step_path`).
STEP_PATH = "step_path"


class GePPOLearner(Learner):
    """Runs GePPO's update (see the module docstring); the torch specifics are in
    :class:`rllib_geppo.learner.torch_learner.GePPOTorchLearner`."""

    @classmethod
    @override(Learner)
    def rl_module_required_apis(cls) -> list[type]:
        return [ValueFunctionAPI]

    @override(Learner)
    def update(
        self,
        batch: MultiAgentBatch | None = None,
        *,
        training_data: TrainingData | None = None,
        timesteps: dict[str, Any] | None = None,
        **kwargs,
    ) -> ResultDict:
        """One GePPO update over the store (several learners: each on its slice of every minibatch).

        ``timesteps[UPDATE_INPUTS]`` holds the Algorithm's :class:`UpdateInputs` of each module
        in the batch, ``timesteps[WEIGHTS_SEQ_NO]`` the version of the policy the update makes;
        RLlib's ``num_epochs``/``minibatch_size`` keywords are not used (the inputs fix the
        steps).
        """
        inputs: dict[ModuleID, UpdateInputs] = timesteps[UPDATE_INPUTS]
        training_data = training_data or TrainingData(batch=batch)
        training_data.validate()
        training_data.solve_refs()
        self.before_gradient_based_update(timesteps=timesteps)
        # The version of the policy this update makes, as the Algorithm counts them.
        self.set_state({WEIGHTS_SEQ_NO: timesteps[WEIGHTS_SEQ_NO]})
        for module_id, module_batch in training_data.batch.policy_batches.items():
            stats, steps_trained = self.update_module(module_id, dict(module_batch), inputs[module_id])
            self.metrics.log_dict(stats, key=module_id, window=1)
            self.metrics.log_value((module_id, STEP_PATH), self.step_path(module_id), reduce="item")
            self._log_steps_trained(module_id, steps_trained)
        self.after_gradient_based_update(timesteps=timesteps)
        return self.metrics.reduce()

    @property
    def weights_seq_no(self) -> int:
        """The version of the learner's weights: RLlib's count of the updates they took."""
        return self.get_state(components=[])[WEIGHTS_SEQ_NO]

    def update_module(
        self, module_id: ModuleID, layout: dict[str, np.ndarray], inputs: UpdateInputs
    ) -> tuple[dict[str, float], int]:
        """Steps 1-5 of the module docstring for one module; returns its metrics and the
        number of samples its gradient steps used (summed over minibatches)."""
        raise NotImplementedError

    def step_path(self, module_id: ModuleID) -> str:
        """Which minibatch step the module's last update took
        (:mod:`rllib_geppo.learner.step_path`)."""
        raise NotImplementedError

    def _log_steps_trained(self, module_id: ModuleID, steps: int) -> None:
        """RLlib's step counters, once per update (RLlib's own loop logs them per minibatch)."""
        self.metrics.log_value((module_id, WEIGHTS_SEQ_NO), self.weights_seq_no, window=1)
        self.metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED), steps, reduce="sum")
        self.metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), steps, reduce="lifetime_sum")
        for key, reduce in (
            (NUM_ENV_STEPS_TRAINED, "sum"),
            (NUM_ENV_STEPS_TRAINED_LIFETIME, "lifetime_sum"),
            (NUM_MODULE_STEPS_TRAINED, "sum"),
            (NUM_MODULE_STEPS_TRAINED_LIFETIME, "lifetime_sum"),
        ):
            self.metrics.log_value((ALL_MODULES, key), steps, reduce=reduce)
