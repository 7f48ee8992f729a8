"""GePPO's training step on RLlib's old API stack (RolloutWorkers and :class:`GePPOTorchPolicy`).

:class:`GePPO` mixes this in and runs it when the config selects the old stack with
``.api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)``.
An iteration mirrors the new stack's ``training_step``, with the same store, statistics, lr rule
and metrics:

1. sample n env steps with pi_k from the RolloutWorkers;
2. append them to the FIFO store of the last M batches; update the running observation and
   return statistics;
3. recompute pi_k log-probs, values and V-trace advantages for every stored sample on the
   policy's device (never the workers' collection-time advantages), then ``num_epochs`` x
   ``num_minibatches`` gradient steps;
4. adapt the policy lr from the TV estimate of the update;
5. install the new observation statistics and sync the weights to the workers, waiting for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.policy import Policy
from ray.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch, concat_samples
from ray.rllib.utils.annotations import OldAPIStack, override
from ray.rllib.utils.metrics import (
    LEARN_ON_BATCH_TIMER,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_TRAINED,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_TRAINED,
    NUM_GRAD_UPDATES_LIFETIME,
    SAMPLE_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
)
from ray.rllib.utils.metrics.learner_info import LEARNER_STATS_KEY
from ray.rllib.utils.typing import ResultDict

from rllib_geppo.learner import OBS_STATS, POLICY_LR, REWARD_SCALE, WEIGHTS_BY_VERSION
from rllib_geppo.torch_policy import SEGMENT_END, VERSION, GePPOTorchPolicy


class OldAPIStackTraining:
    """The old-API-stack half of :class:`rllib_geppo.GePPO` (a mixin; see the module docstring).

    Uses the Algorithm's store, statistics and helpers shared with the new stack
    (``_update_inputs``, ``_fold_running_stats``, ``_minibatch_size``, ``_adapt_policy_lr``,
    ``_store_metrics``). Metrics land in ``result["info"]["learner"]["default_policy"]
    ["learner_stats"]``.
    """

    @classmethod
    @override(Algorithm)
    def get_default_policy_class(cls, config) -> type[Policy]:
        return GePPOTorchPolicy

    @OldAPIStack
    def _training_step_old_api_stack(self) -> ResultDict:
        config = self.config
        with self._timers[SAMPLE_TIMER]:
            batch = synchronous_parallel_sample(worker_set=self.env_runner_group,
                                                max_env_steps=config.samples_per_iteration,
                                                sample_timeout_s=config.sample_timeout_s)
        if not batch:
            return {}
        batch = batch.as_multi_agent().policy_batches[DEFAULT_POLICY_ID]
        self._counters[NUM_ENV_STEPS_SAMPLED] += batch.env_steps()
        self._counters[NUM_AGENT_STEPS_SAMPLED] += batch.agent_steps()

        # Versions count updates; every sample of a batch comes from one policy (blocking sync).
        self.store.add([batch], version=self.store.batches[-1].version + 1 if self.store.batches else 0)
        ends = np.flatnonzero(batch[SEGMENT_END])
        self._fold_running_stats(batch[SampleBatch.OBS], np.split(batch[SampleBatch.REWARDS], ends[:-1] + 1))

        policy: GePPOTorchPolicy = self.get_policy()
        inputs = self._update_inputs()
        with self._timers[LEARN_ON_BATCH_TIMER]:
            stats = self._update_policy_old_api_stack(policy, inputs)
        stats.update(self._store_metrics())
        self._adapt_policy_lr(stats["tv"])

        policy.set_obs_stats(*inputs[OBS_STATS])
        with self._timers[SYNCH_WORKER_WEIGHTS_TIMER]:
            # timeout_seconds=None waits: RLlib's default (0) is fire-and-forget, and GePPO's
            # analysis needs each new batch to come from the new policy.
            self.env_runner_group.sync_weights(
                policies=[DEFAULT_POLICY_ID], timeout_seconds=None,
                global_vars={"timestep": self._counters[NUM_AGENT_STEPS_SAMPLED]})
        return {DEFAULT_POLICY_ID: {LEARNER_STATS_KEY: stats,
                                    NUM_AGENT_STEPS_TRAINED: self.store.num_steps,
                                    NUM_GRAD_UPDATES_LIFETIME: policy.num_grad_updates}}

    def _update_policy_old_api_stack(self, policy: GePPOTorchPolicy,
                                     inputs: dict[str, Any]) -> dict[str, Any]:
        """Targets under pi_k for the whole store, then epochs x minibatches of gradient steps.

        Each epoch visits ``len // minibatch_size`` minibatches of a fresh permutation (the
        remainder, if any, sits the epoch out). Returns the last minibatch's losses and the
        update's policy change.
        """
        batch = policy.compute_targets(self._update_batch_old_api_stack(),
                                       weights_by_version=inputs[WEIGHTS_BY_VERSION],
                                       reward_scale=inputs[REWARD_SCALE])
        policy.set_policy_lr(inputs[POLICY_LR])
        steps = len(batch)
        size = min(self._minibatch_size(), steps)
        for _ in range(self.config.num_epochs):
            order = (torch.randperm(steps, device=policy.device) if self.config.shuffle_batch_per_epoch
                     else torch.arange(steps, device=policy.device))
            for start in range(0, steps - size + 1, size):
                rows = order[start:start + size]
                fetches = policy.learn_on_batch(SampleBatch({k: v[rows] for k, v in batch.items()}))
        self._counters[NUM_ENV_STEPS_TRAINED] += steps
        self._counters[NUM_AGENT_STEPS_TRAINED] += steps
        return {**fetches[LEARNER_STATS_KEY], **policy.policy_change_stats(batch)}

    def _update_batch_old_api_stack(self) -> SampleBatch:
        """All stored samples, oldest first, each tagged with the version of its policy."""
        tagged = []
        for stored in self.store.batches:
            for batch in stored.episodes:
                batch = batch.copy(shallow=True)  # the store's batches stay as collected
                batch[VERSION] = np.full(len(batch), stored.version)
                tagged.append(batch)
        return concat_samples(tagged)
